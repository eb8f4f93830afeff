package ns

// Noticing that a namespace went away, for attach mode's exit.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// watchPoll bounds how long a missed or impossible notification delays
// noticing that the namespace is gone.
const watchPoll = time.Second

// usePidfd is switched off by tests to exercise the polling fallback.
var usePidfd = true

var procNetNSRe = regexp.MustCompile(`^/proc/([0-9]+)/(?:task/([0-9]+)/)?ns/net$`)

// A Watch tells when a network namespace goes away, for attach mode's
// automatic exit. Everything it reads at run time goes through descriptors
// opened when it starts, so it keeps working once gopasta has lost its view
// of the file system (internal/sandbox): a pidfd and the process's
// /proc/PID/stat, or the namespace file's directory and an inotify watch
// on it.
type Watch struct {
	gone chan struct{}
	dir  *os.File // the directory looked up in (file watches), or nil
}

// Gone is closed when the namespace is gone.
func (w *Watch) Gone() <-chan struct{} { return w.gone }

// Dir is the directory in which a file watch looks the namespace's file up
// by name (fstatat(2)), nil for process watches: the only path lookup the
// watch makes at run time, which a seccomp filter can confine to it.
func (w *Watch) Dir() *os.File { return w.dir }

// WatchNetNS starts watching the network namespace at path.
//
// For /proc/PID/ns/net (and /proc/PID/task/TID/ns/net) the namespace goes
// with the process: a pidfd reports its exit at once, and a once-a-second
// read of its /proc stat file, opened now, catches it too (once the process
// is gone the open file reports ESRCH, even if the PID is reused). For any
// other path (/run/netns/NAME, a bind mount) it is when the file is
// removed, renamed or unmounted: inotify on its directory triggers a check
// of the file's device and inode, looked up in the directory opened now,
// which also runs once a second.
//
// Cancelling ctx stops the watch without closing the channel.
func WatchNetNS(ctx context.Context, path string) (*Watch, error) {
	f, err := openNetNS(path)
	if err != nil {
		return nil, err
	}
	f.Close()
	if m := procNetNSRe.FindStringSubmatch(filepath.Clean(path)); m != nil {
		return watchProcess(ctx, m[1], m[2])
	}
	return watchFile(ctx, path)
}

func watchProcess(ctx context.Context, pidStr, tidStr string) (*Watch, error) {
	pid, err := strconv.Atoi(pidStr)
	if err != nil {
		return nil, fmt.Errorf("ns: watch: bad PID %q", pidStr)
	}
	statPath := "/proc/" + pidStr + "/stat"
	if tidStr != "" {
		statPath = "/proc/" + pidStr + "/task/" + tidStr + "/stat"
	}
	stat, err := os.Open(statPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = ErrNoProcess
		}
		return nil, fmt.Errorf("ns: watch process %s: %w", pidStr, err)
	}
	buf := make([]byte, 1024)
	first, err := preadProcStat(stat, buf)
	if err != nil {
		stat.Close()
		if errors.Is(err, unix.ESRCH) {
			err = ErrNoProcess
		}
		return nil, fmt.Errorf("ns: watch process %s: %w", pidStr, err)
	}
	gone := func() bool {
		st, err := preadProcStat(stat, buf)
		if err != nil {
			return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
		}
		return st.startTime != first.startTime || st.state == 'Z' || st.state == 'X'
	}
	if gone() {
		stat.Close()
		return nil, fmt.Errorf("ns: watch process %s: %w", pidStr, ErrNoProcess)
	}
	// pidfd_open only takes thread group leaders (before PIDFD_THREAD),
	// and may be missing on old kernels: polling alone suffices then.
	var wake *os.File
	if usePidfd && (tidStr == "" || tidStr == pidStr) {
		if fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK); err == nil {
			wake = os.NewFile(uintptr(fd), "pidfd")
			// The PID might have been reused between the check and the open.
			if gone() {
				wake.Close()
				stat.Close()
				return nil, fmt.Errorf("ns: watch process %s: %w", pidStr, ErrNoProcess)
			}
		}
	}
	return startWatch(ctx, gone, wake, true, stat), nil
}

// preadProcStat reads and parses a /proc stat file from its start, into
// buf (a stat line is well under 1 KiB).
func preadProcStat(f *os.File, buf []byte) (procStat, error) {
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return procStat{}, err
	}
	return parseProcStat(buf[:n])
}

func watchFile(ctx context.Context, path string) (*Watch, error) {
	// Symlinks are resolved now: later lookups happen relative to the
	// directory, where an absolute link would no longer resolve.
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, &EnterError{Path: path, Op: "watch", Err: unwrapPathError(err)}
	}
	dirPath, name := filepath.Split(real)
	dir, err := os.OpenFile(dirPath, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, &EnterError{Path: path, Op: "watch", Err: unwrapPathError(err)}
	}
	dfd := int(dir.Fd())
	var first unix.Stat_t
	if err := unix.Fstatat(dfd, name, &first, 0); err != nil {
		dir.Close()
		return nil, &EnterError{Path: path, Op: "watch", Err: err}
	}
	gone := func() bool {
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, 0); err != nil {
			// Only a vanished path counts: a transient error (EINTR,
			// ENOMEM, EACCES after a chmod) must not end gopasta.
			return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
		}
		// An unmount (ip netns del unmounts, then unlinks) uncovers the
		// mount point's own inode.
		return st.Dev != first.Dev || st.Ino != first.Ino
	}
	// Without inotify (no permission, instances exhausted) polling still
	// catches it within a second.
	var wake *os.File
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err == nil {
		const mask = unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_DELETE_SELF |
			unix.IN_MOVE_SELF | unix.IN_UNMOUNT | unix.IN_ATTRIB
		if _, err := unix.InotifyAddWatch(fd, dirPath, mask); err == nil {
			wake = os.NewFile(uintptr(fd), "inotify")
		} else {
			unix.Close(fd)
		}
	}
	w := startWatch(ctx, gone, wake, false, dir)
	w.dir = dir
	return w, nil
}

// startWatch checks gone once a second and whenever wake becomes readable
// (wake may be nil; isPidfd says what it is), closing the returned watch's
// channel when it reports true. held is closed when the watch ends.
func startWatch(ctx context.Context, gone func() bool, wake *os.File, isPidfd bool, held *os.File) *Watch {
	w := &Watch{gone: make(chan struct{})}
	woken := make(chan struct{}, 1)
	if wake != nil {
		go readWakeups(wake, isPidfd, woken)
	}
	go func() {
		if wake != nil {
			defer wake.Close() // also ends readWakeups
		}
		defer held.Close()
		tick := time.NewTicker(watchPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-woken:
			}
			// Both may be ready at once, and select picks at random: a
			// cancelled watch never fires.
			if ctx.Err() != nil {
				return
			}
			if gone() {
				close(w.gone)
				return
			}
		}
	}()
	return w
}

// readWakeups turns readability of f into non-blocking sends on woken,
// until f is closed. For inotify each batch of events is one wake-up; a
// pidfd becomes readable once, when its process exits. Waiting goes through
// the runtime's poller, so no OS thread is tied up.
func readWakeups(f *os.File, isPidfd bool, woken chan<- struct{}) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 4096)
	for {
		var failed bool
		err := rc.Read(func(fd uintptr) bool {
			if isPidfd {
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				k, _ := unix.Poll(pfd, 0)
				return k > 0
			}
			_, err := unix.Read(int(fd), buf)
			if err == unix.EAGAIN {
				return false
			}
			failed = err != nil && err != unix.EINTR
			return true
		})
		if err != nil || failed {
			return
		}
		select {
		case woken <- struct{}{}:
		default:
		}
		if isPidfd {
			return // it stays readable: one wake-up is all it has
		}
	}
}
