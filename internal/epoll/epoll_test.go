package epoll

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// eventfd returns a non-blocking eventfd registered with e, level-triggered.
func eventfd(t *testing.T, e *Epoll) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
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

func TestWait(t *testing.T) {
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

// TestWaitAllocs: a wait that finds events, and one that parks first,
// allocate nothing.
func TestWaitAllocs(t *testing.T) {
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
