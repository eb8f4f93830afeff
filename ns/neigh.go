package ns

// The host's neighbour table (ARP and NDP) on the template interfaces,
// followed through rtnetlink: one dump per family, then the kernel's
// notifications, read without blocking and without allocating.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// NeighbourHandler takes what Neighbours reads.
type NeighbourHandler interface {
	// NeighbourSet: addr is reachable at the unicast MAC address mac.
	NeighbourSet(addr netip.Addr, mac [6]byte)
	// NeighbourGone: addr has no usable entry any more (deleted, failed,
	// incomplete).
	NeighbourGone(addr netip.Addr)
	// NeighbourDumpBegin and NeighbourDumpEnd enclose a full reading of
	// the table: an entry not set between them is gone, when complete.
	NeighbourDumpBegin()
	NeighbourDumpEnd(complete bool)
}

// Neighbours follows the neighbour entries of one interface per family.
// Its socket is subscribed to the kernel's notifications before the first
// dump is asked for, so no change falls between the two. One goroutine
// uses it at a time.
type Neighbours struct {
	fd      int
	ifindex [2]int // IPv4, IPv6 interface; 0: that family is not followed
	buf     []byte
	req     [nlmsgHdrLen + ndmsgLen]byte
	seq     uint32
	// dumping is the index into ifindex of the family being dumped, -1:
	// none. begin: the dump's start is still to be told to the handler.
	// lost: notifications were dropped since the dump began, so it ends
	// incomplete and another follows.
	dumping     int
	begin, lost bool
}

// Netlink layouts (linux/netlink.h, linux/neighbour.h).
const (
	nlmsgHdrLen = 16
	ndmsgLen    = 12
	rtaHdrLen   = 4
	ndaDst      = 1 // NDA_DST
	ndaLLAddr   = 2 // NDA_LLADDR
	// nudValid: the states in which an entry's address is usable
	// (NUD_VALID in include/net/neighbour.h).
	nudValid = unix.NUD_PERMANENT | unix.NUD_NOARP | unix.NUD_REACHABLE |
		unix.NUD_PROBE | unix.NUD_STALE | unix.NUD_DELAY
	// neighRcvBuf is the socket's receive buffer: a burst of changes
	// (a host with many neighbours coming up) fits, and one that does not
	// costs a dump (ENOBUFS).
	neighRcvBuf = 1 << 20
)

// WatchNeighbours opens an rtnetlink socket in the calling thread's
// network namespace, subscribed to neighbour changes, and asks for the
// entries of ifindex4 (ARP) and ifindex6 (NDP); 0 leaves a family out.
// Read then delivers the dump and every change after it.
func WatchNeighbours(ifindex4, ifindex6 int) (*Neighbours, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("ns: neighbour table: socket: %w", err)
	}
	// A smaller buffer only makes a resynchronising dump likelier.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, neighRcvBuf)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_NEIGH}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ns: neighbour table: subscribing: %w", err)
	}
	n := &Neighbours{fd: fd, ifindex: [2]int{ifindex4, ifindex6}, buf: make([]byte, 64<<10), dumping: -1}
	if err := n.dump(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return n, nil
}

// Fd is the socket, readable when Read has something to deliver.
func (n *Neighbours) Fd() int { return n.fd }

// Close closes the socket.
func (n *Neighbours) Close() error { return unix.Close(n.fd) }

// dump starts a full reading of the followed families, whose beginning
// Read tells its handler first.
func (n *Neighbours) dump() error {
	n.begin, n.lost = true, false
	return n.dumpFrom(0)
}

// dumpFrom asks for the entries of the first followed family at index i
// or after; with none left the dump is over (dumping -1).
func (n *Neighbours) dumpFrom(i int) error {
	n.dumping = -1
	for ; i < len(n.ifindex); i++ {
		if n.ifindex[i] == 0 {
			continue
		}
		fam := uint8(unix.AF_INET)
		if i == 1 {
			fam = unix.AF_INET6
		}
		n.seq++
		r := n.req[:]
		clear(r)
		binary.NativeEndian.PutUint32(r[0:], uint32(len(r)))
		binary.NativeEndian.PutUint16(r[4:], unix.RTM_GETNEIGH)
		binary.NativeEndian.PutUint16(r[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		binary.NativeEndian.PutUint32(r[8:], n.seq)
		r[nlmsgHdrLen] = fam
		if _, err := unix.Write(n.fd, r); err != nil {
			return fmt.Errorf("ns: neighbour table: asking for the %s entries: %w", famName(fam), err)
		}
		n.dumping = i
		return nil
	}
	return nil
}

func famName(fam uint8) string {
	if fam == unix.AF_INET6 {
		return "NDP"
	}
	return "ARP"
}

// ErrNeighbourDump is wrapped by Read's error when the kernel refused a
// dump: the table then follows notifications only, until the next dump.
var ErrNeighbourDump = errors.New("ns: neighbour table dump failed")

// Read delivers what the socket holds to h, without blocking: entries of
// the followed interfaces and of unicast addresses only. When the kernel
// dropped notifications for want of buffer space (ENOBUFS), the dump in
// progress ends incomplete and a new one follows. It returns nil once the
// socket is empty; an error is the socket's or a dump's, and reading may
// go on.
func (n *Neighbours) Read(h NeighbourHandler) error {
	for {
		if n.begin {
			n.begin = false
			h.NeighbourDumpBegin()
		}
		k, err := unix.Read(n.fd, n.buf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return nil
		case err == unix.ENOBUFS:
			if n.dumping >= 0 {
				n.lost = true // a new dump once this one is over
				continue
			}
			if err := n.dump(); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("ns: neighbour table: %w", err)
		}
		if err := n.parse(n.buf[:k], h); err != nil {
			return err
		}
	}
}

// parse delivers the messages of one read to h.
func (n *Neighbours) parse(b []byte, h NeighbourHandler) error {
	for len(b) >= nlmsgHdrLen {
		l := int(binary.NativeEndian.Uint32(b))
		if l < nlmsgHdrLen || l > len(b) {
			return nil // a truncated message: nothing after it to trust
		}
		typ := binary.NativeEndian.Uint16(b[4:])
		ours := n.dumping >= 0 && binary.NativeEndian.Uint32(b[8:]) == n.seq
		msg := b[nlmsgHdrLen:l]
		if ours && binary.NativeEndian.Uint16(b[6:])&unix.NLM_F_DUMP_INTR != 0 {
			n.lost = true // the table changed while the kernel dumped it
		}
		switch {
		case typ == unix.NLMSG_DONE && ours:
			if err := n.dumpFrom(n.dumping + 1); err != nil {
				h.NeighbourDumpEnd(false)
				return err
			}
			if n.dumping < 0 {
				h.NeighbourDumpEnd(!n.lost)
				if n.lost {
					if err := n.dump(); err != nil {
						return err
					}
					n.begin = false
					h.NeighbourDumpBegin()
				}
			}
		case typ == unix.NLMSG_ERROR && ours:
			n.dumping = -1
			h.NeighbourDumpEnd(false)
			if len(msg) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(msg)); e < 0 {
					return fmt.Errorf("%w: %w", ErrNeighbourDump, unix.Errno(-e))
				}
			}
			return ErrNeighbourDump
		case typ == unix.RTM_NEWNEIGH || typ == unix.RTM_DELNEIGH:
			n.entry(typ == unix.RTM_DELNEIGH, msg, h)
		}
		b = b[min(len(b), (l+3)&^3):]
	}
	return nil
}

// entry delivers one RTM_NEWNEIGH or RTM_DELNEIGH message (msg: from the
// ndmsg on) if it is about a followed interface: set for a usable entry
// with an Ethernet unicast address, gone for anything else. Proxy entries
// are not neighbours and go unread.
func (n *Neighbours) entry(del bool, msg []byte, h NeighbourHandler) {
	if len(msg) < ndmsgLen {
		return
	}
	fam := msg[0]
	ifindex := int(int32(binary.NativeEndian.Uint32(msg[4:])))
	state := binary.NativeEndian.Uint16(msg[8:])
	flags := msg[10]
	i := 0
	switch fam {
	case unix.AF_INET:
	case unix.AF_INET6:
		i = 1
	default:
		return
	}
	if n.ifindex[i] == 0 || ifindex != n.ifindex[i] || flags&unix.NTF_PROXY != 0 {
		return
	}
	var addr netip.Addr
	var mac []byte
	for a := msg[ndmsgLen:]; len(a) >= rtaHdrLen; {
		l := int(binary.NativeEndian.Uint16(a))
		if l < rtaHdrLen || l > len(a) {
			break
		}
		data := a[rtaHdrLen:l]
		switch binary.NativeEndian.Uint16(a[2:]) {
		case ndaDst:
			switch {
			case i == 0 && len(data) == 4:
				addr = netip.AddrFrom4([4]byte(data))
			case i == 1 && len(data) == 16:
				addr = netip.AddrFrom16([16]byte(data))
			}
		case ndaLLAddr:
			mac = data
		}
		a = a[min(len(a), (l+3)&^3):]
	}
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() || addr.IsLoopback() ||
		(i == 0 && addr == netip.AddrFrom4([4]byte{255, 255, 255, 255})) {
		return
	}
	if del || state&nudValid == 0 || len(mac) != 6 || mac[0]&1 != 0 || [6]byte(mac) == [6]byte{} {
		h.NeighbourGone(addr)
		return
	}
	h.NeighbourSet(addr, [6]byte(mac))
}
