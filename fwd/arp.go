package fwd

// The ARP responder: the namespace's requests for any address but its own
// answered with our MAC address, or with the one the host's neighbour
// table has for it (neigh.go).

import (
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"
)

// arpFrameLen is the length of an ARP reply frame: no padding to the
// Ethernet minimum, which a TAP device does not need.
const arpFrameLen = header.EthernetMinimumSize + header.ARPSize

// arpReply answers an ARP request from the namespace for every target but
// the namespace's own address: gopasta is the whole link, so every other
// address lives behind it. The answer comes from the MAC address nt has
// for the target (nt.macFor: a neighbour of the host's LAN, the gateway,
// or ours; nil: ours). Probes (sender 0.0.0.0, RFC 5227) and gratuitous
// announcements (sender == target) are the namespace checking or claiming
// its own address and get no answer, or duplicate address detection would
// fail.
func arpReply(p *NetParams, nt *neighTable, frame, out []byte) int {
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

	mac := nt.macFor(tpa, p.OurMAC)
	o := header.Ethernet(out[:arpFrameLen])
	o.Encode(sha[:], mac[:], header.EtherTypeARP)
	header.ARP(o.Payload()).Encode(header.ARPReply, mac[:], tpaB[:], sha[:], spaB[:])
	return arpFrameLen
}
