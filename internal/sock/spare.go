package sock

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/limit"
)

// A listener whose accept fails for want of memory, or of descriptors with
// no spare to refuse with, is left out of its event loop for a backoff
// that doubles while the failures go on, within these bounds: accepting
// again at once would spin on the level-triggered listener, and giving up
// would leave the port bound but dead.
const (
	MinAcceptBackoff = 5 * time.Millisecond
	MaxAcceptBackoff = time.Second
)

// NextAcceptBackoff is the backoff after last (0 after a success).
func NextAcceptBackoff(last time.Duration) time.Duration {
	return min(max(2*last, MinAcceptBackoff), MaxAcceptBackoff)
}

// AcceptNext is what an event loop does after a failed accept.
type AcceptNext int

const (
	AcceptAgain AcceptNext = iota // the error was about one connection: accept the next
	AcceptDone                    // nothing waits now: wait for the listener's next event
	AcceptPause                   // leave the listener out of the loop for *backoff
)

// AcceptFailed is one listener's rule when accept on lfd failed with err,
// for both event loops: an error about one connection is passed over; an
// empty queue ends the round (and the backoff); out of descriptors, the
// connections waiting are refused with the spare (Refuse), each counted in
// r, and the listener pauses briefly only if the spare is lost; out of
// memory, the connection waits in the queue and the listener pauses for a
// backoff that doubles while the failures go on. backoff is the
// listener's own.
func (s *Spare) AcceptFailed(err error, lfd int, acc *Acceptor, backoff *time.Duration, r *limit.Refusals) AcceptNext {
	switch {
	case err == unix.EAGAIN:
		*backoff = 0
		return AcceptDone
	case AcceptRetry(err):
		return AcceptAgain
	case err == unix.EMFILE || err == unix.ENFILE:
		n, pause := s.Refuse(lfd, acc, AcceptBatch)
		for range n {
			r.Refuse(limit.TCP, limit.Descriptors)
		}
		if !pause {
			return AcceptDone
		}
		// Try again as soon as a descriptor may be free, without the
		// backoff growing.
		*backoff = MinAcceptBackoff
		return AcceptPause
	}
	*backoff = NextAcceptBackoff(*backoff)
	return AcceptPause
}

// creating is held shared across every system call of the event loops and
// their helpers that makes a descriptor (Socket, Acceptor.Accept, Pipe2,
// the namespace socket pool's sockets, a Spare's renewal), and held
// exclusively by Spare.Refuse from the close of the spare to the dup3(2)
// that makes it again. The number the spare frees is then the one its
// accept gets: no other thread can take it in between, which would leave
// the loop with no spare while the process stays at its limit, and the
// connections waiting on its listener to time out instead of being
// refused. A descriptor made outside the gate (the runtime's, the control
// socket's clients) can still take it; the listener then pauses until a
// descriptor frees (AcceptFailed).
var creating sync.RWMutex

// Pipe2 is pipe2(2), non-blocking and close-on-exec, made under the gate.
func Pipe2(fds *[2]int) error {
	creating.RLock()
	defer creating.RUnlock()
	return unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC)
}

// Spare is a descriptor an event loop holds in reserve, so that a loop out
// of descriptors (EMFILE, ENFILE) can still take the connections waiting on
// a listener and reset them: the clients learn at once that they were
// refused, as from a kernel with no listener, instead of waiting in the
// queue until their connect times out, and the level-triggered listener
// stops reporting them, which would otherwise spin the loop.
//
// The spare is a duplicate (F_DUPFD_CLOEXEC) of a descriptor the loop owns
// and never reads through it: fcntl is all it takes to get one back, with
// no path to open once the sandbox has taken the file system away. One
// Spare serves one goroutine.
type Spare struct {
	fd   int
	from int
}

// NewSpare holds a duplicate of from, a descriptor the caller keeps open
// for as long as the Spare lives.
func NewSpare(from int) *Spare {
	s := &Spare{fd: -1, from: from}
	s.renew()
	return s
}

func (s *Spare) renew() {
	if s == nil || s.fd >= 0 {
		return
	}
	creating.RLock()
	defer creating.RUnlock()
	s.renewLocked()
}

// renewLocked is renew with the gate held, shared or exclusively.
func (s *Spare) renewLocked() {
	if s == nil || s.fd >= 0 {
		return
	}
	if fd, err := unix.FcntlInt(uintptr(s.from), unix.F_DUPFD_CLOEXEC, 0); err == nil {
		s.fd = fd
	}
}

// Held reports whether the spare descriptor is held (never on a nil
// Spare, whose methods do nothing).
func (s *Spare) Held() bool { return s != nil && s.fd >= 0 }

// Renew takes the spare descriptor back if it is not held: a loop calls
// it when it has closed descriptors, so that a spare another thread took
// while it was free is soon held again.
func (s *Spare) Renew() { s.renew() }

// Refuse resets up to budget connections waiting on listener lfd, each
// taken off the queue with the spare's descriptor: the spare is closed
// just before the accept, which then gets its number, and the accepted
// socket is turned back into the spare with dup3(2), which closes the
// socket (a reset, with a zero linger) and fills its number in one call.
// No thread of ours takes the number in between (creating); one made
// outside the gate may, and the spare is then lost until Renew finds a
// free one.
//
// It returns how many it reset, and whether the caller should pause the
// listener for a moment rather than spin: connections still wait and the
// spare is not held. With the spare held and the budget spent, the
// listener goes on in the next round of the loop.
func (s *Spare) Refuse(lfd int, acc *Acceptor, budget int) (n int, pause bool) {
	if s == nil {
		return 0, true
	}
	creating.Lock()
	defer creating.Unlock()
	for range budget {
		s.renewLocked()
		if !s.Held() {
			return n, true
		}
		unix.Close(s.fd)
		s.fd = -1
		fd, _, err := acc.accept(lfd)
		switch {
		case err == nil:
			n++
			_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
			if unix.Dup3(s.from, fd, unix.O_CLOEXEC) == nil {
				s.fd = fd
			} else {
				unix.Close(fd)
			}
		case err == unix.EAGAIN:
			s.renewLocked()
			return n, false
		case AcceptRetry(err):
		default:
			s.renewLocked()
			return n, !s.Held()
		}
	}
	s.renewLocked()
	return n, !s.Held()
}

// Close releases the spare descriptor.
func (s *Spare) Close() {
	if s.Held() {
		unix.Close(s.fd)
		s.fd = -1
	}
}
