package header

// The IPv4 header view.

import (
	"encoding/binary"
	"net/netip"
)

// IPv4 header (RFC 791):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |Type of Service|          Total Length         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Identification        |Flags|      Fragment Offset    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Time to Live |    Protocol   |         Header Checksum       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Source Address                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Destination Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Options                    |    Padding    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv4 []byte

const (
	ipv4VersIHL  = 0
	ipv4TOS      = 1
	ipv4TotalLen = 2
	ipv4ID       = 4
	ipv4FlagsFO  = 6
	ipv4TTL      = 8
	ipv4Protocol = 9
	ipv4Checksum = 10
	ipv4Src      = 12
	ipv4Dst      = 16

	// IPv4MinimumSize is the header length without options.
	IPv4MinimumSize = 20
	// IPv4MaximumHeaderSize is the header length with IHL = 15.
	IPv4MaximumHeaderSize = 60
	// IPv4AddressSize is the length of an IPv4 address.
	IPv4AddressSize = 4
)

// Flag bits of the flags/fragment offset word.
const (
	IPv4FlagDontFragment  uint16 = 0x4000
	IPv4FlagMoreFragments uint16 = 0x2000
	ipv4FragOffsetMask    uint16 = 0x1fff
)

// IP protocol numbers (shared by IPv4's Protocol and IPv6's Next Header).
const (
	ProtocolHopByHop uint8 = 0
	ProtocolICMPv4   uint8 = 1
	ProtocolTCP      uint8 = 6
	ProtocolUDP      uint8 = 17
	ProtocolRouting  uint8 = 43
	ProtocolFragment uint8 = 44
	ProtocolESP      uint8 = 50
	ProtocolAH       uint8 = 51
	ProtocolICMPv6   uint8 = 58
	ProtocolNoNext   uint8 = 59
	ProtocolDestOpts uint8 = 60
)

// IsValid reports whether b starts with a well-formed IPv4 header for a
// packet of pktLen bytes (the length the link delivered, which may include
// Ethernet padding beyond Total Length): version 4, IHL at least 5, the
// header within Total Length, Total Length within pktLen, and pktLen within
// b. It does not check the header checksum (see IsChecksumValid).
func (b IPv4) IsValid(pktLen int) bool {
	if pktLen < IPv4MinimumSize || pktLen > len(b) {
		return false
	}
	if b[ipv4VersIHL]>>4 != 4 {
		return false
	}
	hl := b.HeaderLength()
	if hl < IPv4MinimumSize {
		return false
	}
	tl := int(b.TotalLength())
	return hl <= tl && tl <= pktLen
}

// IsChecksumValid reports whether the header checksum verifies. Call it on a
// header that passed IsValid.
func (b IPv4) IsChecksumValid() bool {
	return Checksum(b[:b.HeaderLength()], 0) == 0xffff
}

// HeaderLength returns the header length in bytes (IHL * 4).
func (b IPv4) HeaderLength() int { return int(b[ipv4VersIHL]&0xf) * 4 }

// TOS returns the type of service (DSCP and ECN) byte.
func (b IPv4) TOS() uint8 { return b[ipv4TOS] }

// TotalLength returns the Total Length field.
func (b IPv4) TotalLength() uint16 { return binary.BigEndian.Uint16(b[ipv4TotalLen:]) }

// ID returns the identification field.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[ipv4ID:]) }

// Flags returns the flag bits (IPv4FlagDontFragment, IPv4FlagMoreFragments).
func (b IPv4) Flags() uint16 { return binary.BigEndian.Uint16(b[ipv4FlagsFO:]) &^ ipv4FragOffsetMask }

// FragmentOffset returns the fragment offset in bytes.
func (b IPv4) FragmentOffset() uint16 {
	return (binary.BigEndian.Uint16(b[ipv4FlagsFO:]) & ipv4FragOffsetMask) * 8
}

// IsFragment reports whether b is one piece of a fragmented datagram: the
// transport header is whole only when this is false.
func (b IPv4) IsFragment() bool {
	return binary.BigEndian.Uint16(b[ipv4FlagsFO:])&(IPv4FlagMoreFragments|ipv4FragOffsetMask) != 0
}

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[ipv4TTL] }

// Protocol returns the transport protocol number.
func (b IPv4) Protocol() uint8 { return b[ipv4Protocol] }

// Checksum returns the header checksum field.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[ipv4Checksum:]) }

// Src returns the source address.
func (b IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(b[ipv4Src : ipv4Src+4])) }

// Dst returns the destination address.
func (b IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(b[ipv4Dst : ipv4Dst+4])) }

// SrcSlice returns the source address bytes, aliasing b (for checksums).
func (b IPv4) SrcSlice() []byte { return b[ipv4Src : ipv4Src+4] }

// DstSlice returns the destination address bytes, aliasing b.
func (b IPv4) DstSlice() []byte { return b[ipv4Dst : ipv4Dst+4] }

// Options returns the options area (empty when IHL is 5).
func (b IPv4) Options() []byte { return b[IPv4MinimumSize:b.HeaderLength()] }

// Payload returns the bytes between the header and Total Length, excluding
// any link padding. Call it on a header that passed IsValid.
func (b IPv4) Payload() []byte { return b[b.HeaderLength():b.TotalLength()] }

// SetTotalLength sets the Total Length field.
func (b IPv4) SetTotalLength(n uint16) { binary.BigEndian.PutUint16(b[ipv4TotalLen:], n) }

// SetTTL sets the time to live.
func (b IPv4) SetTTL(ttl uint8) { b[ipv4TTL] = ttl }

// SetChecksum sets the header checksum field.
func (b IPv4) SetChecksum(x uint16) { binary.BigEndian.PutUint16(b[ipv4Checksum:], x) }

// SetSrc sets the source address; a must be IPv4.
func (b IPv4) SetSrc(a netip.Addr) { a4 := a.As4(); copy(b[ipv4Src:], a4[:]) }

// SetDst sets the destination address; a must be IPv4.
func (b IPv4) SetDst(a netip.Addr) { a4 := a.As4(); copy(b[ipv4Dst:], a4[:]) }

// CalculateChecksum returns the header checksum to store, computed with the
// checksum field taken as zero.
func (b IPv4) CalculateChecksum() uint16 {
	hl := b.HeaderLength()
	x := Checksum(b[:ipv4Checksum], 0)
	x = Checksum(b[ipv4Checksum+2:hl], x)
	return ^x
}

// IPv4Fields holds what Encode writes. Options must be a multiple of 4 bytes
// long and at most 40.
type IPv4Fields struct {
	TOS         uint8
	TotalLength uint16
	ID          uint16
	Flags       uint16 // IPv4FlagDontFragment, IPv4FlagMoreFragments
	FragOffset  uint16 // in bytes, a multiple of 8
	TTL         uint8
	Protocol    uint8
	Src, Dst    netip.Addr
	Options     []byte
}

// Encode writes a whole header from f, including the checksum. b must hold
// IPv4MinimumSize + len(f.Options) bytes.
func (b IPv4) Encode(f *IPv4Fields) {
	hl := IPv4MinimumSize + len(f.Options)
	b[ipv4VersIHL] = 0x40 | uint8(hl/4)
	b[ipv4TOS] = f.TOS
	binary.BigEndian.PutUint16(b[ipv4TotalLen:], f.TotalLength)
	binary.BigEndian.PutUint16(b[ipv4ID:], f.ID)
	binary.BigEndian.PutUint16(b[ipv4FlagsFO:], f.Flags&^ipv4FragOffsetMask|(f.FragOffset/8)&ipv4FragOffsetMask)
	b[ipv4TTL] = f.TTL
	b[ipv4Protocol] = f.Protocol
	b.SetSrc(f.Src)
	b.SetDst(f.Dst)
	copy(b[IPv4MinimumSize:hl], f.Options)
	b.SetChecksum(0)
	b.SetChecksum(b.CalculateChecksum())
}
