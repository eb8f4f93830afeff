package nstest

// Ethernet frames for tests that write to a TAP or hand frames to the
// engine as a namespace would send them.

import (
	"net"
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"
)

// IPFrame returns an Ethernet frame from srcMAC to dstMAC carrying an IP
// packet of protocol proto from src to dst: IPv4 or IPv6 by src's family,
// TTL or hop limit 64, the IPv4 header's checksum set. fill writes the
// l4len bytes of the packet's payload, given the pseudo-header checksum
// of the transport header, which it completes.
func IPFrame(dstMAC, srcMAC net.HardwareAddr, proto uint8, src, dst netip.Addr, l4len int, fill func(l4 []byte, pseudo uint16)) []byte {
	typ, iph := header.EtherTypeIPv4, header.IPv4MinimumSize
	if src.Is6() {
		typ, iph = header.EtherTypeIPv6, header.IPv6MinimumSize
	}
	b := make([]byte, header.EthernetMinimumSize+iph+l4len)
	header.Ethernet(b).Encode(dstMAC, srcMAC, typ)
	var ps uint16
	if src.Is6() {
		ip := header.IPv6(b[header.EthernetMinimumSize:])
		ip.Encode(&header.IPv6Fields{PayloadLength: uint16(l4len), NextHeader: proto, HopLimit: 64, Src: src, Dst: dst})
		ps = header.PseudoHeaderChecksum(proto, ip.SrcSlice(), ip.DstSlice(), uint32(l4len))
	} else {
		ip := header.IPv4(b[header.EthernetMinimumSize:])
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(iph + l4len), TTL: 64, Protocol: proto, Src: src, Dst: dst})
		ps = header.PseudoHeaderChecksum(proto, ip.SrcSlice(), ip.DstSlice(), uint32(l4len))
	}
	fill(b[header.EthernetMinimumSize+iph:], ps)
	return b
}

// UDPFrame returns an Ethernet frame from srcMAC to dstMAC carrying one
// UDP datagram from src to dst (IPFrame), with a valid checksum.
func UDPFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) []byte {
	l4len := header.UDPMinimumSize + len(payload)
	return IPFrame(dstMAC, srcMAC, header.ProtocolUDP, src.Addr(), dst.Addr(), l4len, func(l4 []byte, ps uint16) {
		u := header.UDP(l4)
		u.Encode(src.Port(), dst.Port(), uint16(l4len))
		copy(u[header.UDPMinimumSize:], payload)
		u.SetChecksum(u.CalculateChecksum(ps))
	})
}
