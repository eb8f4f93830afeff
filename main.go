// Command gopasta gives a process its own network without root: it runs a
// command in new user and network namespaces (or joins existing ones), creates
// a TAP device there and translates the namespace's traffic into ordinary host
// sockets, in the manner of pasta (passt.top).
package main

import (
	"os"
	"runtime"

	"github.com/gopasta/gopasta/ns"
)

//go:generate go run ./man/gen -o man/gopasta.1

func main() {
	// In spawn mode gopasta re-executes itself as the namespace's init; that
	// copy never reaches the command line parser.
	if ns.IsInitStub() {
		ns.InitStubMain()
	}
	setMaxProcs()
	os.Exit(runCLI(os.Args, os.Stderr))
}

// loopThreads is the number of event loops that sit in epoll_wait on
// threads of their own: the engine (fwd) and the splice forwarder.
const loopThreads = 2

// setMaxProcs gives the runtime a P for each event loop on top of one per
// CPU, unless GOMAXPROCS is set. A loop blocked in epoll_wait holds its P;
// with no idle P left, sysmon takes Ps from threads in system calls every
// 20 µs and each wake-up has to win one back: in a profile of spliced
// connect/request/response traffic (docs/performance.md) that was a fifth
// of gopasta's CPU in sysmon and futex calls, and two extra Ps cut gopasta's
// CPU per transaction by 13%. The extra Ps cost nothing while idle.
func setMaxProcs() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + loopThreads)
	}
}
