package fwd

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/sock"
)

// UDP flows follow the host's conntrack timeouts, as pasta (Timeouts.UDP
// and UDPStream: 30 s, and 120 s once a flow is a stream, its target having
// answered and either side having sent more than once). A query and its
// one answer (DNS) is not a stream: its flow, and its host socket, go after
// the shorter timeout.
const (
	udpBatch = 64 // datagrams per recvmmsg from a host socket

	// Flow.Flags of a UDP flow: who opened it, and whether each side
	// sent once or more, counted as pasta counts: per batch on the flow's
	// own socket and from the namespace, per datagram on a listener.
	flagHostInit  uint32 = 1 << 0 // the host side sent first (a forwarded port)
	flagInitSent  uint32 = 1 << 1 // the initiator sent
	flagInitMore  uint32 = 1 << 2 // ... more than once
	flagReplied   uint32 = 1 << 3 // the target answered
	flagReplyMore uint32 = 1 << 4 // ... more than once
	// The host refused a segmentation offload send on the flow's socket
	// (sock.GSORefused): its datagrams go one by one from then on.
	flagNoGSO uint32 = 1 << 5
)

// udpActivity records a batch of datagrams from one side of flow f
// (fromNS: the namespace's) and moves its deadline.
func (e *Engine) udpActivity(f *Flow, fromNS bool) {
	if fromNS == (f.Flags&flagHostInit == 0) {
		if f.Flags&flagInitSent != 0 {
			f.Flags |= flagInitMore
		}
		f.Flags |= flagInitSent
	} else if f.Flags&flagReplied != 0 {
		f.Flags |= flagReplyMore
	} else {
		f.Flags |= flagReplied
	}
	f.Deadline = e.now + int64(e.to.UDP)
	if f.Flags&flagReplied != 0 && f.Flags&(flagInitMore|flagReplyMore) != 0 {
		f.Deadline = e.now + int64(e.to.UDPStream)
	}
}

// udpTr translates UDP: one flow per (namespace address/port, destination
// address/port), each with a connected host socket, so the kernel does the
// demultiplexing of replies and ICMP errors arrive on the right socket.
type udpTr struct {
	send    *sock.GSOBatch
	sendIov []unix.Iovec // one per datagram, in order; a message takes a run
	recv    *sock.RecvBatch
	errBuf  []byte
	oob     []byte
}

func newUDP(e *Engine) *udpTr {
	return &udpTr{
		// frames gets at most one link read's worth of one flow's
		// datagrams: size the send side by the read batch, not udpBatch.
		send:    sock.NewGSOBatch(rxBatch),
		sendIov: make([]unix.Iovec, rxBatch),
		recv:    sock.NewRecvBatch(udpBatch, false),
		errBuf:  make([]byte, 1280),
		oob:     make([]byte, 512),
	}
}

func (u *udpTr) open(e *Engine, p *packet) int32 {
	hostDst := e.nat.FromTap(p.dst, p.dport, true)
	idx, err := e.openFlow(p, protoUDP, hostDst, hostSock{typ: unix.SOCK_DGRAM, port: p.sport})
	if idx < 0 {
		e.refused(protoUDP, err)
		if err != nil && e.debug {
			e.log.Debug("udp: no host socket", "dst", hostDst, "port", p.dport, "err", err)
		}
		return -1
	}
	e.flow(idx).Deadline = e.now + int64(e.to.UDP)
	return idx
}

// frames sends this cycle's datagrams of one flow: each run of them with
// one TTL (the namespace's, which the socket takes on: udpSetTTL) with one
// sendmmsg, each part of a run that segmentation offload can carry
// (sock.GSORun) as one message.
func (u *udpTr) frames(e *Engine, idx int32, pkts []*packet) {
	f := e.flow(idx)
	n := 0
	for _, p := range pkts {
		l4 := p.l4data()
		ud := header.UDP(l4)
		if !udpChecksumOK(p, ud) {
			e.drop(DropBadChecksum)
			continue
		}
		if p.ttl == 0 {
			// Never valid on a wire (RFC 1122 3.2.1.7, RFC 8200
			// section 3), and the socket options refuse it.
			e.drop(DropBadIP)
			continue
		}
		if p.ttl != f.ttl {
			// The datagrams before it leave with the TTL they had.
			u.sendRun(e, f, u.sendIov[:n])
			n = 0
			if !e.udpSetTTL(f, p.ttl) {
				e.drop(DropHostSocket)
				continue
			}
		}
		pay := ud.Payload()
		iov := &u.sendIov[n]
		if len(pay) > 0 {
			iov.Base = &pay[0]
		} else {
			iov.Base = nil
		}
		iov.SetLen(len(pay))
		n++
	}
	u.sendRun(e, f, u.sendIov[:n])
	e.udpActivity(f, true)
}

// sendRun sends the payloads iov, in order, on flow f's socket with one
// sendmmsg (more after a partial send), each run that segmentation offload
// can carry as one message; what the socket refuses is dropped and counted.
func (u *udpTr) sendRun(e *Engine, f *Flow, iov []unix.Iovec) {
	n := len(iov)
	if n == 0 {
		return
	}
	done := 0 // datagrams sent
	m := u.send.Fill(iov, f.Flags&flagNoGSO == 0)
	for sent, retried := 0, false; sent < m; {
		k, err := e.sys.sendmmsg(f.Fd, u.send.Msgs[sent:m])
		if err != nil {
			if sock.GSORefused(&u.send.Msgs[sent], err) {
				// Nothing of the refused message went out: send it
				// and the rest again, one datagram per message.
				f.Flags |= flagNoGSO
				m, sent = u.send.Fill(iov[done:n], false), 0
				if e.debug {
					e.log.Debug("udp: host refused segmentation offload, sending datagrams singly", "dst", f.HostAddr(), "port", f.DstPort, "err", err)
				}
				continue
			}
			// A pending ICMP error (ECONNREFUSED...) fails the
			// first send once and is cleared by it: retry once.
			if !retried && !errors.Is(err, unix.EAGAIN) {
				retried = true
				continue
			}
			for range n - done {
				e.drop(DropHostSocket)
			}
			break
		}
		done += sock.Datagrams(u.send.Msgs[sent : sent+k])
		sent += k
	}
}

// udpSetTTL has flow f's socket send with the namespace's TTL or hop
// limit, so that a datagram expires where it would have without gopasta
// on the way (traceroute's probes find the routers beyond the host, whose
// ICMP time-exceeded errors drainErrors relays). A multicast destination
// takes the multicast option, which the kernel uses for it instead of
// IP_TTL. It reports whether the socket took it.
func (e *Engine) udpSetTTL(f *Flow, ttl uint8) bool {
	dst := f.HostAddr()
	level, opt := unix.IPPROTO_IP, unix.IP_TTL
	switch {
	case dst.Is6() && dst.IsMulticast():
		level, opt = unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS
	case dst.Is6():
		level, opt = unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS
	case dst.IsMulticast():
		opt = unix.IP_MULTICAST_TTL
	}
	if err := e.sys.setsockoptInt(f.Fd, level, opt, int(ttl)); err != nil {
		if e.debug {
			e.log.Debug("udp: TTL not set", "dst", dst, "ttl", ttl, "err", err)
		}
		return false
	}
	f.ttl = ttl
	return true
}

// udpChecksumOK verifies a datagram's checksum (0 is "none" in IPv4 only).
func udpChecksumOK(p *packet, ud header.UDP) bool {
	if p.csumDone {
		return true
	}
	if ud.Checksum() == 0 {
		return !p.v6
	}
	ip := p.ip()
	var ps uint16
	dg := ud[:ud.Length()]
	if p.v6 {
		ps = header.PseudoHeaderChecksum(header.ProtocolUDP, header.IPv6(ip).SrcSlice(), header.IPv6(ip).DstSlice(), uint32(len(dg)))
	} else {
		ps = header.PseudoHeaderChecksum(header.ProtocolUDP, header.IPv4(ip).SrcSlice(), header.IPv4(ip).DstSlice(), uint32(len(dg)))
	}
	return header.Checksum(dg, ps) == 0xffff
}

func (u *udpTr) sockEvent(e *Engine, idx int32, events uint32) {
	if events&unix.EPOLLERR != 0 {
		u.drainErrors(e, idx)
	}
	if events&unix.EPOLLIN != 0 {
		u.receive(e, idx)
	}
}

// udpBurst is how many datagrams to read from a host socket at once, when
// the largest datagram of the previous batch from it carried last bytes (0:
// none yet): sock.Burst's rule. Measured here, host to namespace at 65000
// bytes: 26-33% of forwarded datagrams dropped in the namespace instead of
// 36-37% in unbounded batches.
func udpBurst(last int) int {
	return sock.Burst(udpBatch, last)
}

// udpRecv reads one recvmmsg batch of datagrams from host socket fd, of
// family v6, into r: at most udpBurst(last) of them (last: the largest
// datagram of fd's previous batch), each received straight into a transmit
// buffer at l4Offset+UDPMinimumSize, behind room for the headers, and cut
// short (MSG_TRUNC) past udpMaxPayload. from asks for each datagram's
// addresses (RecvBatch.SetFrom), which a listener needs. It returns the
// buffers and how many datagrams came: none on EAGAIN or an error, which
// a later event reports again.
func (e *Engine) udpRecv(fd int, v6 bool, last uint32, r *sock.RecvBatch, from bool) (bs [][]byte, n int) {
	off := l4Offset(v6) + header.UDPMinimumSize
	maxPay := e.udpMaxPayload(v6)
	bs = e.txBufs(udpBurst(int(last)))
	for i, b := range bs {
		if from {
			r.SetFrom(i, b[off:off+maxPay])
		} else {
			r.Set(i, b[off:off+maxPay])
		}
	}
	n, err := e.sys.recvmmsg(fd, r.Msgs[:len(bs)])
	if err != nil {
		return bs, 0
	}
	return bs, n
}

// receive turns one recvmmsg batch of host datagrams into frames (udpRecv).
// Datagrams larger than udpMaxPayload are dropped and counted.
func (u *udpTr) receive(e *Engine, idx int32) {
	f := e.flow(idx)
	bs, n := e.udpRecv(f.Fd, f.v6, f.udpLast, u.recv, false)
	if n == 0 {
		return // EAGAIN, or a pending error that EPOLLERR reports
	}
	w, last := 0, uint32(0)
	for i := range n {
		last = max(last, u.recv.Msgs[i].Len)
		if u.recv.Msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
			e.drop(DropTooBig)
			continue
		}
		fl, m := e.udpFrame(bs[i], f, int(u.recv.Msgs[i].Len))
		e.txCommitFrom(bs, i, w, fl, m)
		w++
	}
	f.udpLast = last
	e.udpActivity(f, false)
}

// udpMaxPayload is the largest datagram toward the namespace: the largest
// an IP packet can carry, as far as the transmit buffers hold it. A
// datagram larger than the namespace's MTU goes as one frame larger than
// the MTU, as pasta sends it: the engine does not fragment, and a TAP
// hands the namespace's stack frames of any size, which takes them (the
// MTU bounds what an interface sends, not what it receives). Dropping
// them instead lost every DNS answer over 1472 bytes at MTU 1500, and any
// datagram over 65493 bytes at MTU 65520. Without a virtio-net header the
// buffers hold MTU-sized frames only, and bound it.
func (e *Engine) udpMaxPayload(v6 bool) int {
	ipMax := 65535 - header.IPv4MinimumSize - header.UDPMinimumSize // total length
	if v6 {
		ipMax = 65535 - header.UDPMinimumSize // payload length
	}
	return min(ipMax, e.frameMax-l4Offset(v6)-header.UDPMinimumSize)
}

// udpFrame completes b, a transmit buffer holding n payload bytes for flow
// f at l4Offset+UDPMinimumSize, into a frame toward the namespace, and
// returns its length.
func (e *Engine) udpFrame(b []byte, f *Flow, n int) (int, *header.VirtioNetHdrFields) {
	l4len := header.UDPMinimumSize + n
	o := e.writeHeaders(b, f.v6, header.ProtocolUDP, f.DstAddr(), f.NSAddr(), l4len)
	ud := header.UDP(b[o : o+l4len])
	ud.Encode(f.DstPort, f.NSPort, uint16(l4len))
	ps := pseudoSum(b, f.v6, header.ProtocolUDP, l4len)
	if e.vnet != 0 {
		// A partial checksum, as for TCP: the namespace's kernel takes
		// it as verified, or completes it if it forwards the datagram.
		// Summing 64 KiB datagrams here cost a quarter of the engine's
		// time on host-to-namespace UDP.
		ud.SetChecksum(ps)
		if f.v6 {
			return o + l4len, &udpPartial[1]
		}
		return o + l4len, &udpPartial[0]
	}
	ud.SetChecksum(ud.CalculateChecksum(ps))
	return o + l4len, &txDataValid
}

// udpPartial is the offload state of a datagram toward the namespace with
// its checksum left partial, per family (IPv4, IPv6).
var udpPartial = [2]header.VirtioNetHdrFields{
	{Flags: header.VirtioNetHdrFNeedsCsum, CsumStart: uint16(header.EthernetMinimumSize + header.IPv4MinimumSize), CsumOffset: 6},
	{Flags: header.VirtioNetHdrFNeedsCsum, CsumStart: uint16(header.EthernetMinimumSize + header.IPv6MinimumSize), CsumOffset: 6},
}

// drainErrors reads the socket's error queue (IP_RECVERR) and turns each
// ICMP error the host received for this flow into the same error toward the
// namespace, quoting the datagram as the namespace sent it.
func (u *udpTr) drainErrors(e *Engine, idx int32) {
	f := e.flow(idx)
	for range 8 {
		n, oobn, _, err := e.sys.recvmsg(f.Fd, u.errBuf, u.oob, unix.MSG_ERRQUEUE)
		if err != nil {
			return
		}
		ee, offender, ok := parseRecvErr(u.oob[:oobn])
		if !ok {
			continue
		}
		var uh [header.UDPMinimumSize]byte
		header.UDP(uh[:]).Encode(f.NSPort, f.DstPort, uint16(header.UDPMinimumSize+n))
		e.icmpErrorToNS(f, ee, offender, header.ProtocolUDP, uh[:], u.errBuf[:n])
	}
}

func (u *udpTr) timer(e *Engine, idx int32) { e.closeFlow(idx) }

func (u *udpTr) closed(e *Engine, idx int32) {}
