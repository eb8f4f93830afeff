package fwd

// The event loop (Run): epoll over the link, the flows' sockets, the timer
// and the wake-up eventfd; the flows' timers; and the system calls the
// translators make (sysOps).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/epoll"
	"github.com/gopasta/gopasta/internal/faults"
	"github.com/gopasta/gopasta/internal/sock"
)

// Epoll tags: Fd carries a flow index (>= 0) or one of these, Pad the
// flow's generation so events of a closed, reused slot are ignored.
const (
	tagLink  = -1
	tagTimer = -2
	tagWake  = -3
	tagNeigh = -4 // the host's neighbour table (Options.Neighbours)
)

func (e *Engine) initPoll() error {
	var err error
	if e.ep, err = epoll.New(); err != nil {
		return fmt.Errorf("fwd: %w", err)
	}
	e.epfd = e.ep.Fd()
	if e.timerfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		return fmt.Errorf("fwd: timerfd_create: %w", err)
	}
	if e.wakefd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("fwd: eventfd: %w", err)
	}
	watch := []struct {
		fd, tag int
	}{{e.link.Fd(), tagLink}, {e.timerfd, tagTimer}, {e.wakefd, tagWake}}
	if e.opts.Neighbours != nil {
		watch = append(watch, struct{ fd, tag int }{e.opts.Neighbours.Fd(), tagNeigh})
	}
	for _, w := range watch {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(w.tag)}
		if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, w.fd, &ev); err != nil {
			return fmt.Errorf("fwd: epoll_ctl add fd %d: %w", w.fd, err)
		}
	}
	return nil
}

// Run forwards until ctx is done or the link fails, then closes every flow
// and returns (nil after cancellation). The loop is the only user of the
// flow table, so nothing on the data path takes a lock. Run locks its
// goroutine to an OS thread only while the link is backlogged (threadPin),
// and should be called from one that is not locked (package yield says
// why). Host sockets are created in the host's
// network namespace all the same: every thread that enters another
// namespace (package ns) is locked and discarded afterwards, so no thread
// the runtime schedules this goroutine on is in one. Run may be called
// once.
func (e *Engine) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("fwd: Run called twice")
	}
	if e.closed {
		return errors.New("fwd: Run after Close")
	}
	defer e.Close()

	stop := context.AfterFunc(ctx, func() {
		var one = [8]byte{1}
		sock.Write(e.wakefd, one[:])
	})
	defer stop()

	e.updateClock()
	e.nextTick = e.now + tickInterval
	e.armTimer(e.nextTick)
	// linkMore: the last readLink stopped at its budget with frames
	// possibly left, which the link's Fd need not report (fwd.Link), so the
	// next cycle does not sleep and reads the link again regardless.
	linkMore := false
	defer e.pin.release()
	for {
		timeout := time.Duration(-1) // for ever
		switch {
		case linkMore:
			timeout = 0
		case e.timerLost:
			// The timer could not be armed (armTimer): sleep no
			// longer than it would have, and run it below.
			timeout = time.Duration(max(e.timerAt-e.now, 0)) + time.Millisecond
			e.pin.release()
		default:
			e.pin.release() // about to sleep: any thread may wake it
		}
		n, err := e.ep.Wait(e.events, timeout)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("fwd: epoll_wait: %w", err)
		}
		e.updateClock()
		e.cycles++
		if e.timerLost && e.now >= e.timerAt {
			e.timerfdFired()
		}
		readLink := linkMore
		for i := range e.events[:n] {
			ev := &e.events[i]
			switch ev.Fd {
			case tagLink:
				readLink = true
			case tagTimer:
				var buf [8]byte
				sock.Read(e.timerfd, buf[:])
				e.timerfdFired()
			case tagWake:
				e.flush()
				return nil
			case tagNeigh:
				e.readNeighbours()
			default:
				e.sockEvent(ev.Fd, uint32(ev.Pad), ev.Events)
			}
		}
		if readLink {
			if linkMore, err = e.readLink(); err != nil {
				e.flush()
				return err
			}
			if linkMore {
				e.pin.hold()
			}
		}
		e.flush()
		e.reap()
		e.yield.Maybe(e.now)
	}
}

// threadPin keeps the loop's goroutine on one OS thread while the link is
// backlogged, and lets it go before the loop sleeps.
//
// The loop is not locked to a thread (package yield says why: an idle
// loop that wakes on a locked thread costs a hand-off of its P). Under a
// backlog the same freedom costs more: the loop's sendmmsg calls (one can
// carry megabytes of datagrams to copy) are system calls long enough for
// the runtime to take the loop's P away and start another thread, and
// each yield puts the goroutine on the global run queue, where a thread
// spinning on the other P can take it, so the loop spreads over several
// threads, one of them beside the namespace's sender. Held to one thread,
// it shares a CPU with the host's receiver, which takes each datagram as
// it comes, and leaves the sender the other CPU (docs/performance.md,
// change 17).
//
// A readLink that stops at its budget (the link still has frames) is the
// backlog signal; a cycle that is about to sleep in epoll_wait lets go.
// lock and unlock are runtime.LockOSThread and UnlockOSThread; tests
// count the calls instead.
type threadPin struct {
	held         bool
	lock, unlock func()
}

func (p *threadPin) hold() {
	if !p.held {
		p.lock()
		p.held = true
	}
}

func (p *threadPin) release() {
	if p.held {
		p.unlock()
		p.held = false
	}
}

// readLink reads and handles frames until the link has none, at most
// rxBatchesPerCycle batches, so host sockets are not starved. It reports
// whether it stopped at that budget, when the link may still hold frames.
func (e *Engine) readLink() (more bool, err error) {
	for range rxBatchesPerCycle {
		n, err := e.link.ReadBatch(e.rxBufs, e.rxSizes)
		if err != nil {
			return false, fmt.Errorf("fwd: reading the link: %w", err)
		}
		if n == 0 {
			return false, nil
		}
		for i := range n {
			e.rxFrames[i] = e.rxBufs[i][:e.rxSizes[i]]
		}
		e.handleFrames(e.rxFrames[:n])
		if n < len(e.rxBufs) {
			return false, nil
		}
	}
	return true, nil
}

func (e *Engine) sockEvent(idx int32, gen uint32, events uint32) {
	if idx <= tagListenBase { // a forwarded port's listener (listen.go)
		e.listenEvent(idx, gen)
		return
	}
	if idx < 0 || int(idx) >= len(e.ft.flows) {
		return
	}
	f := &e.ft.flows[idx]
	if f.state != flowActive || f.gen != gen {
		return // closed this cycle, or a stale event for a reused slot
	}
	if e.trace {
		e.traceSock(f, events)
	}
	if t := e.tr[f.proto]; t != nil {
		t.sockEvent(e, idx, events)
	}
}

// wakeAt asks for a timer run no later than t (engine nanoseconds), for
// translator deadlines shorter than the housekeeping tick.
func (e *Engine) wakeAt(t int64) {
	if t < e.timerAt {
		e.armTimer(t)
	}
}

func (e *Engine) armTimer(t int64) {
	e.timerAt = t
	d := t - e.now
	if d < 1000 {
		d = 1000 // 0 would disarm the timer
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d)}
	e.timerLost = false
	if err := faults.At(faults.TimerfdSettime); err != nil {
		e.timerLost = true
	} else if sock.TimerfdSettime(e.timerfd, &spec) != nil {
		e.timerLost = true
	}
}

// timerfdFired runs the due timers and arms the timerfd for the earliest
// deadline left, or the next tick. The rescan is what makes deadlines set
// while the timer was armed for an earlier one, or set by the hooks that
// just ran, fire on time: wakeAt only ever moves the timer earlier, and a
// hook's wakeAt compares against the time that just fired.
func (e *Engine) timerfdFired() {
	next := e.runTimers()
	if e.listenRetryAt != 0 && e.now >= e.listenRetryAt {
		e.retryListeners()
	}
	if e.listenRetryAt != 0 && (next == 0 || e.listenRetryAt < next) {
		next = e.listenRetryAt
	}
	if e.now >= e.nextTick {
		e.nextTick = e.now + tickInterval
		e.routerAdvertTick()
		if e.pcap != nil {
			if err := e.pcap.flush(); err != nil && !e.warned.pcap {
				e.warned.pcap = true
				e.log.Warn("pcap capture stopped", "err", err)
			}
		}
	}
	if next == 0 || next > e.nextTick {
		next = e.nextTick
	}
	e.armTimer(next)
}

// timerFloor is how far ahead a deadline that its hook left in the past
// counts, so that a hook which does not move its deadline cannot make the
// loop spin on the timer.
const timerFloor = int64(time.Millisecond)

// runTimers calls the timer hook of every flow whose deadline passed, and
// returns the earliest deadline still ahead (0: none). A scan of the
// active flows per timer run costs microseconds at the table sizes we
// allow, and needs no timer structure to maintain per packet.
func (e *Engine) runTimers() (next int64) {
	// Iterate by position: timer hooks may close flows, which only marks
	// them (slots are released in reap), so the active list is stable.
	for _, idx := range e.ft.active {
		f := &e.ft.flows[idx]
		if f.state != flowActive || f.Deadline == 0 {
			continue
		}
		if f.Deadline <= e.now {
			e.runTimer(f, idx)
			if f.state != flowActive || f.Deadline == 0 {
				continue
			}
		}
		d := f.Deadline
		if d <= e.now {
			d = e.now + timerFloor
		}
		if next == 0 || d < next {
			next = d
		}
	}
	return next
}

// runTimer calls f's timer hook (a flow without a translator just closes).
func (e *Engine) runTimer(f *Flow, idx int32) {
	if t := e.tr[f.proto]; t != nil {
		t.timer(e, idx)
	} else {
		e.closeFlow(idx)
	}
}

// sysOps is how translators touch host sockets. The kernel version is the
// real thing; tests and the fuzz target use a fake, so arbitrary namespace
// input never sends a packet anywhere.
type sysOps interface {
	socket(domain, typ, proto int) (int, error)
	bind(fd int, sa unix.Sockaddr) error
	connect(fd int, sa unix.Sockaddr) error
	setsockoptInt(fd, level, opt, val int) error
	bindToDevice(fd int, ifname string) error
	sendmmsg(fd int, msgs []unix.Mmsghdr) (int, error)
	recvmmsg(fd int, msgs []unix.Mmsghdr) (int, error)
	recvmsg(fd int, p, oob []byte, flags int) (n, oobn, rflags int, err error)
	close(fd int) error
	// watch registers fd with epoll for flow idx of generation gen.
	watch(fd int, idx int32, gen uint32, events uint32) error

	// Stream sockets (tcp_sys.go).
	recvmsgIov(fd int, iov []unix.Iovec, flags int) (int, error)
	sendmsgIov(fd int, iov []unix.Iovec) (int, error)
	discard(fd int, n int) (int, error)
	getsockoptInt(fd, level, opt int) (int, error)
	sendSpace(fd int) (int, error)
	// wantSpace asks the kernel for an EPOLLOUT edge once fd's send
	// buffer has drained (tcpTr.windowShort).
	wantSpace(fd int)
	shutdown(fd, how int) error
	abort(fd int) error
	// localReno gives a TCP socket connecting to a peer on this host
	// reno for congestion control (sock.LocalReno).
	localReno(fd int, dst netip.Addr)
}

type kernelSys struct {
	epfd int
	// Scratch for the raw syscalls in tcp_sys.go: fields of a heap object,
	// so passing their addresses allocates nothing.
	msg     unix.Msghdr
	optVal  int32
	optLen  uint32
	memInfo [skMemInfoVars]uint32
	linger  unix.Linger
	pollFd  unix.PollFd
	acc     sock.Acceptor // scratch for getsockname
}

func (k *kernelSys) socket(d, t, p int) (int, error)        { return sock.Socket(d, t, p) }
func (k *kernelSys) bind(fd int, sa unix.Sockaddr) error    { return unix.Bind(fd, sa) }
func (k *kernelSys) connect(fd int, sa unix.Sockaddr) error { return sock.ConnectSA(fd, sa) }
func (k *kernelSys) setsockoptInt(fd, l, o, v int) error    { return sock.SetsockoptInt(fd, l, o, v) }
func (k *kernelSys) bindToDevice(fd int, ifname string) error {
	return unix.BindToDevice(fd, ifname)
}
func (k *kernelSys) sendmmsg(fd int, m []unix.Mmsghdr) (int, error) {
	return sock.Mmsg(unix.SYS_SENDMMSG, fd, m, unix.MSG_DONTWAIT)
}
func (k *kernelSys) recvmmsg(fd int, m []unix.Mmsghdr) (int, error) {
	return sock.Mmsg(unix.SYS_RECVMMSG, fd, m, unix.MSG_DONTWAIT)
}
func (k *kernelSys) recvmsg(fd int, p, oob []byte, flags int) (int, int, int, error) {
	n, oobn, rf, _, err := unix.Recvmsg(fd, p, oob, flags)
	return n, oobn, rf, err
}
func (k *kernelSys) close(fd int) error               { return sock.Close(fd) }
func (k *kernelSys) localReno(fd int, dst netip.Addr) { sock.LocalReno(fd, dst, &k.acc) }
func (k *kernelSys) watch(fd int, idx int32, gen uint32, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: idx, Pad: int32(gen)}
	if err := faults.At(faults.EpollCtl); err != nil {
		return err
	}
	return sock.EpollCtl(k.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
}
