package fwd

// The ARP responder: the namespace's requests for any address but its own
// answered with our MAC address.

import (
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"
)

// arpFrameLen is the length of an ARP reply frame: no padding to the
// Ethernet minimum, which a TAP device does not need.
const arpFrameLen = header.EthernetMinimumSize + header.ARPSize

// arpReply answers an ARP request from the namespace with our MAC address
// for every target but the namespace's own address: gopasta is the whole
// link, so every other address lives behind it. Probes (sender 0.0.0.0,
// RFC 5227) and gratuitous announcements (sender == target) are the
// namespace checking or claiming its own address and get no answer, or
// duplicate address detection would fail.
func arpReply(p *NetParams, frame, out []byte) int {
	eth := header.Ethernet(frame)
	if !eth.IsValid() || eth.Type() != header.EtherTypeARP || len(out) < arpFrameLen {
		return 0
	}
	req := header.ARP(eth.Payload())
	if !req.IsValid() || req.Op() != header.ARPRequest {
		return 0
	}
	spa, tpa := req.SenderIP(), req.TargetIP()
	if spa.IsUnspecified() || spa == tpa || tpa == p.Addr4 || header.IsMulticastMAC(req.SenderMAC()) ||
		!tpa.IsValid() || tpa == netip.IPv4Unspecified() {
		return 0
	}
	// out and frame may not alias, but the request's fields are copied
	// before anything is written over them anyway.
	var sha [6]byte
	var spaB, tpaB [4]byte
	copy(sha[:], req.SenderMAC())
	copy(spaB[:], req.SenderIPSlice())
	copy(tpaB[:], req.TargetIPSlice())

	o := header.Ethernet(out[:arpFrameLen])
	o.Encode(sha[:], p.OurMAC, header.EtherTypeARP)
	header.ARP(o.Payload()).Encode(header.ARPReply, p.OurMAC, tpaB[:], sha[:], spaB[:])
	return arpFrameLen
}
