package header

// The ARP view (Ethernet/IPv4 requests and replies).

import (
	"encoding/binary"
	"net/netip"
)

// ARP packet for IPv4 over Ethernet (RFC 826):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Hardware type         |         Protocol type         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  HW addr len  | Proto addr len|           Operation           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Sender hardware address (6)                  |
//	+                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |  Sender protocol address (4)  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                  Target hardware address (6)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Target protocol address (4)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type ARP []byte

const (
	arpHType = 0
	arpPType = 2
	arpHLen  = 4
	arpPLen  = 5
	arpOp    = 6
	arpSHA   = 8
	arpSPA   = 14
	arpTHA   = 18
	arpTPA   = 24

	// ARPSize is the length of an IPv4-over-Ethernet ARP packet.
	ARPSize = 28
)

// ARP operations.
const (
	ARPRequest uint16 = 1
	ARPReply   uint16 = 2
)

// IsValid reports whether b is long enough and describes IPv4 over Ethernet,
// the only kind gopasta answers.
func (b ARP) IsValid() bool {
	return len(b) >= ARPSize &&
		binary.BigEndian.Uint16(b[arpHType:]) == 1 &&
		binary.BigEndian.Uint16(b[arpPType:]) == EtherTypeIPv4 &&
		b[arpHLen] == 6 && b[arpPLen] == 4
}

// Op returns the operation.
func (b ARP) Op() uint16 { return binary.BigEndian.Uint16(b[arpOp:]) }

// SenderMAC returns the sender hardware address, aliasing b.
func (b ARP) SenderMAC() []byte { return b[arpSHA : arpSHA+6] }

// SenderIP returns the sender protocol address.
func (b ARP) SenderIP() netip.Addr { return netip.AddrFrom4([4]byte(b[arpSPA : arpSPA+4])) }

// SenderIPSlice returns the sender protocol address, aliasing b.
func (b ARP) SenderIPSlice() []byte { return b[arpSPA : arpSPA+4] }

// TargetMAC returns the target hardware address, aliasing b.
func (b ARP) TargetMAC() []byte { return b[arpTHA : arpTHA+6] }

// TargetIP returns the target protocol address.
func (b ARP) TargetIP() netip.Addr { return netip.AddrFrom4([4]byte(b[arpTPA : arpTPA+4])) }

// TargetIPSlice returns the target protocol address, aliasing b.
func (b ARP) TargetIPSlice() []byte { return b[arpTPA : arpTPA+4] }

// Encode writes a whole IPv4-over-Ethernet ARP packet. The addresses are
// slices so that a reply can be built straight from the request's fields.
func (b ARP) Encode(op uint16, sha, spa, tha, tpa []byte) {
	binary.BigEndian.PutUint16(b[arpHType:], 1)
	binary.BigEndian.PutUint16(b[arpPType:], EtherTypeIPv4)
	b[arpHLen] = 6
	b[arpPLen] = 4
	binary.BigEndian.PutUint16(b[arpOp:], op)
	copy(b[arpSHA:arpSHA+6], sha)
	copy(b[arpSPA:arpSPA+4], spa)
	copy(b[arpTHA:arpTHA+6], tha)
	copy(b[arpTPA:arpTPA+4], tpa)
}
