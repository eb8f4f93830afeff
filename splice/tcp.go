package splice

// Spliced TCP connections: hand-over and admission, and the pump that moves
// each direction source to pipe to sink with splice(2). A direction that
// has moved sock.RenoAfter bytes gives its sink reno for congestion
// control: both ends are loopback (sock.LocalReno says why).

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/faults"
	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/internal/sock"
)

const spliceFlags = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK

// pageSize is what a pipe slot holds at most: a pipe of size bytes has
// size/pageSize slots. It is the kernel's page size, 4 KiB on amd64 but up
// to 64 KiB on arm64: assuming 4 KiB there would count sixteen times the
// slots a pipe has and take a pipe that ran out of slots for a drained
// socket.
var pageSize = os.Getpagesize()

// drained reports whether a splice(2) from a socket into a pipe that moved
// n of the asked bytes, into a pipe of size bytes (slots of page bytes)
// that held inPipe bytes before, emptied the socket. Short of asked, the
// read stopped because the socket had no more or because the pipe ran out
// of slots. A slot holds at least one byte, so the bytes in the pipe
// before took at most inPipe slots and the n new ones at most n: if n is
// below the slots that were free, one was left, and the socket it is.
func drained(n, asked, inPipe, size, page int) bool {
	return n < asked && n < size/page-inPipe
}

// tcpConn is one spliced connection. Direction i moves bytes from fd[i]
// through dir[i].p to fd[1-i].
//
// Sockets are registered edge-triggered, so readiness is remembered here:
// readable[s]/writable[s] are set by events and cleared only when a splice
// proves them wrong (EAGAIN). That keeps epoll_ctl out of the data path:
// a full pipe simply stops reads until the sink drains, and a full sink
// waits for its EPOLLOUT edge. The cost: while a direction waits on its
// sink, each segment that reaches its source still raises an EPOLLIN edge
// and wakes the loop for nothing (most of the loop's wake-ups in a bulk
// transfer to a slower receiver). Taking EPOLLIN out of the source's
// registration for the stall halved those wake-ups and lowered the rate
// (docs/performance.md, "No EPOLLIN on a stalled source"), so they stay.
type tcpConn struct {
	fd       [2]int
	dir      [2]tcpDir
	readable [2]bool
	writable [2]bool
	hup      [2]bool // the peer's end of file (or an error) was signalled
	gen      uint32
	active   bool
	queued   bool  // in Forwarder.again
	last     int64 // f.now when bytes last moved
	// moved counts the bytes direction i wrote, up to sock.RenoAfter:
	// then its sink gets reno (sock.SetReno; both ends of a spliced
	// connection are loopback).
	moved [2]sock.RenoCount
}

type tcpDir struct {
	p    *pipe
	eof  bool // source returned end of file
	shut bool // shutdown(SHUT_WR) sent to the sink
}

// AddTCP takes ownership of two connected (or connecting) TCP sockets, one
// per namespace, and splices between them until both directions have ended.
// Both must be non-blocking, with TCP_NODELAY (spliced traffic should not
// wait for Nagle: the peers already decided how to batch): sock.Dial's
// sockets have both, and so do connections accepted with sock.Acceptor
// from sock.Listen's listeners. AddTCP makes no system call on them, which
// is most of what a spliced connection costs to set up. On error both
// sockets are closed with a reset, so the peer that is already connected
// learns at once that forwarding failed.
func (f *Forwarder) AddTCP(a, b int) error {
	if err := f.addTCP(a, b); err != nil {
		sock.Abort(a)
		if b != a {
			sock.Abort(b)
		}
		f.refused(limit.TCP, err)
		return err
	}
	return nil
}

func (f *Forwarder) addTCP(a, b int) error {
	p, err := f.admitTCP(a, b)
	if err != nil {
		return err
	}
	if err := f.enqueue(p); err != nil {
		f.pool.put(p.pipes[0])
		f.pool.put(p.pipes[1])
		f.reservedTCP.Add(-1)
		return err
	}
	return nil
}

// openTCP is AddTCP on the loop itself (a listener's connection): the
// connection starts at once, without a hand-over.
func (f *Forwarder) openTCP(a, b int) error {
	p, err := f.admitTCP(a, b)
	if err != nil {
		sock.Abort(a)
		sock.Abort(b)
		f.refused(limit.TCP, err)
		return err
	}
	f.startTCP(&p)
	return nil
}

// admitTCP checks and prepares the two sockets of a connection and takes
// its slot and pipes.
func (f *Forwarder) admitTCP(a, b int) (pendingAdd, error) {
	if a < 0 || b < 0 || a == b {
		return pendingAdd{}, &SocketError{Op: "add", Fd: b, Err: unix.EBADF}
	}
	if n := f.reservedTCP.Add(1); n > int64(f.opts.MaxTCP) {
		f.reservedTCP.Add(-1)
		return pendingAdd{}, &LimitError{What: "tcp connections", Limit: f.opts.MaxTCP}
	}
	p0, err := f.pool.get()
	if err != nil {
		f.reservedTCP.Add(-1)
		return pendingAdd{}, err
	}
	p1, err := f.pool.get()
	if err != nil {
		f.pool.put(p0)
		f.reservedTCP.Add(-1)
		return pendingAdd{}, err
	}
	return pendingAdd{kind: kindTCP, fd: [2]int{a, b}, pipes: [2]*pipe{p0, p1}}, nil
}

func (f *Forwarder) startTCP(p *pendingAdd) {
	s32, old := f.tcp.Take()
	slot := int(s32)
	c := &f.tcp.Items[slot]
	gen := nextGen(old.gen)
	*c = tcpConn{fd: p.fd, gen: gen, active: true, last: f.now}
	c.dir[0].p, c.dir[1].p = p.pipes[0], p.pipes[1]
	f.ctr.tcpActive.Add(1)
	f.ctr.tcpTotal.Add(1)
	for side := 0; side < 2; side++ {
		ev := tag(kindTCP, side, slot, gen)
		ev.Events = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
		if err := f.epollAdd(c.fd[side], &ev); err != nil {
			f.log.Debug("splice: epoll_ctl add tcp socket", "fd", c.fd[side], "err", err)
			f.tcpClose(slot, true)
			f.refused(limit.TCP, err)
			return
		}
	}
	if f.opts.IdleTimeout > 0 {
		f.armTimer()
	}
}

func (f *Forwarder) tcpEvent(slot, side int, events uint32) {
	c := &f.tcp.Items[slot]
	if events&unix.EPOLLERR != 0 {
		if soerr, err := unix.GetsockoptInt(c.fd[side], unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soerr != 0 {
			f.log.Debug("splice: tcp socket error", "fd", c.fd[side], "err", unix.Errno(soerr))
			f.tcpClose(slot, true)
			return
		}
	}
	if events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.readable[side] = true
	}
	if events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.hup[side] = true
	}
	if events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.writable[side] = true
	}
	f.tcpPump(slot)
}

// tcpPump moves what it can in both directions, then forwards half-closes
// and retires the connection once both directions are done.
func (f *Forwarder) tcpPump(slot int) {
	c := &f.tcp.Items[slot]
	more := false
	for i := 0; i < 2; i++ {
		m, ok := f.tcpMove(c, i)
		if !ok {
			f.tcpClose(slot, true)
			return
		}
		more = more || m
	}
	if c.dir[0].shut && c.dir[1].shut {
		f.tcpClose(slot, false)
		return
	}
	if more && !c.queued {
		c.queued = true
		f.again = append(f.again, slot)
	}
}

// tcpMove runs up to tcpRounds of source->pipe->sink for direction i. It
// reports whether work is left (budget ran out) and false in ok when the
// connection must be reset.
func (f *Forwarder) tcpMove(c *tcpConn, i int) (more, ok bool) {
	d := &c.dir[i]
	src, dst, p := c.fd[i], c.fd[1-i], d.p
	for round := 0; ; round++ {
		if round == tcpRounds {
			return true, true
		}
		moved := false
		if c.readable[i] && !d.eof && p.n < p.size {
			want := p.size - p.n
			n, err := splice(src, p.w, want)
			switch {
			case n > 0:
				p.n += int(n)
				moved = true
				if !c.hup[i] && drained(int(n), want, p.n-int(n), p.size, pageSize) {
					// New data brings a new edge, so the read that
					// would only say EAGAIN is saved (a third of the
					// calls of a request/response exchange). Not after
					// a hang-up, whose edge has come already and whose
					// end of file is still to be read.
					c.readable[i] = false
				}
			case err == nil:
				d.eof = true
			case err == unix.EAGAIN:
				// With bytes in the pipe, EAGAIN may mean the pipe ran out
				// of slots rather than the socket out of data: keep
				// trying after the sink drains it.
				if p.n == 0 {
					c.readable[i] = false
				}
			case err == unix.EINTR:
				moved = true
			case err == unix.ENOMEM:
				// The kernel could not take a buffer for the pipe: a
				// shortage of the moment, which must not end an
				// established connection. The loop comes back to it.
				return true, true
			default:
				f.log.Debug("splice: tcp read", "fd", src, "err", err)
				return false, false
			}
		}
		if p.n > 0 && c.writable[1-i] {
			n, err := splice(p.r, dst, p.n)
			switch {
			case n > 0:
				p.n -= int(n)
				moved = true
				if c.moved[i].Add(int(n)) {
					_ = sock.SetReno(dst)
				}
				f.ctr.tcpBytes[i].Add(uint64(n))
				c.last = f.now
			case err == unix.EAGAIN:
				c.writable[1-i] = false
			case err == unix.EINTR:
				moved = true
			case err == unix.ENOMEM:
				return true, true // as for the read
			default:
				f.log.Debug("splice: tcp write", "fd", dst, "err", err)
				return false, false
			}
		}
		if !moved {
			break
		}
	}
	// The FIN follows the last byte, not the read of end of file. Waiting
	// for writable also keeps shutdown away from a socket still in
	// SYN_SENT, where it would abort the connect.
	if d.eof && p.n == 0 && !d.shut && c.writable[1-i] {
		if err := sock.Shutdown(dst, unix.SHUT_WR); err != nil && err != unix.ENOTCONN {
			f.log.Debug("splice: tcp shutdown", "fd", dst, "err", err)
			return false, false
		}
		d.shut = true
	}
	return false, true
}

// tcpClose retires a connection: sockets closed (reset when abort, so the
// surviving peer learns the other one failed), pipes back to the pool.
func (f *Forwarder) tcpClose(slot int, abort bool) {
	c := &f.tcp.Items[slot]
	for side := 0; side < 2; side++ {
		// close removes the socket from epoll: nothing else holds a
		// duplicate of a descriptor the forwarder owns.
		if abort {
			sock.Abort(c.fd[side])
		} else {
			sock.Close(c.fd[side])
		}
		c.fd[side] = -1
		f.pool.put(c.dir[side].p)
		c.dir[side].p = nil
	}
	if abort {
		f.ctr.tcpResets.Add(1)
	}
	if !f.reserve.Held() {
		f.reserve.Renew() // descriptors were just freed
	}
	c.active = false
	f.tcp.Release(int32(slot))
	f.ctr.tcpActive.Add(^uint64(0))
	f.reservedTCP.Add(-1)
}

// splice is splice(2) of up to n bytes from fd in to fd out, where a test
// build may inject a failure (package faults).
func splice(in, out, n int) (int64, error) {
	if err := faults.At(faults.Splice); err != nil {
		return 0, err
	}
	// A raw call (see internal/sock's raw.go): splice never blocks here
	// (SPLICE_F_NONBLOCK, non-blocking sockets and pipes).
	r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), spliceFlags)
	if e != 0 {
		return 0, e
	}
	return int64(r), nil
}
