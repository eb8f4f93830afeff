// Package epoll is an event loop's epoll instance, which waits in the way
// that costs the process least for the processors it has.
//
// # Theory of operation
//
// With more than one processor (GOMAXPROCS), Wait blocks in epoll_pwait,
// as a system call the runtime is told of. While another processor is
// idle, the runtime's monitor (sysmon) leaves the loop's processor alone
// for 10 ms, and the loops yield every 5 ms (package yield), so the
// wake-up is the thread's return from the call: one epoll_pwait per
// sleep.
//
// With one processor (a process confined to one CPU), a loop blocked in a
// system call holds the only processor, so sysmon takes it after at most
// a few tens of microseconds and hands it to another thread, which must
// be woken (futex) and scheduled; so does the loop's thread when the call
// returns and wants a processor back. On a CPU shared with the peers of a
// request/response exchange, those thread switches cost as much as the
// exchange's own work. So New registers the descriptor with the runtime's
// poller (an epoll descriptor is readable while it has events ready), and
// Wait asks for events without blocking; with none, the goroutine parks
// until the runtime's poller sees the descriptor readable, on whichever
// thread runs the scheduler at that moment, with no processor to hand
// over and no thread held in a system call. That is not the way with
// more processors: an idle processor's thread sleeps in the runtime's
// poller, and every event of a busy loop would wake it, only to find the
// loop at work.
//
// The runtime watches the descriptor edge-triggered. That is safe because
// Wait parks only after an epoll_wait that found the ready list empty: an
// event after it adds to the list, which the kernel signals to the
// watching poller as a new edge (TestWaitAfterTimeout). An edge the
// runtime saw while the loop was busy makes at most one spurious wake-up.
//
// # Holding the processor
//
// A parked wait costs each wake-up three or four epoll_pwait calls and a
// pass through the scheduler: the loop's wait that found nothing, the
// runtime's poll, and the loop's wait once woken. Where it may, Wait first
// holds: one epoll_pwait that blocks for up to holdFor with the
// goroutine's thread and processor held, made as a raw system call, so
// that the runtime sees a goroutine running and neither hands the
// processor on nor wakes another thread; it parks only when the hold
// ran out. Nothing else of the process runs on that processor
// meanwhile, so Wait holds only for a loop that allows it (AllowHold),
// when MayHold says so and no peer loop had events lately:
//
//   - The process has one processor, and had one when New made the
//     instance (so that the runtime's poller watches it).
//   - No goroutine of the process has said it wants a processor soon
//     (Want): the work a loop hands to another goroutine waits for no
//     hold.
//   - The process's other event loop is watched through the holding
//     loop's own epoll set (WatchPeer): an event of it ends the hold, and
//     the loop parks for peerTurn after it (PeerEvent), so that the other
//     loop runs. Two epoll sets cannot watch each other (the kernel
//     refuses the cycle), so of two loops one holds.
//
// A goroutine none of these see (the runtime's timers, a control-socket
// client) waits for one hold at most. The runtime's monitor takes a
// goroutine that runs 10 ms without a reschedule for a runaway and
// signals it, which ends a hold early (EINTR: the loop parks); the loops
// yield every 5 ms (package yield), so that does not happen while they
// work.
package epoll

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Epoll is one event loop's epoll instance. It is owned by one goroutine.
type Epoll struct {
	fd int
	f  *os.File        // registered with the runtime's poller; nil: not
	rc syscall.RawConn // f's

	// What the poll function reads and writes: fields, not a closure's
	// captures, so that Wait allocates nothing.
	events   []unix.EpollEvent
	n        int
	err      error
	poll     func(uintptr) bool
	deadline bool // a read deadline is set on f

	holds     bool  // AllowHold was called
	peerUntil int64 // nanoseconds since base before which Wait does not hold (PeerEvent); 0: none
	// peerFd and peerEv: the peer loop's descriptor (a duplicate; -1:
	// none) and its watch, set by WatchPeer; peerArmed: the one-shot
	// watch is armed, as far as the loop knows.
	peerFd    int
	peerEv    unix.EpollEvent
	peerArmed bool
}

const (
	// holdFor bounds a held wait; epoll_pwait counts in milliseconds.
	holdFor = 1 // ms
	// peerTurn is how long a loop parks rather than holds after a peer
	// loop had events.
	peerTurn = 2 * time.Millisecond
)

// base is the origin of peerUntil's clock.
var base = time.Now()

// New creates an epoll instance (close-on-exec), registered with the
// runtime's poller when the process has one processor.
func New() (*Epoll, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if runtime.GOMAXPROCS(0) > 1 {
		return &Epoll{fd: fd, peerFd: -1}, nil
	}
	// Non-blocking, so that os.NewFile hands it to the runtime's poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("epoll: O_NONBLOCK: %w", err)
	}
	e := &Epoll{fd: fd, f: os.NewFile(uintptr(fd), "epoll"), peerFd: -1}
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
// A timeout that passes returns 0 and no error. A wait for ever holds the
// processor first where it may ("Holding the processor").
func (e *Epoll) Wait(events []unix.EpollEvent, timeout time.Duration) (int, error) {
	if timeout < 0 && e.mayHold() {
		if n, err := e.hold(events); n > 0 || err != nil {
			return n, err
		}
	}
	if e.f == nil {
		return e.block(events, timeout)
	}
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
// poller returns an error. It must not be called while a Wait blocks or
// holds: those system calls name the descriptor by its number.
func (e *Epoll) Close() error {
	if e.peerFd >= 0 {
		unix.Close(e.peerFd)
	}
	if e.f == nil {
		return unix.Close(e.fd)
	}
	return e.f.Close()
}

// block is epoll_pwait blocking for up to timeout, as a system call the
// runtime is told of. A signal (the runtime's own, for preemption) ends a
// bounded wait early with no events, and a wait for ever not at all.
func (e *Epoll) block(events []unix.EpollEvent, timeout time.Duration) (int, error) {
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	for {
		n, err := unix.EpollWait(e.fd, events, ms)
		switch {
		case err != unix.EINTR:
			return n, err
		case ms >= 0:
			return 0, nil
		}
	}
}

// hold is one epoll_pwait that blocks for up to holdFor with the
// processor held; it returns 0 and no error when nothing came or a signal
// ended it.
func (e *Epoll) hold(events []unix.EpollEvent) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	r, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(e.fd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), holdFor, 0, 0)
	switch errno {
	case 0:
		return int(r), nil
	case unix.EINTR:
		return 0, nil
	}
	return 0, errno
}

// mayHold reports whether Wait may hold: MayHold, and no peer loop had
// events within peerTurn.
func (e *Epoll) mayHold() bool {
	if !e.holds || e.f == nil || !MayHold() {
		return false
	}
	if e.peerUntil != 0 {
		if int64(time.Since(base)) < e.peerUntil {
			return false
		}
		e.peerUntil = 0
	}
	if !e.peerArmed && e.peerFd >= 0 {
		if unix.EpollCtl(e.fd, unix.EPOLL_CTL_MOD, e.peerFd, &e.peerEv) != nil {
			return false // unwatched, the peer could wait for a hold
		}
		e.peerArmed = true
	}
	return true
}

// AllowHold lets Wait hold the processor ("Holding the processor"). Call
// it before the loop starts.
func (e *Epoll) AllowHold() { e.holds = true }

// WatchPeer adds another event loop's epoll descriptor to e's set, with
// the loop's own tag for it (ev's Fd and Pad): it is readable while that
// loop has events, which ends a held wait. The loop calls PeerEvent when
// it sees the tag. The watch is one-shot, re-armed before the next hold,
// so that a parked loop is not woken by every event of its peer. e
// watches a duplicate of fd, which it closes with itself, so that the
// number it re-arms stays the peer's however long either lives. An
// instance that never holds (made with more than one processor) watches
// nothing. Call it once, before the loop starts.
func (e *Epoll) WatchPeer(fd int, ev unix.EpollEvent) error {
	if e.f == nil {
		return nil
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("epoll: peer loop: %w", err)
	}
	ev.Events = unix.EPOLLIN | unix.EPOLLET | unix.EPOLLONESHOT
	if err := unix.EpollCtl(e.fd, unix.EPOLL_CTL_ADD, dup, &ev); err != nil {
		unix.Close(dup)
		return fmt.Errorf("epoll_ctl (peer loop): %w", err)
	}
	e.peerFd, e.peerEv, e.peerArmed = dup, ev, true
	return nil
}

// PeerEvent tells e that its peer loop had events (WatchPeer): Wait parks
// rather than holds for peerTurn, so that the peer runs.
func (e *Epoll) PeerEvent() {
	e.peerArmed = false
	e.peerUntil = int64(time.Since(base) + peerTurn)
}

// wanted counts the goroutines that said, through Want, that they want a
// processor soon.
var wanted atomic.Int32

// Want tells the process's loops that a goroutine wants a processor soon
// (n = 1, when work is handed to it) or no longer does (n = -1, when the
// work is done): while any does, MayHold is false.
func Want(n int) { wanted.Add(int32(n)) }

// MayHold reports whether a loop may hold the processor while it waits:
// the process has one, and no goroutine wants it (Want).
func MayHold() bool { return wanted.Load() <= 0 && runtime.GOMAXPROCS(0) == 1 }
