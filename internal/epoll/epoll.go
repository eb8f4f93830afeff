// Package epoll is an event loop's epoll instance whose waits sleep in the
// Go runtime's own poller instead of in epoll_wait(2).
//
// # Theory of operation
//
// An event loop that blocks in epoll_wait holds its thread in a system
// call: the runtime's monitor (sysmon) keeps looking at it, and when the
// call outlasts its look, hands the loop's processor to another thread,
// which must be woken (futex) and scheduled; so does the loop's thread
// when the call returns and wants a processor back. On a CPU shared with
// the peers of a request/response exchange, those thread switches cost as
// much as the exchange's own work.
//
// Here the loop's epoll descriptor is itself registered with the runtime's
// poller (an epoll descriptor is readable while it has events ready).
// Wait asks for events without blocking; with none, the goroutine parks
// until the runtime's poller sees the descriptor readable, on whichever
// thread runs the scheduler at that moment, with no processor to hand
// over and no thread held in a system call. Two loops in one process park
// in the one poller thread.
//
// The runtime watches the descriptor edge-triggered. That is safe because
// Wait parks only after an epoll_wait that found the ready list empty: an
// event after it adds to the list, which the kernel signals to the
// watching poller as a new edge (TestWaitAfterTimeout). An edge the
// runtime saw while the loop was busy makes at most one spurious wake-up.
package epoll

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Epoll is one event loop's epoll instance. It is owned by one goroutine.
type Epoll struct {
	fd int
	f  *os.File
	rc syscall.RawConn

	// What the poll function reads and writes: fields, not a closure's
	// captures, so that Wait allocates nothing.
	events   []unix.EpollEvent
	n        int
	err      error
	poll     func(uintptr) bool
	deadline bool // a read deadline is set on f
}

// New creates an epoll instance (close-on-exec) registered with the
// runtime's poller.
func New() (*Epoll, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile hands it to the runtime's poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("epoll: O_NONBLOCK: %w", err)
	}
	e := &Epoll{fd: fd, f: os.NewFile(uintptr(fd), "epoll")}
	if e.rc, err = e.f.SyscallConn(); err != nil {
		e.f.Close()
		return nil, fmt.Errorf("epoll: %w", err)
	}
	e.poll = e.tryWait
	return e, nil
}

// Fd is the epoll descriptor, for epoll_ctl.
func (e *Epoll) Fd() int { return e.fd }

// tryWait is one epoll_wait that does not block: it reports true (done)
// when it found events or failed, false to park until the descriptor is
// readable. It is a raw system call, which the runtime is not told of:
// one that cannot block needs none of what the runtime does around a
// call (entersyscall), and that includes waking sysmon from its sleep
// when every processor was idle, which is where a parked loop leaves
// them.
func (e *Epoll) tryWait(fd uintptr) bool {
	e.n, e.err = 0, nil
	if len(e.events) == 0 {
		return true
	}
	r, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&e.events[0])), uintptr(len(e.events)), 0, 0, 0)
	switch errno {
	case 0:
		e.n = int(r)
	case unix.EINTR:
	default:
		e.err = errno
	}
	return e.n > 0 || e.err != nil
}

// Wait fills events with the events ready, waiting for one for up to
// timeout (negative: for ever; zero: not at all), and returns how many.
// A timeout that passes returns 0 and no error.
func (e *Epoll) Wait(events []unix.EpollEvent, timeout time.Duration) (int, error) {
	e.events = events
	if timeout == 0 {
		e.tryWait(uintptr(e.fd))
		return e.n, e.err
	}
	switch {
	case timeout > 0:
		e.deadline = true
		if err := e.f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return 0, err
		}
	case e.deadline:
		e.deadline = false
		if err := e.f.SetReadDeadline(time.Time{}); err != nil {
			return 0, err
		}
	}
	// Read calls poll first, and parks only if it found nothing.
	if err := e.rc.Read(e.poll); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, nil
		}
		return 0, err
	}
	return e.n, e.err
}

// Close closes the epoll descriptor; a Wait parked in the runtime's
// poller returns an error.
func (e *Epoll) Close() error { return e.f.Close() }
