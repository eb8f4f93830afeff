// Package faults injects system call failures into the event loops'
// error paths, so that tests can drive every one of them under the real
// sandbox: a descriptor or memory shortage that a test cannot bring about
// by real means (ENFILE, ENOMEM, ENOBUFS) or not at every call site.
//
// It is compiled in only with the build tag faultinject (a test build of
// gopasta, nstest.BinaryWithTags); in every other build At is a constant
// nil the compiler removes, and the data paths pay nothing.
//
// With the tag, GOPASTA_FAULTS=every=N makes every Nth call at each site,
// once the sandbox is on (Start), fail, each time with the next of the site's errors (Errors); the
// counts of what was injected are logged at exit (Report). EAGAIN is not
// injected: on an edge-triggered socket a false EAGAIN would wait for an
// edge that never comes, and the real one is driven by full buffers (the
// hostile tests' slow peers).
package faults

import "golang.org/x/sys/unix"

// Site is a system call site of the event loops.
type Site uint8

const (
	Accept         Site = iota // accept4 on a forwarded port's listener
	Socket                     // socket for a flow, a spliced connection's other side, a UDP reply socket
	Connect                    // connect of those sockets
	Pipe2                      // a splice pipe
	Splice                     // splice(2) between a socket and a pipe
	EpollCtl                   // registering a flow's or a connection's socket
	TimerfdSettime             // arming a loop's timer
	Sendmmsg                   // a batch of datagrams out
	Recvmmsg                   // a batch of datagrams in
	NumSites
)

var siteNames = [NumSites]string{"accept", "socket", "connect", "pipe2", "splice",
	"epoll_ctl", "timerfd_settime", "sendmmsg", "recvmmsg"}

func (s Site) String() string {
	if s >= NumSites {
		return "unknown"
	}
	return siteNames[s]
}

// Errors are the failures injected at each site, in turn: the errors of
// a limit the call can meet (descriptors, memory, buffer space).
var Errors = [NumSites][]unix.Errno{
	Accept:         {unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM},
	Socket:         {unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM},
	Connect:        {unix.ENOBUFS, unix.ENOMEM},
	Pipe2:          {unix.EMFILE, unix.ENFILE, unix.ENOMEM},
	Splice:         {unix.ENOMEM},
	EpollCtl:       {unix.ENOMEM, unix.ENOSPC},
	TimerfdSettime: {unix.ENOMEM},
	Sendmmsg:       {unix.ENOBUFS, unix.ENOMEM},
	Recvmmsg:       {unix.ENOMEM},
}

// Env names the environment variable that turns injection on.
const Env = "GOPASTA_FAULTS"
