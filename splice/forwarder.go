package splice

// The Forwarder: construction, the epoll loop (Run), hand-overs from other
// goroutines, the timer, and Close.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/epoll"
	"github.com/gopasta/gopasta/internal/faults"
	"github.com/gopasta/gopasta/internal/slots"
	"github.com/gopasta/gopasta/internal/sock"
	"github.com/gopasta/gopasta/internal/yield"
)

// Event tags: the 64-bit epoll data holds the slot index (Fd) and kind,
// side and generation (Pad). The generation lets the loop ignore events
// still queued for a slot whose connection was closed earlier in the batch.
const (
	kindWake = iota
	kindTimer
	kindRetry
	kindTCP
	kindUDP
	kindListen
	// kindPeer: another event loop of the process has events (WatchPeer).
	kindPeer
	// kindUDPLate is never an epoll tag: a pendingAdd of LateUDP.
	kindUDPLate
)

func tag(kind, side int, slot int, gen uint32) unix.EpollEvent {
	return unix.EpollEvent{Fd: int32(slot), Pad: int32(uint32(kind) | uint32(side)<<3 | gen<<4)}
}

// nextGen is the generation after g; it wraps within the bits tag keeps.
func nextGen(g uint32) uint32 { return (g + 1) & (1<<28 - 1) }

func untag(ev *unix.EpollEvent) (kind, side, slot int, gen uint32) {
	p := uint32(ev.Pad)
	return int(p & 7), int(p >> 3 & 1), int(ev.Fd), p >> 4
}

const (
	maxEvents = 256
	// tcpRounds bounds splice rounds per direction per wake-up so one busy
	// connection cannot starve the others; leftovers run next cycle.
	tcpRounds = 16
	udpRounds = 4
	tickEvery = time.Second
)

// Stats is a snapshot of a Forwarder's counters.
type Stats struct {
	TCPActive, TCPTotal, TCPResets uint64
	TCPBytes                       [2]uint64 // [0]: first fd to second, [1]: back
	UDPActive, UDPTotal            uint64
	UDPDatagrams, UDPBytes         uint64
	UDPDrops                       uint64
	UDPHeld                        uint64 // datagrams that waited for a full send buffer
	PipesCreated, PipesReused      uint64
	PipeSize                       int
}

type counters struct {
	tcpActive, tcpTotal, tcpResets atomic.Uint64
	tcpBytes                       [2]atomic.Uint64
	udpActive, udpTotal            atomic.Uint64
	udpDatagrams, udpBytes         atomic.Uint64
	udpDrops                       atomic.Uint64
	udpHeld                        atomic.Uint64
}

// Forwarder moves bytes between pairs of sockets with one epoll loop.
type Forwarder struct {
	opts     Options
	log      *slog.Logger
	pipeSize int
	pool     *pipePool
	ctr      counters

	ep                    *epoll.Epoll // blocks, parks or holds, by the processors the process has (package epoll)
	epfd, wakefd, timerfd int          // epfd: ep's, for epoll_ctl
	retryfd               int          // one-shot: paused listeners (listen.go)
	retryAt               int64        // f.now the retry timer is armed for; 0: not armed
	reserve               *sock.Spare  // out of descriptors, to refuse waiting connections (listen.go)

	lst listenTable

	mu      sync.Mutex
	pending []pendingAdd // handed over by Add*, taken by the loop
	closed  bool
	running bool
	done    chan struct{} // closed when Run returns
	stop    atomic.Bool

	reservedTCP, reservedUDP atomic.Int64 // admission counters, include pending

	// Loop-owned state below; only the Run goroutine (or Close after Run
	// has returned) touches it.
	events  []unix.EpollEvent
	spare   []pendingAdd
	tcp     slots.Table[tcpConn]
	udp     slots.Table[udpFlow]
	again   []int // TCP slots whose pump ran out of budget
	again2  []int
	now     int64         // nanoseconds since base, refreshed each cycle
	cycles  uint64        // cycles run, for listeners telling a queue from a single connection
	yield   yield.Yielder // a Gosched every few ms, so sysmon leaves the loop's P alone
	base    time.Time
	timerOn bool
	// tickLost and retryLost: arming the tick or the retry timer failed,
	// and the loop does their work itself (timersLost) until it is armed.
	tickLost, retryLost bool
	udpBatch            *mmsgBatch
	keyed               map[UDPKey]int32 // flows added with AddUDPPeer, by name (udp.go)
}

type pendingAdd struct {
	kind  int
	fd    [2]int
	pipes [2]*pipe
	data  [][]byte // UDP: early datagrams for fd[1] (AddUDP), or late ones (LateUDP)
	key   UDPKey   // UDP: the flow's name (AddUDPPeer, LateUDP); zero for none
}

// NewForwarder probes the pipe size and sets up epoll. It does not start
// the loop; call Run.
func NewForwarder(opts Options) (*Forwarder, error) {
	if opts.PipeSize < 0 || opts.PipePool < 0 || opts.MaxTCP < 0 || opts.MaxUDP < 0 ||
		opts.IdleTimeout < 0 || opts.UDPTimeout < 0 || opts.UDPStreamTimeout < 0 || opts.UDPBatch < 0 {
		return nil, errors.New("splice: negative option")
	}
	if opts.PipePool == 0 {
		opts.PipePool = 16
	}
	nofile := fdLimit()
	if opts.MaxTCP == 0 {
		opts.MaxTCP = max((nofile-64)/6, 1)
	}
	if opts.MaxUDP == 0 {
		opts.MaxUDP = max(min(4096, (nofile-64)/2), 1)
	}
	if opts.UDPTimeout == 0 {
		opts.UDPTimeout = DefaultUDPTimeout
	}
	if opts.UDPStreamTimeout == 0 {
		opts.UDPStreamTimeout = DefaultUDPStreamTimeout
	}
	if opts.UDPBatch == 0 {
		opts.UDPBatch = 32
	}
	opts.UDPBatch = min(opts.UDPBatch, 1024) // UIO_MAXIOV bounds sendmmsg
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	size, err := probePipeSize(opts.PipeSize)
	if err != nil {
		return nil, err
	}
	f := &Forwarder{
		opts: opts, log: log, pipeSize: size,
		pool: newPipePool(size, opts.PipePool),
		epfd: -1, wakefd: -1, timerfd: -1, retryfd: -1,
		events: make([]unix.EpollEvent, maxEvents),
		base:   time.Now(),
	}
	if err := f.setup(); err != nil {
		f.closeFds()
		return nil, err
	}
	return f, nil
}

func (f *Forwarder) setup() error {
	var err error
	if f.ep, err = epoll.New(); err != nil {
		return fmt.Errorf("splice: %w", err)
	}
	f.epfd = f.ep.Fd()
	// The splice loop's peers answer within a moment (loopback sockets
	// of processes on this machine): where it may, it holds.
	f.ep.AllowHold()
	if f.wakefd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("splice: eventfd: %w", err)
	}
	if f.timerfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		return fmt.Errorf("splice: timerfd_create: %w", err)
	}
	if f.retryfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		return fmt.Errorf("splice: timerfd_create: %w", err)
	}
	f.reserve = sock.NewSpare(f.wakefd)
	for _, r := range []struct{ fd, kind int }{{f.wakefd, kindWake}, {f.timerfd, kindTimer}, {f.retryfd, kindRetry}} {
		ev := tag(r.kind, 0, 0, 0)
		ev.Events = unix.EPOLLIN
		if err := unix.EpollCtl(f.epfd, unix.EPOLL_CTL_ADD, r.fd, &ev); err != nil {
			return fmt.Errorf("splice: epoll_ctl: %w", err)
		}
	}
	return nil
}

func fdLimit() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<20 {
		return 1 << 20
	}
	return int(rl.Cur)
}

// WatchPeer watches another event loop's epoll descriptor (the engine's),
// so that the loop does not hold the processor while that one has events
// (package epoll, "Holding the processor"). Call it once, before Run.
func (f *Forwarder) WatchPeer(fd int) error { return f.ep.WatchPeer(fd, tag(kindPeer, 0, 0, 0)) }

// PipeSize is the pipe size the probe settled on.
func (f *Forwarder) PipeSize() int { return f.pipeSize }

// Stats returns the current counters; safe from any goroutine.
func (f *Forwarder) Stats() Stats {
	created, reused, _ := f.pool.counts()
	return Stats{
		TCPActive: f.ctr.tcpActive.Load(), TCPTotal: f.ctr.tcpTotal.Load(),
		TCPResets: f.ctr.tcpResets.Load(),
		TCPBytes:  [2]uint64{f.ctr.tcpBytes[0].Load(), f.ctr.tcpBytes[1].Load()},
		UDPActive: f.ctr.udpActive.Load(), UDPTotal: f.ctr.udpTotal.Load(),
		UDPDatagrams: f.ctr.udpDatagrams.Load(), UDPBytes: f.ctr.udpBytes.Load(),
		UDPDrops: f.ctr.udpDrops.Load(), UDPHeld: f.ctr.udpHeld.Load(),
		PipesCreated: created, PipesReused: reused, PipeSize: f.pipeSize,
	}
}

// enqueue hands a new pair to the loop. On failure the caller still owns
// (and must close) the fds and pipes.
func (f *Forwarder) enqueue(p pendingAdd) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	f.pending = append(f.pending, p)
	f.mu.Unlock()
	f.wake()
	return nil
}

func (f *Forwarder) wake() {
	var one = [8]byte{1}
	// EAGAIN means the counter is already non-zero: the loop will wake.
	_, _ = unix.Write(f.wakefd, one[:])
}

// Run runs the event loop on the calling goroutine until ctx is cancelled
// or Close is called. It returns nil after Close, ctx.Err() after
// cancellation. Connections stay open across a cancelled Run; Close ends
// them. Run does not lock the goroutine to its OS thread, and should be
// called from one that is not locked: the loop's periodic yield is then
// nearly free, where a locked thread pays for a hand-off of its P each
// time (package yield says why both matter).
func (f *Forwarder) Run(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	if f.running {
		f.mu.Unlock()
		return errors.New("splice: Run called twice")
	}
	f.running = true
	f.done = make(chan struct{})
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running = false
		close(f.done)
		f.mu.Unlock()
	}()

	stopWake := context.AfterFunc(ctx, f.wake)
	defer stopWake()

	for {
		if f.stop.Load() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.ep.Wait(f.events, f.waitTimeout())
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("splice: epoll_wait: %w", err)
		}
		f.now = int64(time.Since(f.base))
		f.cycles++
		f.cycle(f.events[:n])
		f.timersLost()
		f.yield.Maybe(f.now)
	}
}

// waitTimeout is how long the loop may wait for events: not at all while
// connections have work left over, a bounded time while a timer the loop
// needs could not be armed (timersLost), else for ever (negative).
func (f *Forwarder) waitTimeout() time.Duration {
	switch {
	case len(f.again) > 0:
		return 0
	case f.retryLost:
		return sock.MinAcceptBackoff
	case f.tickLost:
		return tickEvery
	}
	return -1
}

// timersLost does the work of a timer that could not be armed
// (timerfd_settime failed): paused listeners are retried and idle flows
// expired from the loop's own wake-ups, which waitTimeout bounds, until
// the timer is armed again.
func (f *Forwarder) timersLost() {
	if f.retryLost {
		f.retryListeners()
	}
	if f.tickLost {
		f.tickLost = false
		f.tick()
		f.armTimer()
	}
}

// cycle handles one batch of events, then connections left over from
// earlier cycles, then newly handed-over pairs.
func (f *Forwarder) cycle(events []unix.EpollEvent) {
	redo := f.again
	f.again = f.again2[:0]
	for i := range events {
		ev := &events[i]
		kind, side, slot, gen := untag(ev)
		switch kind {
		case kindWake:
			var buf [8]byte
			_, _ = unix.Read(f.wakefd, buf[:])
			f.takePending()
		case kindTimer:
			var buf [8]byte
			_, _ = unix.Read(f.timerfd, buf[:])
			f.tick()
		case kindPeer:
			f.ep.PeerEvent()
		case kindRetry:
			var buf [8]byte
			_, _ = unix.Read(f.retryfd, buf[:])
			f.retryListeners()
		case kindListen:
			f.listenEvent(slot, gen)
		case kindTCP:
			if c := &f.tcp.Items[slot]; c.active && c.gen == gen {
				f.tcpEvent(slot, side, ev.Events)
			}
		case kindUDP:
			if u := &f.udp.Items[slot]; u.active && u.gen == gen {
				f.udpEvent(slot, side, ev.Events)
			}
		}
	}
	for _, slot := range redo {
		c := &f.tcp.Items[slot]
		c.queued = false
		if c.active {
			f.tcpPump(slot)
		}
	}
	f.again2 = redo[:0]
}

func (f *Forwarder) takePending() {
	f.mu.Lock()
	list := f.pending
	f.pending = f.spare[:0]
	f.mu.Unlock()
	for i := range list {
		p := &list[i]
		switch p.kind {
		case kindTCP:
			f.startTCP(p)
		case kindUDP:
			f.startUDP(p)
		case kindUDPLate:
			f.udpLate(p)
		}
		*p = pendingAdd{}
	}
	f.spare = list[:0]
}

// armTimer starts the once-a-second tick that expires idle flows; tick
// stops it again when nothing can expire.
func (f *Forwarder) armTimer() {
	if f.timerOn {
		return
	}
	it := unix.ItimerSpec{
		Interval: unix.NsecToTimespec(int64(tickEvery)),
		Value:    unix.NsecToTimespec(int64(tickEvery)),
	}
	if err := setTimer(f.timerfd, &it); err == nil {
		f.timerOn = true
	} else {
		f.tickLost = true
	}
}

func (f *Forwarder) tick() {
	f.now = int64(time.Since(f.base))
	need := false
	if f.opts.IdleTimeout > 0 {
		for slot := range f.tcp.Items {
			c := &f.tcp.Items[slot]
			if !c.active {
				continue
			}
			need = true
			if f.now-c.last > int64(f.opts.IdleTimeout) {
				f.log.Debug("splice: tcp idle timeout", "fds", c.fd)
				f.tcpClose(slot, false)
			}
		}
	}
	for slot := range f.udp.Items {
		u := &f.udp.Items[slot]
		if !u.active {
			continue
		}
		need = true
		limit := f.opts.UDPTimeout
		if u.seen[1] > 0 && (u.seen[0] > 1 || u.seen[1] > 1) {
			limit = f.opts.UDPStreamTimeout
		}
		if f.now-u.last > int64(limit) {
			f.udpClose(slot)
		}
	}
	if !need && f.timerOn {
		var it unix.ItimerSpec
		if err := setTimer(f.timerfd, &it); err == nil {
			f.timerOn = false
		}
	}
}

// Close stops Run, closes every connection, flow and pipe. It is safe to
// call more than once.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.stop.Store(true)
	running, done := f.running, f.done
	f.mu.Unlock()
	if running {
		f.wake()
		<-done
	}
	// The loop is gone: this goroutine now owns the loop state.
	f.closeListeners()
	f.mu.Lock()
	list := f.pending
	f.pending = nil
	f.mu.Unlock()
	for i := range list {
		p := &list[i]
		if p.kind == kindUDPLate {
			continue // datagrams only: no descriptors, no reservation
		}
		closeFd(p.fd[0])
		closeFd(p.fd[1])
		f.pool.put(p.pipes[0])
		f.pool.put(p.pipes[1])
		f.release(p.kind)
	}
	for slot := range f.tcp.Items {
		if f.tcp.Items[slot].active {
			f.tcpClose(slot, false)
		}
	}
	for slot := range f.udp.Items {
		if f.udp.Items[slot].active {
			f.udpClose(slot)
		}
	}
	f.pool.close()
	f.closeFds()
	return nil
}

func (f *Forwarder) release(kind int) {
	if kind == kindTCP {
		f.reservedTCP.Add(-1)
	} else {
		f.reservedUDP.Add(-1)
	}
}

func (f *Forwarder) closeFds() {
	if f.reserve != nil {
		f.reserve.Close()
	}
	if f.ep != nil {
		f.ep.Close()
		f.ep, f.epfd = nil, -1
	}
	for _, fd := range []*int{&f.wakefd, &f.timerfd, &f.retryfd} {
		closeFd(*fd)
		*fd = -1
	}
}

func closeFd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// epollAdd registers fd with the loop's epoll, where a test build may
// inject a failure (package faults).
func (f *Forwarder) epollAdd(fd int, ev *unix.EpollEvent) error {
	if err := faults.At(faults.EpollCtl); err != nil {
		return err
	}
	return sock.EpollCtl(f.epfd, unix.EPOLL_CTL_ADD, fd, ev)
}

// setTimer is timerfd_settime(2) on fd, where a test build may inject a
// failure (package faults).
func setTimer(fd int, it *unix.ItimerSpec) error {
	if err := faults.At(faults.TimerfdSettime); err != nil {
		return err
	}
	return unix.TimerfdSettime(fd, 0, it, nil)
}
