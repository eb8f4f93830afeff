package splice

// The errors a Forwarder returns: closed, a table full, a socket it cannot
// take.

import (
	"errors"
	"fmt"

	"github.com/gopasta/gopasta/internal/limit"
)

// ErrClosed is returned by Add* once the Forwarder has been closed.
var ErrClosed = errors.New("splice: forwarder closed")

// LimitError reports that a bounded table is full; the connection or flow
// handed over was refused (and its sockets closed).
type LimitError struct {
	What  string // "tcp connections" or "udp flows"
	Limit int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("splice: too many %s (limit %d)", e.What, e.Limit)
}

// SocketError reports an fd handed to Add* that cannot be used: wrong socket
// type, not a socket, or a failing socket option.
type SocketError struct {
	Op  string
	Fd  int
	Err error
}

func (e *SocketError) Error() string {
	return fmt.Sprintf("splice: fd %d: %s: %v", e.Fd, e.Op, e.Err)
}

func (e *SocketError) Unwrap() error { return e.Err }

// refused counts a connection or flow of kind k that err refused, when err
// is a limit: out of descriptors or memory, or a bounded table full.
func (f *Forwarder) refused(k limit.Kind, err error) {
	res, ok := limit.Of(err)
	var le *LimitError
	if errors.As(err, &le) {
		res, ok = limit.Flows, true
	}
	if ok {
		f.opts.Refusals.Refuse(k, res)
	}
	if ok && res == limit.Descriptors {
		f.pool.drain()
	}
}
