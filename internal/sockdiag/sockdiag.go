// Package sockdiag lists the local ports of a network namespace's sockets
// in a given state (listening TCP, bound UDP) through NETLINK_SOCK_DIAG
// (inet_diag, Linux 4.x for the v2 request with both families).
//
// It exists because `auto` port forwarding rescans both namespaces every
// second, and /proc/net/tcp makes the kernel walk and format every socket,
// TIME_WAIT ones included: after a burst of short connections that is tens
// of thousands of lines of text a second, which a profile of spliced
// connect/request/response traffic showed as a sixth of gopasta's CPU.
// inet_diag filters by state in the kernel and, for listeners, walks only
// the listening hash.
package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Socket states (include/net/tcp_states.h) for the states mask.
const (
	StateListen = 10 // TCP_LISTEN: listening TCP sockets
	StateClose  = 7  // TCP_CLOSE: UDP sockets that are bound but not connected
)

// Netlink and inet_diag layout (linux/netlink.h, linux/inet_diag.h).
const (
	nlmsgHdrLen = 16
	nlmsgError  = 2
	nlmsgDone   = 3
	nlmFRequest = 0x1
	nlmFDump    = 0x300 // NLM_F_ROOT | NLM_F_MATCH

	// struct inet_diag_req_v2: family, protocol, ext, pad, states (u32),
	// struct inet_diag_sockid (48 bytes).
	reqLen = 56
	// struct inet_diag_msg: family, state, timer, retrans, then the
	// sockid, whose first field is the source port (big endian).
	msgLen      = 72
	msgStateOff = 1
	msgSportOff = 4
)

// ErrNotSupported wraps the kernel refusing a dump (no inet_diag, or no
// tcp_diag/udp_diag for the protocol): callers fall back to /proc.
var ErrNotSupported = errors.New("sockdiag: inet_diag dump not supported")

// Conn is a NETLINK_SOCK_DIAG socket. It reports on the network namespace
// of the thread that opened it, whichever thread uses it later. Its methods
// may be called from several goroutines; calls are serialised.
type Conn struct {
	mu  sync.Mutex
	fd  int
	seq uint32
	req [nlmsgHdrLen + reqLen]byte
	buf []byte
}

// Open creates the socket in the calling thread's network namespace.
func Open() (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sockdiag: socket: %w", err)
	}
	// A dump is answered at once; the timeout only keeps a wedged kernel
	// from stopping the caller's scan loop for good.
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sockdiag: SO_RCVTIMEO: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sockdiag: bind: %w", err)
	}
	return &Conn{fd: fd, buf: make([]byte, 64<<10)}, nil
}

// Close releases the socket.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

// Ports calls fn with the local port of every IPv4 and IPv6 socket of
// protocol proto (unix.IPPROTO_TCP or IPPROTO_UDP) in state (StateListen,
// StateClose). A port may be reported more than once.
func (c *Conn) Ports(proto uint8, state uint8, fn func(port uint16)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return unix.EBADF
	}
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		if err := c.dump(family, proto, state, fn); err != nil {
			return err
		}
	}
	return nil
}

func (c *Conn) dump(family, proto, state uint8, fn func(port uint16)) error {
	c.seq++
	r := c.req[:]
	clear(r)
	binary.NativeEndian.PutUint32(r[0:], uint32(len(r)))
	binary.NativeEndian.PutUint16(r[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(r[6:], nlmFRequest|nlmFDump)
	binary.NativeEndian.PutUint32(r[8:], c.seq)
	b := r[nlmsgHdrLen:]
	b[0], b[1] = family, proto
	binary.NativeEndian.PutUint32(b[4:], 1<<state)
	if err := unix.Sendto(c.fd, r, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sockdiag: send: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(c.fd, c.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("sockdiag: receive: %w", err)
		}
		done, err := ParseDump(c.buf[:n], c.seq, state, fn)
		if err != nil || done {
			return err
		}
	}
}

// ParseDump walks one datagram of a SOCK_DIAG_BY_FAMILY dump answering
// request seq and calls fn with the source port of each socket in state.
// It reports done at NLMSG_DONE. Malformed input is an error, never a
// panic: the kernel is trusted, but this is a parser like any other.
func ParseDump(b []byte, seq uint32, state uint8, fn func(port uint16)) (done bool, err error) {
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return false, fmt.Errorf("sockdiag: %d-byte netlink header", len(b))
		}
		l := int(binary.NativeEndian.Uint32(b[0:]))
		typ := binary.NativeEndian.Uint16(b[4:])
		if l < nlmsgHdrLen || l > len(b) {
			return false, fmt.Errorf("sockdiag: netlink message of %d bytes in %d", l, len(b))
		}
		body := b[nlmsgHdrLen:l]
		// A message for another sequence number is a stale answer to an
		// earlier request (one that timed out): skipped.
		if binary.NativeEndian.Uint32(b[8:]) == seq {
			switch typ {
			case nlmsgDone:
				return true, nil
			case nlmsgError:
				if len(body) < 4 {
					return false, errors.New("sockdiag: short netlink error")
				}
				errno := -int32(binary.NativeEndian.Uint32(body))
				if errno == 0 {
					break // an acknowledgement
				}
				e := unix.Errno(errno)
				if e == unix.ENOENT || e == unix.EOPNOTSUPP || e == unix.EINVAL {
					return false, fmt.Errorf("%w: %w", ErrNotSupported, e)
				}
				return false, fmt.Errorf("sockdiag: dump: %w", e)
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(body) < msgLen {
					return false, fmt.Errorf("sockdiag: %d-byte inet_diag_msg", len(body))
				}
				if body[msgStateOff] == state {
					fn(binary.BigEndian.Uint16(body[msgSportOff:]))
				}
			}
		}
		// Messages are 4-byte aligned (NLMSG_ALIGN).
		next := (l + 3) &^ 3
		if next >= len(b) {
			break
		}
		b = b[next:]
	}
	return false, nil
}
