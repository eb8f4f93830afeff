package fwd

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/sock"
)

// Echo flows last 60 s after the last request, as pasta.
const icmpTimeout = 60 * int64(1e9)

// icmpTr forwards ICMP and ICMPv6 echo through unprivileged ping sockets
// (SOCK_DGRAM, IPPROTO_ICMP[V6]): one flow per (identifier, source,
// destination). The kernel replaces the identifier with the socket's own
// (its "port"); replies are rewritten back to the namespace's identifier.
// Ping sockets need the user's group in net.ipv4.ping_group_range; when
// they are refused, the engine warns once and drops echo requests.
type icmpTr struct {
	msgs *sock.RecvBatch
	junk []byte
	oob  []byte
}

func newICMP(e *Engine) *icmpTr {
	// One array serves both ways: a link read's worth of one flow's
	// requests out (frames), a recvmmsg's worth of replies in.
	n := max(rxBatch, udpBatch)
	return &icmpTr{
		msgs: sock.NewRecvBatch(n, false),
		junk: make([]byte, 1280),
		oob:  make([]byte, 512),
	}
}

func (c *icmpTr) open(e *Engine, p *packet) int32 {
	hostDst := e.nat.FromTap(p.dst, 0, false)
	proto := unix.IPPROTO_ICMP
	if p.v6 {
		proto = unix.IPPROTO_ICMPV6
	}
	idx, err := e.openFlow(p, protoICMP, hostDst, hostSock{typ: unix.SOCK_DGRAM, proto: proto, port: p.sport})
	if idx < 0 {
		e.refused(protoICMP, err)
		switch {
		case err == nil:
		case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
			if !e.warned.ping {
				e.warned.ping = true
				e.log.Warn("ping sockets not permitted: echo requests from the namespace are dropped; "+
					"allow this user's group in /proc/sys/net/ipv4/ping_group_range", "err", err)
			}
		case e.debug:
			e.log.Debug("icmp: no host socket", "dst", hostDst, "err", err)
		}
		return -1
	}
	e.flow(idx).Deadline = e.now + icmpTimeout
	return idx
}

func (c *icmpTr) frames(e *Engine, idx int32, pkts []*packet) {
	f := e.flow(idx)
	n := 0
	for _, p := range pkts {
		msg := p.l4data()
		var ok bool
		if p.v6 {
			ip := header.IPv6(p.ip())
			ok = header.Checksum(msg, header.PseudoHeaderChecksum(header.ProtocolICMPv6,
				ip.SrcSlice(), ip.DstSlice(), uint32(len(msg)))) == 0xffff
		} else {
			ok = header.Checksum(msg, 0) == 0xffff
		}
		if !ok {
			e.drop(DropBadChecksum)
			continue
		}
		c.msgs.Set(n, msg)
		n++
	}
	if n > 0 {
		m, err := e.sys.sendmmsg(f.Fd, c.msgs.Msgs[:n])
		if err != nil {
			m = 0
		}
		for range n - m {
			e.drop(DropHostSocket)
		}
	}
	f.Deadline = e.now + icmpTimeout
}

func (c *icmpTr) sockEvent(e *Engine, idx int32, events uint32) {
	f := e.flow(idx)
	if events&unix.EPOLLERR != 0 {
		// Errors about echo requests (unreachable hosts) are not
		// returned: ping reports the timeout either way. Drain them
		// so the level-triggered EPOLLERR stops.
		for range 8 {
			if _, _, _, err := e.sys.recvmsg(f.Fd, c.junk, c.oob, unix.MSG_ERRQUEUE); err != nil {
				break
			}
		}
	}
	if events&unix.EPOLLIN == 0 {
		return
	}
	off := l4Offset(f.v6)
	bs := e.txBufs(udpBatch)
	for i, b := range bs {
		c.msgs.Set(i, b[off:])
	}
	n, err := e.sys.recvmmsg(f.Fd, c.msgs.Msgs[:len(bs)])
	if err != nil {
		return
	}
	proto, reply := header.ProtocolICMPv4, header.ICMPv4EchoReply
	if f.v6 {
		proto, reply = header.ProtocolICMPv6, header.ICMPv6EchoReply
	}
	w := 0
	for i := range n {
		ln := int(c.msgs.Msgs[i].Len)
		if c.msgs.Msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
			e.drop(DropTooBig)
			continue
		}
		b := bs[i]
		msg := b[off : off+ln]
		if ln < header.ICMPv4MinimumSize || msg[0] != reply {
			continue
		}
		e.writeHeaders(b, f.v6, proto, f.DstAddr(), f.NSAddr(), ln)
		if f.v6 {
			ic := header.ICMPv6(msg)
			ic.SetIdent(f.NSPort)
			ic.SetChecksum(ic.CalculateChecksum(pseudoSum(b, true, proto, ln)))
		} else {
			ic := header.ICMPv4(msg)
			ic.SetIdent(f.NSPort)
			ic.SetChecksum(ic.CalculateChecksum())
		}
		e.txCommitFrom(bs, i, w, off+ln, &txDataValid)
		w++
	}
}

func (c *icmpTr) timer(e *Engine, idx int32) { e.closeFlow(idx) }

func (c *icmpTr) closed(e *Engine, idx int32) {}

// parseRecvErr finds the IP_RECVERR / IPV6_RECVERR control message in oob
// and returns the extended error and the offender's address, for ICMP
// origins only (local errors such as EMSGSIZE have nothing to return).
func parseRecvErr(oob []byte) (ee unix.SockExtendedErr, offender netip.Addr, ok bool) {
	const hdr = unix.SizeofCmsghdr
	const eeSize = int(unsafe.Sizeof(unix.SockExtendedErr{}))
	for len(oob) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			break
		}
		data := oob[hdr:l]
		if ((h.Level == unix.IPPROTO_IP && h.Type == unix.IP_RECVERR) ||
			(h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_RECVERR)) && len(data) >= eeSize {
			ee = *(*unix.SockExtendedErr)(unsafe.Pointer(&data[0]))
			sa := data[eeSize:]
			if len(sa) >= 2 {
				switch binary.NativeEndian.Uint16(sa) {
				case unix.AF_INET:
					if len(sa) >= 8 {
						offender = netip.AddrFrom4([4]byte(sa[4:8]))
					}
				case unix.AF_INET6:
					if len(sa) >= 24 {
						offender = netip.AddrFrom16([16]byte(sa[8:24])).Unmap()
					}
				}
			}
			return ee, offender, ee.Origin == unix.SO_EE_ORIGIN_ICMP || ee.Origin == unix.SO_EE_ORIGIN_ICMP6
		}
		al := (l + unix.SizeofPtr - 1) &^ (unix.SizeofPtr - 1)
		if al >= len(oob) {
			break
		}
		oob = oob[al:]
	}
	return ee, offender, false
}

// Bounds of ICMP errors we build (RFC 1812 4.3.2.3, RFC 4443 2.4(c)).
const (
	icmp4ErrMax = 576
	icmp6ErrMax = 1280
)

// icmpErrorToNS sends the namespace the ICMP error ee the host got for flow
// f's traffic, quoting an IP header as the namespace sent it, then l4hdr
// and as much of payload as fits. It comes from the flow's destination, or
// from the (mapped) offender when a router on the way sent it.
func (e *Engine) icmpErrorToNS(f *Flow, ee unix.SockExtendedErr, offender netip.Addr, proto uint8, l4hdr, payload []byte) {
	v6 := f.v6
	from := f.DstAddr()
	if offender.IsValid() && offender != f.HostAddr() {
		if a, ok := e.nat.FromHost(offender); ok && a.Is6() == v6 {
			from = a
		}
	}
	iph, max, icmpProto := header.IPv4MinimumSize, icmp4ErrMax, header.ProtocolICMPv4
	if v6 {
		iph, max, icmpProto = header.IPv6MinimumSize, icmp6ErrMax, header.ProtocolICMPv6
	}
	fullL4 := len(l4hdr) + len(payload)
	room := max - iph - header.ICMPv4MinimumSize - iph - len(l4hdr)
	if len(payload) > room {
		payload = payload[:room]
	}
	l4len := header.ICMPv4MinimumSize + iph + len(l4hdr) + len(payload)
	b := e.txBuf()
	o := e.writeHeaders(b, v6, icmpProto, from, f.NSAddr(), l4len)
	q := o + header.ICMPv4MinimumSize
	// The quoted header's TTL is what the datagram left with, if the
	// flow set one (udpSetTTL).
	ttl := f.ttl
	if ttl == 0 {
		ttl = 64
	}
	if v6 {
		header.IPv6(b[q:]).Encode(&header.IPv6Fields{
			PayloadLength: uint16(fullL4), NextHeader: proto, HopLimit: ttl,
			Src: f.NSAddr(), Dst: f.DstAddr(),
		})
	} else {
		header.IPv4(b[q:]).Encode(&header.IPv4Fields{
			TotalLength: uint16(iph + fullL4), TTL: ttl, Protocol: proto,
			Flags: header.IPv4FlagDontFragment, Src: f.NSAddr(), Dst: f.DstAddr(),
		})
	}
	copy(b[q+iph:], l4hdr)
	copy(b[q+iph+len(l4hdr):], payload)
	msg := b[o : o+l4len]
	if v6 {
		ic := header.ICMPv6(msg)
		ic.SetType(ee.Type)
		ic.SetCode(ee.Code)
		rest := uint32(0)
		if ee.Type == header.ICMPv6PacketTooBig || ee.Type == header.ICMPv6ParamProblem {
			rest = ee.Info
		}
		ic.SetRest(rest)
		ic.SetChecksum(0)
		ic.SetChecksum(ic.CalculateChecksum(pseudoSum(b, true, icmpProto, l4len)))
	} else {
		ic := header.ICMPv4(msg)
		ic.SetType(ee.Type)
		ic.SetCode(ee.Code)
		rest := uint32(0)
		switch {
		case ee.Type == header.ICMPv4DstUnreachable && ee.Code == header.ICMPv4FragNeeded:
			rest = ee.Info & 0xffff
		case ee.Type == header.ICMPv4ParamProblem:
			rest = ee.Info << 24
		}
		ic.SetRest(rest)
		ic.SetChecksum(0)
		ic.SetChecksum(ic.CalculateChecksum())
	}
	e.txCommit(o + l4len)
}
