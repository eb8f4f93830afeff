package epoll

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// eventfd returns a non-blocking eventfd registered with e, level-triggered.
func eventfd(t *testing.T, e *Epoll) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	return register(t, e, fd, err)
}

// timerfd returns a non-blocking timerfd registered with e: what fires
// during a hold, which keeps the one processor from every goroutine.
func timerfd(t *testing.T, e *Epoll) int {
	t.Helper()
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	return register(t, e, fd, err)
}

// register adds fd, just made (err: how that went), to e's set for
// EPOLLIN, level-triggered, and closes it when the test ends.
func register(t *testing.T, e *Epoll, fd int, err error) int {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(e.Fd(), unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		t.Fatal(err)
	}
	return fd
}

// holdUntil holds until events come, a few holds at most: a signal (the
// runtime's) may end one before they do.
func holdUntil(e *Epoll, events []unix.EpollEvent) (n int, err error) {
	for range 5 {
		if n, err = e.hold(events); n > 0 || err != nil {
			break
		}
	}
	return n, err
}

// arm has timerfd fd fire once, after d.
func arm(t *testing.T, fd int, d time.Duration) {
	t.Helper()
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(fd, 0, &spec, nil); err != nil {
		t.Fatal(err)
	}
}

func newEpoll(t *testing.T) *Epoll {
	t.Helper()
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func signal(fd int) { unix.Write(fd, []byte{1, 0, 0, 0, 0, 0, 0, 0}) }

// modes are the two ways New makes an instance: blocking in epoll_pwait
// (more than one processor) and parking in the runtime's poller (one).
var modes = []struct {
	name  string
	procs int
}{{"blocking", 2}, {"parking", 1}}

// withProcs runs the test with GOMAXPROCS n.
func withProcs(t *testing.T, n int) {
	t.Helper()
	old := runtime.GOMAXPROCS(n)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// TestNewMode: the runtime's poller watches an instance made with one
// processor, and none made with more.
func TestNewMode(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			withProcs(t, m.procs)
			e := newEpoll(t)
			if got, want := e.f != nil, m.procs == 1; got != want {
				t.Errorf("registered with the runtime's poller: got %v, want %v", got, want)
			}
			peerLoop := newEpoll(t)
			if err := e.WatchPeer(peerLoop.Fd(), unix.EpollEvent{}); err != nil {
				t.Fatalf("WatchPeer: %v", err)
			}
			if got, want := e.peerFd >= 0, m.procs == 1; got != want {
				t.Errorf("watching the peer loop: got %v, want %v", got, want)
			}
		})
	}
}

func TestWait(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			withProcs(t, m.procs)
			testWait(t)
		})
	}
}

func testWait(t *testing.T) {
	e := newEpoll(t)
	fd := eventfd(t, e)
	events := make([]unix.EpollEvent, 4)

	// Nothing ready: zero timeout returns at once, a timeout after it.
	if n, err := e.Wait(events, 0); n != 0 || err != nil {
		t.Errorf("Wait(0) with nothing ready: got %d, %v, want 0, nil", n, err)
	}
	start := time.Now()
	if n, err := e.Wait(events, 50*time.Millisecond); n != 0 || err != nil {
		t.Errorf("Wait(50ms) with nothing ready: got %d, %v, want 0, nil", n, err)
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("Wait(50ms) returned after %v, want about 50ms", d)
	}

	// An event while parked (for ever) wakes it.
	go func() { time.Sleep(20 * time.Millisecond); signal(fd) }()
	done := make(chan int, 1)
	go func() { n, _ := e.Wait(events, -1); done <- n }()
	select {
	case n := <-done:
		if n != 1 || events[0].Fd != int32(fd) {
			t.Errorf("Wait(-1): got %d events (first fd %d), want 1 on fd %d", n, events[0].Fd, fd)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait(-1): no return 5s after the eventfd was signalled")
	}

	// Level-triggered: still readable, so a wait after the deadline was
	// cleared returns at once.
	if n, err := e.Wait(events, -1); n != 1 || err != nil {
		t.Errorf("Wait(-1) with the eventfd still readable: got %d, %v, want 1, nil", n, err)
	}
}

// TestWaitAfterTimeout: a wait that timed out does not miss an event
// that comes later (the runtime's poller watches the descriptor
// edge-triggered).
func TestWaitAfterTimeout(t *testing.T) {
	oneProcessor(t)
	e := newEpoll(t)
	fd := eventfd(t, e)
	events := make([]unix.EpollEvent, 4)
	for i := range 20 {
		if n, _ := e.Wait(events, time.Millisecond); n != 0 {
			t.Fatalf("round %d: got %d events before any signal, want 0", i, n)
		}
		go signal(fd)
		n, err := e.Wait(events, 5*time.Second)
		if n != 1 || err != nil {
			t.Fatalf("round %d: got %d, %v within 5s of a signal, want 1 event", i, n, err)
		}
		var b [8]byte
		unix.Read(fd, b[:])
	}
}

func TestCloseEndsWait(t *testing.T) {
	oneProcessor(t)
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := e.Wait(make([]unix.EpollEvent, 1), -1); done <- err }()
	time.Sleep(20 * time.Millisecond)
	e.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Wait parked when the epoll was closed: got nil error, want one")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait parked when the epoll was closed: still waiting 5s later")
	}
}

// TestWaitAllocs: a wait that finds events, and one that blocks or parks
// first, allocate nothing.
func TestWaitAllocs(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			withProcs(t, m.procs)
			testWaitAllocs(t)
		})
	}
}

func testWaitAllocs(t *testing.T) {
	e := newEpoll(t)
	fd := eventfd(t, e)
	events := make([]unix.EpollEvent, 4)
	signal(fd)
	if a := testing.AllocsPerRun(100, func() { e.Wait(events, -1) }); a != 0 {
		t.Errorf("Wait with an event ready: got %v allocs, want 0", a)
	}
	var b [8]byte
	unix.Read(fd, b[:])
	if a := testing.AllocsPerRun(20, func() { e.Wait(events, time.Microsecond) }); a != 0 {
		t.Errorf("Wait that times out: got %v allocs, want 0", a)
	}
}

// oneProcessor runs the test with GOMAXPROCS 1, where Wait parks, and
// may hold.
func oneProcessor(t *testing.T) {
	t.Helper()
	withProcs(t, 1)
}

func TestMayHold(t *testing.T) {
	oneProcessor(t)
	if !MayHold() {
		t.Fatal("MayHold with GOMAXPROCS 1 and nothing wanted: got false, want true")
	}
	Want(1)
	if MayHold() {
		t.Error("MayHold while a goroutine wants a processor: got true, want false")
	}
	Want(-1)
	if !MayHold() {
		t.Error("MayHold after Want(-1): got false, want true")
	}
	runtime.GOMAXPROCS(2)
	if MayHold() {
		t.Error("MayHold with GOMAXPROCS 2: got true, want false")
	}
}

// TestHoldWait: a holding Wait returns an event that comes during the
// hold, and one that comes after it ran out (the loop parked).
func TestHoldWait(t *testing.T) {
	oneProcessor(t)
	e := newEpoll(t)
	e.AllowHold()
	fd := eventfd(t, e)
	events := make([]unix.EpollEvent, 4)
	if !e.mayHold() {
		t.Fatal("mayHold with one processor, AllowHold and no peer: got false, want true")
	}
	// The hold itself: nothing comes, and it gives up after its bound;
	// an event comes during it, and it returns that.
	// A signal (the runtime's) ends a hold early, so of a few holds one
	// lasts its bound.
	var longest time.Duration
	for range 5 {
		start := time.Now()
		if n, err := e.hold(events); n != 0 || err != nil {
			t.Errorf("hold with nothing ready: got %d, %v, want 0, nil", n, err)
		}
		d := time.Since(start)
		if d > time.Second {
			t.Errorf("hold with nothing ready returned after %v, want about %v", d, holdFor*time.Millisecond)
		}
		longest = max(longest, d)
	}
	if longest < holdFor*time.Millisecond {
		t.Errorf("5 holds with nothing ready: the longest returned after %v, want one of about %v", longest, holdFor*time.Millisecond)
	}
	// Nothing of this process can run during the hold (it keeps the one
	// processor): the kernel's timer is what comes.
	tfd := timerfd(t, e)
	arm(t, tfd, 200*time.Microsecond)
	if n, err := holdUntil(e, events); n != 1 || err != nil || events[0].Fd != int32(tfd) {
		t.Errorf("hold with a timer firing in 200µs: got %d (first fd %d), %v, want the timer's event", n, events[0].Fd, err)
	}
	unix.EpollCtl(e.Fd(), unix.EPOLL_CTL_DEL, tfd, nil)

	// Wait, which holds first: an event already there, and events from
	// another goroutine, which runs once a hold runs out and Wait parks.
	for _, after := range []time.Duration{0, 200 * time.Microsecond, 20 * time.Millisecond} {
		done := make(chan struct{})
		go func() {
			time.Sleep(after)
			signal(fd)
			close(done)
		}()
		n, err := e.Wait(events, -1)
		if n != 1 || err != nil || events[0].Fd != int32(fd) {
			t.Errorf("signal after %v: got %d events (first fd %d), %v, want 1 on fd %d", after, n, events[0].Fd, err, fd)
		}
		<-done
		var b [8]byte
		unix.Read(fd, b[:])
	}
}

// TestHoldDoesNotStarve: with one processor, a loop that holds whenever
// it waits leaves the process's other goroutines their turn, a hold at a
// time.
func TestHoldDoesNotStarve(t *testing.T) {
	oneProcessor(t)
	e := newEpoll(t)
	e.AllowHold()
	fd := eventfd(t, e)
	stop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() { // a loop that an event wakes every 100 µs
		defer close(loopDone)
		events := make([]unix.EpollEvent, 4)
		var b [8]byte
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n, _ := e.Wait(events, -1); n > 0 {
				unix.Read(fd, b[:])
			}
		}
	}()
	go func() {
		runtime.LockOSThread()
		for {
			select {
			case <-stop:
				signal(fd)
				return
			default:
			}
			signal(fd)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	start := time.Now()
	for range 20 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("20 sleeps of 1 ms beside a holding loop took %v, want well under 2s", d)
	}
	select {
	case <-loopDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the holding loop did not stop within 5s")
	}
}

// TestHoldEndsOnPeer: an event of the watched peer loop ends a hold, and
// the loop parks for peerTurn after PeerEvent; the watch is re-armed for
// the next hold. The peer's event is a timer of its set: nothing of this
// process runs during a hold.
func TestHoldEndsOnPeer(t *testing.T) {
	oneProcessor(t)
	e := newEpoll(t)
	e.AllowHold()
	peerLoop := newEpoll(t)
	tfd := timerfd(t, peerLoop)
	const peerTag = -7
	if err := e.WatchPeer(peerLoop.Fd(), unix.EpollEvent{Fd: peerTag}); err != nil {
		t.Fatal(err)
	}
	events := make([]unix.EpollEvent, 4)
	for round := range 2 {
		if !e.mayHold() {
			t.Fatalf("round %d: mayHold before the peer's event: got false, want true", round)
		}
		arm(t, tfd, 200*time.Microsecond)
		n, err := holdUntil(e, events)
		if n != 1 || err != nil || events[0].Fd != peerTag {
			t.Fatalf("round %d: hold with the peer's timer firing in 200µs: got %d events (first tag %d), %v, want the peer's tag %d", round, n, events[0].Fd, err, peerTag)
		}
		e.PeerEvent()
		if e.mayHold() {
			t.Errorf("round %d: mayHold right after PeerEvent: got true, want false", round)
		}
		var b [8]byte
		unix.Read(tfd, b[:]) // the peer loop serves its event
		time.Sleep(peerTurn + time.Millisecond)
	}
	if !e.mayHold() {
		t.Errorf("mayHold %v after PeerEvent: got false, want true", peerTurn+time.Millisecond)
	}
}
