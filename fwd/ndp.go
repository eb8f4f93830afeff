package fwd

// The NDP responder: neighbour advertisements, and router advertisements on
// solicitation and every 200-600 s.

import (
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/gopasta/gopasta/internal/header"
)

const (
	// l2l3v6 is the Ethernet plus fixed IPv6 header length.
	l2l3v6 = header.EthernetMinimumSize + header.IPv6MinimumSize

	// raRouterLifetime is the largest router lifetime (RFC 8319): the
	// namespace keeps us as its default router for as long as possible
	// between periodic advertisements.
	raRouterLifetime = 65535
	// ndpInfinite is the "forever" lifetime of prefixes, RDNSS and DNSSL:
	// the addresses never change while gopasta runs.
	ndpInfinite = 0xffffffff
)

var (
	allNodes6   = netip.MustParseAddr("ff02::1")
	allNodesMAC = []byte{0x33, 0x33, 0, 0, 0, 1}
)

// ndpReply answers neighbour and router solicitations from the namespace.
//
// Every neighbour solicitation gets an advertisement with the MAC address
// nt has for the target (nt.macFor: a neighbour of the host's LAN, the
// gateway, or ours; nil: ours), except for the namespace's own address and
// duplicate address detection probes (source ::), so that DAD succeeds.
// Router solicitations get a router advertisement unless NoRA.
func ndpReply(p *NetParams, nt *neighTable, frame, out []byte) int {
	if p.NoNDP {
		return 0
	}
	ip, icmp, ok := parseICMPv6(frame)
	if !ok || ip.HopLimit() != 255 || icmp.Code() != 0 {
		// RFC 4861 section 7.1.1: a hop limit below 255 means the
		// message crossed a router and is not from the link.
		return 0
	}
	switch icmp.Type() {
	case header.ICMPv6NeighborSolicitation:
		return neighborAdvert(p, nt, frame, ip, header.NDPNeighbor(icmp), out)
	case header.ICMPv6RouterSolicitation:
		if p.NoRA {
			return 0
		}
		opts, ok := header.NDPRouterSolicitOptions(icmp)
		if !ok || !ndpOptionsOK(opts) {
			return 0
		}
		src := ip.Src()
		dstMAC := header.Ethernet(frame).Src()
		if src.IsUnspecified() {
			src, dstMAC = allNodes6, allNodesMAC
		}
		return routerAdvert(p, dstMAC, src, out)
	}
	return 0
}

// ipv6Payload returns the IPv6 header of frame and its transport payload
// when frame is a whole, unfragmented IPv6 packet of protocol proto; the
// on-link responders check nothing less.
func ipv6Payload(frame []byte, proto uint8) (header.IPv6, []byte, bool) {
	eth := header.Ethernet(frame)
	if !eth.IsValid() || eth.Type() != header.EtherTypeIPv6 {
		return nil, nil, false
	}
	ip := header.IPv6(eth.Payload())
	if !ip.IsValid(len(ip)) {
		return nil, nil, false
	}
	t, ok := ip.Transport()
	if !ok || t.Fragment || t.Protocol != proto {
		return nil, nil, false
	}
	return ip, ip[t.Offset : header.IPv6MinimumSize+int(ip.PayloadLength())], true
}

// parseICMPv6 returns the IPv6 header and the ICMPv6 message of frame when
// frame is a whole, unfragmented ICMPv6 packet with a valid checksum.
func parseICMPv6(frame []byte) (header.IPv6, header.ICMPv6, bool) {
	ip, l4, ok := ipv6Payload(frame, header.ProtocolICMPv6)
	if !ok {
		return nil, nil, false
	}
	icmp := header.ICMPv6(l4)
	if !icmp.IsValid() {
		return nil, nil, false
	}
	pseudo := header.PseudoHeaderChecksum(header.ProtocolICMPv6, ip.SrcSlice(), ip.DstSlice(), uint32(len(icmp)))
	if header.Checksum(icmp, pseudo) != 0xffff {
		return nil, nil, false
	}
	return ip, icmp, true
}

// ndpOptionsOK reports whether an NDP options area is well formed; RFC 4861
// says to drop messages with a zero-length option.
func ndpOptionsOK(opts []byte) bool {
	it := header.NDPOptionIter{Options: opts}
	for _, _, ok := it.Next(); ok; _, _, ok = it.Next() {
	}
	return !it.Malformed
}

func neighborAdvert(p *NetParams, nt *neighTable, frame []byte, ip header.IPv6, ns header.NDPNeighbor, out []byte) int {
	if !ns.IsValid() || !ndpOptionsOK(ns.Options()) {
		return 0
	}
	target := ns.Target()
	src := ip.Src()
	if src.IsUnspecified() || target == p.Addr6 || target == src || target.IsMulticast() ||
		target.IsUnspecified() || target.Is4In6() || target.IsLoopback() {
		return 0
	}
	const naLen = header.NDPNeighborMinimumSize + 8
	if len(out) < l2l3v6+naLen {
		return 0
	}
	var dstMAC [6]byte
	copy(dstMAC[:], header.Ethernet(frame).Src())
	// The advertisement comes from the target itself: we answer in its
	// name, and the namespace's kernel accepts any source on the link.
	mac := nt.macFor(target, p.OurMAC)
	writeIPv6Frame(out, dstMAC[:], mac[:], target, src, header.ProtocolICMPv6, naLen)
	na := header.NDPNeighbor(out[l2l3v6 : l2l3v6+naLen])
	t16 := target.As16()
	na.Encode(header.ICMPv6NeighborAdvertisement,
		header.NDPFlagRouter|header.NDPFlagSolicited|header.NDPFlagOverride, t16[:])
	header.EncodeNDPLinkAddrOption(na[header.NDPNeighborMinimumSize:], header.NDPOptionTargetLinkAddr, mac[:])
	finishICMPv6(out, naLen)
	return l2l3v6 + naLen
}

// Unsolicited router advertisements (RFC 4861 6.2.1): the namespace's
// kernel solicits only when its interface comes up, and the default route
// it learns expires with the router lifetime (65535 s, about 18 hours)
// unless an advertisement renews it. So one goes to all nodes at a random
// interval between raMinInterval and raMaxInterval, the RFC's defaults
// (randomised so that routers on a link do not synchronise), the first one
// interval after the engine starts, as pasta does.
const (
	raMaxInterval = 600 * int64(time.Second)
	raMinInterval = raMaxInterval / 3
)

// routerAdvertTick runs on the housekeeping tick: it sends the unsolicited
// advertisement when due and schedules the next.
func (e *Engine) routerAdvertTick() {
	switch {
	case e.nextRA == 0: // the first tick: only schedule
	case e.now < e.nextRA:
		return
	default:
		if n := buildRouterAdvert(e.p, e.txBuf()); n > 0 {
			e.txCommit(n)
		}
	}
	e.nextRA = e.now + raMinInterval + rand.Int64N(raMaxInterval-raMinInterval)
}

// buildRouterAdvert writes an unsolicited router advertisement to all nodes
// into out and returns its length (0 with NoNDP or NoRA, or when out is too
// short); routerAdvertTick sends it.
func buildRouterAdvert(p *NetParams, out []byte) int {
	if p.NoNDP || p.NoRA {
		return 0
	}
	return routerAdvert(p, allNodesMAC, allNodes6, out)
}

// routerAdvert writes a router advertisement from OurLL6 to dst: the /64 of
// Addr6 for SLAAC (on-link and autonomous), the MTU, RDNSS and DNSSL, and
// our link-layer address. M and O tell the namespace DHCPv6 is there too.
func routerAdvert(p *NetParams, dstMAC []byte, dst netip.Addr, out []byte) int {
	if len(out) < l2l3v6+header.NDPRouterAdvertMinimumSize+8+32+8 || !p.OurLL6.Is6() {
		return 0
	}
	var mac [6]byte
	copy(mac[:], dstMAC)
	ra := out[l2l3v6:]
	var flags uint8
	if !p.NoDHCPv6 {
		flags = header.NDPRAFlagManaged | header.NDPRAFlagOther
	}
	header.NDPRouterAdvert(ra).Encode(255, flags, raRouterLifetime, 0, 0)
	n := header.NDPRouterAdvertMinimumSize
	n += header.EncodeNDPLinkAddrOption(ra[n:], header.NDPOptionSourceLinkAddr, p.OurMAC)
	if p.Addr6.Is6() && !p.Addr6.Is4In6() {
		pfx, _ := p.Addr6.Prefix(64)
		n += header.EncodeNDPPrefixInfoOption(ra[n:], pfx,
			header.NDPPrefixFlagOnLink|header.NDPPrefixFlagAuto, ndpInfinite, ndpInfinite)
	}
	if p.MTU >= 1280 {
		n += header.EncodeNDPMTUOption(ra[n:], uint32(p.MTU))
	}
	if k := min(len(p.DNS6), maxRDNSS(len(ra)-n)); k > 0 {
		n += header.EncodeNDPRDNSSOption(ra[n:], ndpInfinite, p.DNS6[:k])
	}
	if len(p.Search) > 0 {
		n += header.EncodeNDPDNSSLOption(ra[n:], ndpInfinite, p.Search)
	}
	writeIPv6Frame(out, mac[:], p.OurMAC, p.OurLL6, dst, header.ProtocolICMPv6, n)
	finishICMPv6(out, n)
	return l2l3v6 + n
}

// maxRDNSS is how many servers fit an RDNSS option in room bytes (the
// option length byte caps it at 127).
func maxRDNSS(room int) int {
	if room < 8+16 {
		return 0
	}
	return min((room-8)/16, 127)
}

// writeIPv6Frame writes the Ethernet and IPv6 headers of a frame whose
// upper-layer payload of plen bytes follows at out[l2l3v6:].
func writeIPv6Frame(out []byte, dstMAC, srcMAC []byte, src, dst netip.Addr, proto uint8, plen int) {
	header.Ethernet(out).Encode(dstMAC, srcMAC, header.EtherTypeIPv6)
	header.IPv6(out[header.EthernetMinimumSize:]).Encode(&header.IPv6Fields{
		PayloadLength: uint16(plen), NextHeader: proto, HopLimit: 255, Src: src, Dst: dst,
	})
}

// finishICMPv6 fills the checksum of the ICMPv6 message of plen bytes in a
// frame written by writeIPv6Frame.
func finishICMPv6(out []byte, plen int) {
	ip := header.IPv6(out[header.EthernetMinimumSize:])
	icmp := header.ICMPv6(out[l2l3v6 : l2l3v6+plen])
	icmp.SetChecksum(icmp.CalculateChecksum(
		header.PseudoHeaderChecksum(header.ProtocolICMPv6, ip.SrcSlice(), ip.DstSlice(), uint32(plen))))
}
