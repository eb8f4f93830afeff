package header

// The Ethernet header view.

import "encoding/binary"

// Ethernet II frame header (IEEE 802.3):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Destination MAC address                    |
//	+                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                      Source MAC address                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           EtherType           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type Ethernet []byte

const (
	ethDst  = 0
	ethSrc  = 6
	ethType = 12

	// EthernetMinimumSize is the length of the header without a VLAN tag.
	EthernetMinimumSize = 14
	// EthernetAddressSize is the length of a MAC address.
	EthernetAddressSize = 6
)

// EtherType values gopasta looks at.
const (
	EtherTypeIPv4 uint16 = 0x0800
	EtherTypeARP  uint16 = 0x0806
	EtherTypeVLAN uint16 = 0x8100 // 802.1Q
	EtherTypeQinQ uint16 = 0x88a8 // 802.1ad
	EtherTypeIPv6 uint16 = 0x86dd
)

// EthernetBroadcast is ff:ff:ff:ff:ff:ff.
var EthernetBroadcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// IsValid reports whether b holds a whole untagged Ethernet header. Tagged
// frames are reported invalid: the namespace has no VLAN interfaces of ours,
// so a tag means a frame gopasta must drop.
func (b Ethernet) IsValid() bool {
	if len(b) < EthernetMinimumSize {
		return false
	}
	t := b.Type()
	return t != EtherTypeVLAN && t != EtherTypeQinQ
}

// Dst returns the destination MAC address, aliasing b.
func (b Ethernet) Dst() []byte { return b[ethDst : ethDst+6] }

// Src returns the source MAC address, aliasing b.
func (b Ethernet) Src() []byte { return b[ethSrc : ethSrc+6] }

// Type returns the EtherType.
func (b Ethernet) Type() uint16 { return binary.BigEndian.Uint16(b[ethType:]) }

// Payload returns what follows the header.
func (b Ethernet) Payload() []byte { return b[EthernetMinimumSize:] }

// SetDst sets the destination MAC address.
func (b Ethernet) SetDst(mac []byte) { copy(b[ethDst:ethDst+6], mac) }

// SetSrc sets the source MAC address.
func (b Ethernet) SetSrc(mac []byte) { copy(b[ethSrc:ethSrc+6], mac) }

// SetType sets the EtherType.
func (b Ethernet) SetType(t uint16) { binary.BigEndian.PutUint16(b[ethType:], t) }

// Encode writes a whole header.
func (b Ethernet) Encode(dst, src []byte, typ uint16) {
	b.SetDst(dst)
	b.SetSrc(src)
	b.SetType(typ)
}

// IsMulticastMAC reports whether mac is a group address (broadcast included).
func IsMulticastMAC(mac []byte) bool { return len(mac) > 0 && mac[0]&1 != 0 }
