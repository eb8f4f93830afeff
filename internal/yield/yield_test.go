package yield

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDue(t *testing.T) {
	iv := int64(Interval)
	var y Yielder
	for i, c := range []struct {
		now  int64
		want bool
	}{
		{0, false},      // a fresh loop at time zero has nothing to catch up
		{iv - 1, false}, // not yet
		{iv, true},      // exactly one interval
		{iv + 1, false}, // counted from the last yield, not from zero
		{2*iv - 1, false},
		{2 * iv, true},
		{10 * iv, true}, // a long gap yields once, not once per interval missed
		{10*iv + 1, false},
		{9 * iv, false}, // a clock that steps back does not yield
		{11 * iv, true},
		{11*iv + iv, true},
		{12*iv + iv/2, false},
	} {
		if got := y.due(c.now); got != c.want {
			t.Errorf("step %d: due(%d) = %v, want %v", i, c.now, got, c.want)
		}
	}
}

// TestSysmonBacksOff runs what the event loops run, a goroutine (not
// locked to its thread) sleeping in epoll_wait, and counts the voluntary
// context switches of the whole process beyond the loop's own sleeps,
// which are mostly the runtime's monitor waking up. Without yields it keeps
// taking the loop's P and wakes every few tens of microseconds; with Maybe
// once per cycle it backs off.
func TestSysmonBacksOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 0.8 s")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("with one P the runtime takes a P in a system call whether or not the loop yields")
	}
	run := func(yield bool) int64 {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			t.Fatalf("epoll_create1: %v", err)
		}
		defer unix.Close(epfd)
		// A timer every 50 µs stands in for the traffic of a
		// request/response exchange.
		tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
		if err != nil {
			t.Fatalf("timerfd_create: %v", err)
		}
		defer unix.Close(tfd)
		every := unix.NsecToTimespec(50e3)
		if err := unix.TimerfdSettime(tfd, 0, &unix.ItimerSpec{Interval: every, Value: every}, nil); err != nil {
			t.Fatalf("timerfd_settime: %v", err)
		}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, tfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(tfd)}); err != nil {
			t.Fatalf("epoll_ctl: %v", err)
		}
		events := make([]unix.EpollEvent, 1)
		var buf [8]byte
		var all0, all1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &all0)
		var y Yielder
		var waits int64
		start := time.Now()
		for time.Since(start) < 400*time.Millisecond {
			waits++
			if n, _ := unix.EpollWait(epfd, events, 10); n > 0 {
				_, _ = unix.Read(tfd, buf[:])
			}
			if yield {
				y.Maybe(int64(time.Since(start)))
			}
		}
		_ = unix.Getrusage(unix.RUSAGE_SELF, &all1)
		// Each wait sleeps at most once; the rest is other threads.
		return max(0, all1.Nvcsw-all0.Nvcsw-waits)
	}
	base := run(false)
	if base < 900 {
		t.Skipf("without yields the process switched only %d times beyond the loop's own sleeps in 0.4 s: too few to tell the yields' effect apart", base)
	}
	if got := run(true); got > base/3 {
		t.Errorf("with yields: got %d context switches beyond the loop's sleeps in 0.4 s, want at most a third of the %d without", got, base)
	}
}

// TestUnlockedYieldIsCheap shows why the loops' goroutines are not locked
// to their threads: a Gosched from an unlocked goroutine, with nothing else
// to run, is picked up again by the same thread, while a locked one hands
// its P to another thread and waits to get it back, two or more context
// switches each time.
func TestUnlockedYieldIsCheap(t *testing.T) {
	const yields = 500
	switches := func(locked bool) int64 {
		done := make(chan int64)
		go func() {
			if locked {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			var a, b unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &a)
			for range yields {
				runtime.Gosched()
			}
			_ = unix.Getrusage(unix.RUSAGE_SELF, &b)
			done <- b.Nvcsw - a.Nvcsw
		}()
		return <-done
	}
	got := switches(false)
	t.Logf("%d yields: %d voluntary context switches unlocked, %d locked", yields, got, switches(true))
	// Room for what else the runtime and the test binary do meanwhile.
	if got > yields/5 {
		t.Errorf("%d yields from an unlocked goroutine: got %d voluntary context switches of the process, want at most %d", yields, got, yields/5)
	}
}
