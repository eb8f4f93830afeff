package logging

// The -l log file, kept under --log-size by dropping its oldest lines.

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// File is the log file of -l. It never grows past its cap: when a line
// would take it over, the oldest lines make room, at least a quarter of
// the cap at a time and always whole lines, and a note at the top says so.
// The newest lines stay, which are the ones that explain a failure.
//
// Lines are appended with write(2) on a descriptor opened O_APPEND (the
// sandbox's supervisor writes its line to the same descriptor). Making
// room is done in place, with the descriptor's O_APPEND off for the
// moment: the kept lines are read and written forward over the dropped
// ones (pread64, pwrite64), then the file is cut (ftruncate). A reader
// that follows the file by its offset (tail -f) loses its place then, as
// with pasta's log.
type File struct {
	mu   sync.Mutex
	f    *os.File
	size int64 // bytes in the file, as we wrote them
	max  int64
	note []byte // the first line after room was made
	buf  []byte // the copy buffer, allocated on the first rotation
}

// rotateChunk is the copy buffer's size: the kept lines move in pieces
// this big.
const rotateChunk = 64 << 10

// OpenFile creates (or empties) path for logging, capped at max bytes
// (DefaultLogSize when max <= 0).
func OpenFile(path string, max int64) (*File, error) {
	if max <= 0 {
		max = DefaultLogSize
	}
	// O_RDWR: the kept lines are read back when making room.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open log file: %w", err)
	}
	return &File{f: f, max: max, note: []byte(fmt.Sprintf("gopasta: log kept under %d bytes (--log-size): older lines dropped\n", max))}, nil
}

// Write appends p, which should be whole lines, making room first if the
// file would go over its cap. A single line longer than the cap is cut to
// fit.
func (l *File) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	whole := len(p)
	if l.size+int64(len(p)) > l.max {
		if err := l.makeRoom(int64(len(p))); err != nil {
			return 0, err
		}
		if room := l.max - l.size; int64(len(p)) > room {
			p = p[:max(0, room)]
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	if err != nil {
		return n, err
	}
	// A line cut to fit the cap is still reported as written: the caller
	// cannot do better, and a short write would only produce a second error.
	return whole, nil
}

// makeRoom drops the oldest lines so that incoming bytes fit after them:
// at least a quarter of the cap, up to the end of the line the cut falls
// in.
func (l *File) makeRoom(incoming int64) error {
	fd := int(l.f.Fd())
	cut := max(l.max/4, l.size+incoming+int64(len(l.note))-l.max, int64(len(l.note)))
	start, err := l.lineStart(fd, cut)
	if err != nil {
		return err
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	// pwrite on an O_APPEND descriptor appends whatever the offset.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags&^unix.O_APPEND); err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags)

	dst := int64(len(l.note))
	if _, err := unix.Pwrite(fd, l.note, 0); err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	for src := start; src < l.size; {
		n, err := unix.Pread(fd, l.buf[:min(int64(len(l.buf)), l.size-src)], src)
		if err != nil {
			return fmt.Errorf("log file: %w", err)
		}
		if n == 0 {
			break // shorter than we thought: someone else cut it
		}
		if _, err := unix.Pwrite(fd, l.buf[:n], dst); err != nil {
			return fmt.Errorf("log file: %w", err)
		}
		src += int64(n)
		dst += int64(n)
	}
	if err := unix.Ftruncate(fd, dst); err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	l.size = dst
	return nil
}

// lineStart returns the offset of the first line that starts at or after
// off, or the file's size when none does (one long line: all of it goes).
func (l *File) lineStart(fd int, off int64) (int64, error) {
	if l.buf == nil {
		l.buf = make([]byte, rotateChunk)
	}
	for pos := off - 1; pos < l.size; {
		n, err := unix.Pread(fd, l.buf[:min(int64(len(l.buf)), l.size-pos)], pos)
		if err != nil {
			return 0, fmt.Errorf("log file: %w", err)
		}
		if n == 0 {
			break
		}
		for i, c := range l.buf[:n] {
			if c == '\n' {
				return pos + int64(i) + 1, nil
			}
		}
		pos += int64(n)
	}
	return l.size, nil
}

// Close closes the file.
func (l *File) Close() error { return l.f.Close() }

// Fd is the file's descriptor, for writers that must not take the lock
// (the sandbox's seccomp supervisor writes its one line with write(2)).
func (l *File) Fd() uintptr { return l.f.Fd() }

var _ io.WriteCloser = (*File)(nil)
