package portfwd

// The pool of unconnected TCP sockets made inside the namespace, for spliced
// host connections.

import (
	"fmt"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/epoll"
	"github.com/gopasta/gopasta/internal/sock"
)

// nsSockPool keeps a few unconnected TCP sockets created inside the
// namespace, so that a spliced host connection gets its namespace-side
// socket without a round trip to the namespace thread: a socket belongs to
// the namespace it was created in, and connect(2) on it works from any
// thread. pasta keeps the same kind of pool (tcp_sock_refill_ns). The pool
// is refilled on the namespace thread, in batches, after it drops below
// half.
type nsSockPool struct {
	do func(func() error) error // runs a function on the namespace thread
	// hold, when it reports true, holds refills back: at a descriptor
	// limit, sockets made ahead of need would take the descriptors
	// that the loops' spares and the connections being set up need.
	hold   func() bool
	fam    [2]chan int // by family: [0] IPv4, [1] IPv6
	refill chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
}

// nsPoolSize is the number of ready sockets per family: a burst of this
// many connections is served without waiting for the namespace thread.
const nsPoolSize = 32

func newNSSockPool(do func(func() error) error, hold func() bool, v4, v6 bool) *nsSockPool {
	p := &nsSockPool{do: do, hold: hold, refill: make(chan struct{}, 1), stop: make(chan struct{})}
	for i, on := range [2]bool{v4, v6} {
		if on {
			p.fam[i] = make(chan int, nsPoolSize)
		}
	}
	p.fill()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.stop:
				return
			case <-p.refill:
				p.fill()
				epoll.Want(-1)
			}
		}
	}()
	return p
}

// fill tops every family up on the namespace thread. A failure (out of
// descriptors, a namespace going away) leaves the pool short: dial falls
// back to the namespace thread, which reports the error properly.
func (p *nsSockPool) fill() {
	if p.hold != nil && p.hold() {
		return
	}
	_ = p.do(func() error {
		for i, c := range p.fam {
			if c == nil {
				continue
			}
			family := unix.AF_INET
			if i == 1 {
				family = unix.AF_INET6
			}
			for len(c) < cap(c) {
				fd, err := sock.Socket(family, unix.SOCK_STREAM, 0)
				if err != nil {
					return err
				}
				_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
				select {
				case c <- fd:
				default: // raced with Close's drain
					unix.Close(fd)
				}
			}
		}
		return nil
	})
}

// dial starts connecting a pooled socket to dst and returns it; ok is false
// when the pool cannot serve dst (empty, a family it does not hold, an IPv6
// zone that only names an interface inside the namespace).
func (p *nsSockPool) dial(dst netip.AddrPort) (fd int, ok bool, err error) {
	a := dst.Addr().Unmap()
	if a.Zone() != "" {
		return -1, false, nil
	}
	i := 0
	if a.Is6() {
		i = 1
	}
	c := p.fam[i]
	if c == nil {
		return -1, false, nil
	}
	select {
	case fd = <-c:
	default:
		p.kick()
		return -1, false, nil
	}
	if len(c) < cap(c)/2 {
		p.kick()
	}
	if err := sock.Connect(fd, netip.AddrPortFrom(a, dst.Port()), i == 1); err != nil && err != unix.EINPROGRESS {
		sock.Close(fd)
		return -1, true, fmt.Errorf("splice: connect %s: %w", dst, err)
	}
	return fd, true, nil
}

func (p *nsSockPool) kick() {
	select {
	case p.refill <- struct{}{}:
		// The refill needs a processor, which the splice loop that
		// kicked must not hold meanwhile (package epoll).
		epoll.Want(1)
	default:
	}
}

// Close stops refilling and closes the sockets left.
func (p *nsSockPool) Close() {
	close(p.stop)
	p.wg.Wait()
	select { // a refill asked for and not made: nobody wants it any more
	case <-p.refill:
		epoll.Want(-1)
	default:
	}
	for _, c := range p.fam {
	drain: // without blocking: the engine may take the last one meanwhile
		for c != nil {
			select {
			case fd := <-c:
				unix.Close(fd)
			default:
				break drain
			}
		}
	}
}
