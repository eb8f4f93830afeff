// Package yield keeps an event loop that sleeps in epoll_wait in step with
// the Go scheduler.
//
// # Theory of operation
//
// Both event loops (the engine's and the splice forwarder's) run one
// goroutine, which sleeps in epoll_wait and otherwise never returns to the
// scheduler. The runtime's monitor thread (sysmon) treats a goroutine that
// has run on the same scheduling tick for 10 ms as a runaway. Caught
// running Go code, it is signalled and preempted, which starts a new tick.
// Caught in a system call, which is where an event loop spends its time,
// its P is taken away and handed off instead; getting the P back at the
// end of the call does not start a new tick, so sysmon takes it again at
// every look until one happens to catch the loop outside a call. Each take
// also resets sysmon's back-off to its shortest sleep, 20 µs, so sysmon
// wakes thousands of times a second (docs/performance.md, change 9).
//
// A loop that yields on its own, well inside the 10 ms, starts a new tick
// each time, so sysmon never sees a runaway, leaves a sleeping loop's P
// alone while another P is idle, and backs off to its 10 ms sleep.
//
// What a yield costs depends on whether the goroutine is locked to its
// thread. Unlocked, with nothing else to run, the same thread picks it up
// again at once: no context switch (TestUnlockedYieldIsCheap). Locked, the
// thread hands its P to another thread, which finds the goroutine and
// hands the P back: two or more context switches and futex calls every
// time; where a wake-up is most of a transaction's cost, that is a large
// share of a request/response exchange's (docs/performance.md, change 12).
// So the loops do not lock their threads; nothing they do needs a
// particular one (they never change namespace, and the threads that do are
// locked and discarded). The engine's loop holds its thread only while its
// link is backlogged and it does not sleep (fwd's threadPin).
package yield

import (
	"runtime"
	"time"
)

// Interval is how often a loop yields: half the runtime's 10 ms
// forced-preemption threshold (forcePreemptNS in the runtime, 10 ms as of
// Go 1.26), so that any two of sysmon's looks at the loop, however far
// apart, see a new scheduling tick.
const Interval = 5 * time.Millisecond

// Yielder yields at most once per Interval. The zero value is ready; it is
// owned by one loop.
type Yielder struct {
	last int64
}

// Maybe yields the processor (runtime.Gosched) if Interval has passed
// since the last time it did, with now a monotonic clock in nanoseconds
// (the loop's own). Call it once per loop cycle, after the events are
// handled.
func (y *Yielder) Maybe(now int64) {
	if y.due(now) {
		runtime.Gosched()
	}
}

// due is Maybe's rule without the yield: it advances last when Interval
// has passed since it, and reports whether it did.
func (y *Yielder) due(now int64) bool {
	if now-y.last < int64(Interval) {
		return false
	}
	y.last = now
	return true
}
