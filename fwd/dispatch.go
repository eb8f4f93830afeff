package fwd

// Frames from the namespace: validation (classify), the on-link responders,
// and each flow's frames of a cycle handed to its translator at once
// (handleFrames).

import (
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"
)

// packet is a validated frame from the namespace, with the offsets and
// tuple the translators need. It aliases the frame buffer, which is only
// valid for the cycle.
type packet struct {
	frame    []byte
	l3, l4   int // offsets of the IP and transport headers in frame
	end      int // end of the IP packet (Ethernet padding excluded)
	v6       bool
	proto    uint8 // transport protocol number
	src, dst netip.Addr
	// Ports, or for ICMP echo the identifier in sport, dport 0.
	sport, dport uint16
	flow         int32
	// csumDone: the transport checksum needs no verification (the link's
	// virtio-net header said it is partial or already checked).
	csumDone bool
	// ttl is the IPv4 TTL or IPv6 hop limit the namespace sent with.
	ttl uint8
}

// ip returns the IP header and everything after it, up to the packet's end.
func (p *packet) ip() []byte { return p.frame[p.l3:p.end] }

// l4data returns the transport header and payload.
func (p *packet) l4data() []byte { return p.frame[p.l4:p.end] }

// handleFrames is the frame-handling entry point: it validates each frame,
// answers what the engine serves itself (ARP, NDP, DHCP, DHCPv6), resolves
// or opens the flow of the rest, and then hands each flow its frames of
// this batch together, in arrival order. Output is queued, not flushed.
func (e *Engine) handleFrames(frames [][]byte) {
	n := 0
	e.batch++
	for _, fr := range frames {
		csumDone := false
		if e.vnet > 0 {
			if len(fr) < e.vnet {
				e.drop(DropTruncated)
				continue
			}
			// A partial checksum (the namespace's kernel left it to
			// the "device") or one it vouches for needs no check.
			e.rxHdr = header.VirtioNetHdr(fr[:e.vnet])
			csumDone = e.rxHdr.Flags()&(header.VirtioNetHdrFNeedsCsum|header.VirtioNetHdrFDataValid) != 0
			fr = fr[e.vnet:]
		}
		e.ctr.framesIn.Add(1)
		e.ctr.bytesIn.Add(uint64(len(fr)))
		if e.pcap != nil {
			e.pcap.frame(e.nowT, fr)
		}
		p := &e.pkts[n]
		p.csumDone = csumDone // kept by classify, for learnMAC
		if !e.classify(fr, p) {
			continue
		}
		t := e.tr[protoOf(p.proto)]
		if t == nil {
			e.drop(DropProtocol)
			continue
		}
		var k flowKey
		keyFor(p, &k)
		p.flow = e.ft.lookup(&k)
		if p.flow < 0 {
			if p.flow = t.open(e, p); p.flow < 0 {
				continue
			}
		}
		// Its frames run after every lookup of the batch: a flow opened
		// meanwhile must not evict it (evict.go).
		e.ft.flows[p.flow].batch = e.batch
		e.taken[n] = false
		n++
	}
	// Group by flow: at most rxBatch packets, so the quadratic scan is a
	// few thousand comparisons at worst and needs no scratch map.
	for i := range n {
		if e.taken[i] {
			continue
		}
		fi := e.pkts[i].flow
		g := e.group[:0]
		for j := i; j < n; j++ {
			if !e.taken[j] && e.pkts[j].flow == fi {
				e.taken[j] = true
				g = append(g, &e.pkts[j])
			}
		}
		f := &e.ft.flows[fi]
		if f.state != flowActive {
			continue // closed by open() or an earlier group
		}
		if e.trace {
			e.traceFrames(g)
		}
		e.tr[f.proto].frames(e, fi, g)
	}
}

func protoOf(ipProto uint8) int {
	switch ipProto {
	case header.ProtocolTCP:
		return protoTCP
	case header.ProtocolUDP:
		return protoUDP
	}
	return protoICMP
}

// classify validates a frame and fills p. It returns true for a packet a
// translator should see; everything else was answered here or dropped and
// counted.
func (e *Engine) classify(fr []byte, p *packet) bool {
	eth := header.Ethernet(fr)
	if len(fr) < header.EthernetMinimumSize {
		e.drop(DropTruncated)
		return false
	}
	if !eth.IsValid() {
		e.drop(DropEtherType)
		return false
	}
	switch eth.Type() {
	case header.EtherTypeARP:
		if header.ARP(eth.Payload()).IsValid() {
			e.learnMAC(fr, nil)
		}
		e.respondNeigh(arpReply, fr)
		return false
	case header.EtherTypeIPv4:
		return e.classify4(fr, p)
	case header.EtherTypeIPv6:
		return e.classify6(fr, p)
	}
	e.drop(DropEtherType)
	return false
}

func (e *Engine) respond(r responder, fr []byte) {
	if r == nil {
		e.drop(DropProtocol)
		return
	}
	out := e.responseBuf(fr)
	if n := r(e.p, fr, out); n > 0 {
		e.txCommit(n)
	}
}

// A neighResponder answers with the MAC addresses of the mirrored
// neighbour table: ARP and NDP.
type neighResponder func(p *NetParams, nt *neighTable, frame, out []byte) int

func (e *Engine) respondNeigh(r neighResponder, fr []byte) {
	out := e.responseBuf(fr)
	if n := r(e.p, &e.neigh, fr, out); n > 0 {
		e.txCommit(n)
	}
}

// responseBuf readies frame fr for a responder and returns the buffer its
// answer goes in.
func (e *Engine) responseBuf(fr []byte) []byte {
	if h := e.rxHdr; h != nil && h.Flags()&header.VirtioNetHdrFNeedsCsum != 0 {
		// The responders check what they parse, checksums included;
		// complete a partial one first. Only DHCP and DHCPv6 from
		// ordinary UDP sockets arrive like this, so it costs nothing
		// on the data path.
		completeChecksum(fr, int(h.CsumStart()), int(h.CsumOffset()))
	}
	return e.txBuf()
}

// learnMAC takes the namespace's MAC address from the source of frame fr,
// a well-formed one: a valid ARP packet (p nil), or an IP packet whose
// headers and transport checksum check out (p), whether or not the engine
// has a use for it (the namespace's first frames are often MLD reports and
// duplicate address probes, which teach us its address all the same). A
// malformed frame must change nothing: learnt from one, every frame toward
// the namespace went to an address its interface does not have, and its
// kernel discarded them all until the namespace happened to send a valid
// frame. A new address is rare (the namespace changed its interface's), so
// only then is the transport checksum verified here, ahead of the
// translators' own check.
func (e *Engine) learnMAC(fr []byte, p *packet) {
	src := header.Ethernet(fr).Src()
	if header.IsMulticastMAC(src) || string(src) == string(e.nsMAC[:]) {
		return
	}
	if p != nil && !l4ChecksumOK(p) {
		return
	}
	copy(e.nsMAC[:], src)
}

// l4ChecksumOK verifies the transport checksum of a packet whose IP header
// is valid; protocols the engine does not know have none it can check.
func l4ChecksumOK(p *packet) bool {
	l4 := p.l4data()
	switch {
	case p.csumDone:
		return true
	case p.proto == header.ProtocolTCP:
		return tcpChecksumOK(p)
	case p.proto == header.ProtocolUDP:
		return header.UDP(l4).IsValid() && udpChecksumOK(p, header.UDP(l4))
	case p.proto == header.ProtocolICMPv6 && p.v6:
		ip := header.IPv6(p.ip())
		return header.Checksum(l4, header.PseudoHeaderChecksum(header.ProtocolICMPv6,
			ip.SrcSlice(), ip.DstSlice(), uint32(len(l4)))) == 0xffff
	case p.proto == header.ProtocolICMPv4 && !p.v6:
		return header.Checksum(l4, 0) == 0xffff
	}
	return false
}

// completeChecksum finishes a partial transport checksum the way a device
// would: the one's complement sum from start to the end of the frame, with
// the pseudo-header sum already in the field, stored at start+offset.
// Offsets from a hostile namespace are checked, and a bad one leaves the
// frame alone (the responder's own check then drops it).
func completeChecksum(fr []byte, start, offset int) {
	if start < header.EthernetMinimumSize || start+offset+2 > len(fr) || offset < 0 {
		return
	}
	x := ^header.Checksum(fr[start:], 0)
	if x == 0 {
		x = 0xffff // UDP's "no checksum" is 0: send the other zero (RFC 768)
	}
	fr[start+offset], fr[start+offset+1] = byte(x>>8), byte(x)
}

func (e *Engine) classify4(fr []byte, p *packet) bool {
	ip := header.IPv4(fr[header.EthernetMinimumSize:])
	if len(ip) < header.IPv4MinimumSize {
		e.drop(DropTruncated)
		return false
	}
	if !ip.IsValid(len(ip)) {
		e.drop(DropBadIP)
		return false
	}
	if !ip.IsChecksumValid() {
		e.drop(DropBadChecksum)
		return false
	}
	if ip.IsFragment() {
		e.drop(DropFragment)
		return false
	}
	*p = packet{
		frame: fr, l3: header.EthernetMinimumSize,
		l4:  header.EthernetMinimumSize + ip.HeaderLength(),
		end: header.EthernetMinimumSize + int(ip.TotalLength()),
		src: ip.Src(), dst: ip.Dst(), proto: ip.Protocol(), ttl: ip.TTL(),
		csumDone: p.csumDone,
	}
	return e.classifyL4(p)
}

func (e *Engine) classify6(fr []byte, p *packet) bool {
	ip := header.IPv6(fr[header.EthernetMinimumSize:])
	if len(ip) < header.IPv6MinimumSize {
		e.drop(DropTruncated)
		return false
	}
	if !ip.IsValid(len(ip)) {
		e.drop(DropBadIP)
		return false
	}
	t, ok := ip.Transport()
	if !ok {
		e.drop(DropBadIP)
		return false
	}
	if t.Fragment {
		e.drop(DropFragment)
		return false
	}
	*p = packet{
		frame: fr, l3: header.EthernetMinimumSize,
		l4:  header.EthernetMinimumSize + t.Offset,
		end: header.EthernetMinimumSize + header.IPv6MinimumSize + int(ip.PayloadLength()),
		src: ip.Src(), dst: ip.Dst(), proto: t.Protocol, v6: true, ttl: ip.HopLimit(),
		csumDone: p.csumDone,
	}
	return e.classifyL4(p)
}

// classifyL4 checks the transport header, serves DHCP/DHCPv6/NDP and picks
// out what goes to a translator.
func (e *Engine) classifyL4(p *packet) bool {
	e.learnMAC(p.frame, p)
	l4 := p.l4data()
	switch p.proto {
	case header.ProtocolUDP:
		u := header.UDP(l4)
		if !u.IsValid() {
			e.drop(DropBadTransport)
			return false
		}
		p.sport, p.dport = u.SrcPort(), u.DstPort()
		if !p.v6 && p.dport == 67 {
			e.respond(dhcpReply, p.frame)
			return false
		}
		if p.v6 && p.dport == 547 {
			e.respond(dhcpv6Reply, p.frame)
			return false
		}
	case header.ProtocolTCP:
		if len(l4) < header.TCPMinimumSize {
			e.drop(DropTruncated)
			return false
		}
		t := header.TCP(l4)
		p.sport, p.dport = t.SrcPort(), t.DstPort()
	case header.ProtocolICMPv4:
		if p.v6 {
			e.drop(DropProtocol)
			return false
		}
		ic := header.ICMPv4(l4)
		if !ic.IsValid() {
			e.drop(DropTruncated)
			return false
		}
		if ic.Type() != header.ICMPv4Echo || ic.Code() != 0 {
			// Errors from the namespace about host traffic have no
			// host socket to go to; pasta drops them too.
			e.drop(DropBadTransport)
			return false
		}
		p.sport = ic.Ident()
	case header.ProtocolICMPv6:
		if !p.v6 {
			e.drop(DropProtocol)
			return false
		}
		ic := header.ICMPv6(l4)
		if !ic.IsValid() {
			e.drop(DropTruncated)
			return false
		}
		switch ic.Type() {
		case header.ICMPv6RouterSolicitation, header.ICMPv6NeighborSolicitation:
			e.respondNeigh(ndpReply, p.frame)
			return false
		case header.ICMPv6EchoRequest:
			if ic.Code() != 0 {
				e.drop(DropBadTransport)
				return false
			}
			p.sport = ic.Ident()
		default:
			// Neighbour advertisements, MLD reports, errors: nothing
			// to answer and nowhere to forward them.
			e.drop(DropProtocol)
			return false
		}
	default:
		e.drop(DropProtocol)
		return false
	}
	if !forwardable(p.dst, p.proto == header.ProtocolUDP) {
		e.drop(DropDestination)
		return false
	}
	return true
}

// forwardable reports whether a destination can have a host socket: no
// unspecified or loopback address (never valid on a wire), and no
// link-local unicast unless the NAT maps it (checked later by the
// translators, which see the mapped address). Multicast and broadcast
// only for UDP (datagrams), which leave through a host socket onto the
// host's network as pasta's do (SSDP, mDNS, discovery broadcasts), with
// the host's other listeners on the group seeing them too (the socket
// loops them back): a connection or an echo has no group to talk to. Not
// interface-local multicast (ff01::/16), which never leaves a node's
// interface.
func forwardable(a netip.Addr, udp bool) bool {
	if a.IsUnspecified() || a.IsLoopback() || a.IsInterfaceLocalMulticast() {
		return false
	}
	if a.IsMulticast() || (a.Is4() && a.As4() == [4]byte{255, 255, 255, 255}) {
		return udp
	}
	return true
}
