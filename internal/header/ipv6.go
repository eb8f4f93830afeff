package header

// The IPv6 header view, and the walk of its extension headers to the
// transport.

import (
	"encoding/binary"
	"net/netip"
)

// IPv6 fixed header (RFC 8200):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |           Flow Label                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                         Source Address                        +
//	|                              (16)                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                      Destination Address                      +
//	|                              (16)                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv6 []byte

const (
	ipv6VersTCFL  = 0
	ipv6PayLen    = 4
	ipv6NextHdr   = 6
	ipv6HopLimit  = 7
	ipv6Src       = 8
	ipv6Dst       = 24
	ipv6MaxExtHdr = 16

	// IPv6MinimumSize is the fixed header length.
	IPv6MinimumSize = 40
	// IPv6AddressSize is the length of an IPv6 address.
	IPv6AddressSize = 16
	// IPv6FragmentHeaderSize is the length of the fragment extension header.
	IPv6FragmentHeaderSize = 8
)

// IsValid reports whether b starts with an IPv6 header for a packet of
// pktLen bytes: version 6 and the payload within pktLen, and pktLen within
// b. Jumbograms (Payload Length 0 with a jumbo option) are not supported:
// the payload is then taken as empty.
func (b IPv6) IsValid(pktLen int) bool {
	if pktLen < IPv6MinimumSize || pktLen > len(b) {
		return false
	}
	return b[ipv6VersTCFL]>>4 == 6 && IPv6MinimumSize+int(b.PayloadLength()) <= pktLen
}

// TrafficClass returns the traffic class byte.
func (b IPv6) TrafficClass() uint8 {
	return uint8(binary.BigEndian.Uint16(b[ipv6VersTCFL:]) >> 4)
}

// FlowLabel returns the 20-bit flow label.
func (b IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(b[ipv6VersTCFL:]) & 0xfffff }

// PayloadLength returns the Payload Length field.
func (b IPv6) PayloadLength() uint16 { return binary.BigEndian.Uint16(b[ipv6PayLen:]) }

// NextHeader returns the Next Header field of the fixed header.
func (b IPv6) NextHeader() uint8 { return b[ipv6NextHdr] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[ipv6HopLimit] }

// Src returns the source address.
func (b IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(b[ipv6Src : ipv6Src+16])) }

// Dst returns the destination address.
func (b IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(b[ipv6Dst : ipv6Dst+16])) }

// SrcSlice returns the source address bytes, aliasing b.
func (b IPv6) SrcSlice() []byte { return b[ipv6Src : ipv6Src+16] }

// DstSlice returns the destination address bytes, aliasing b.
func (b IPv6) DstSlice() []byte { return b[ipv6Dst : ipv6Dst+16] }

// Payload returns the bytes after the fixed header up to Payload Length.
// Call it on a header that passed IsValid.
func (b IPv6) Payload() []byte { return b[IPv6MinimumSize : IPv6MinimumSize+int(b.PayloadLength())] }

// SetPayloadLength sets the Payload Length field.
func (b IPv6) SetPayloadLength(n uint16) { binary.BigEndian.PutUint16(b[ipv6PayLen:], n) }

// SetNextHeader sets the Next Header field.
func (b IPv6) SetNextHeader(p uint8) { b[ipv6NextHdr] = p }

// SetHopLimit sets the hop limit.
func (b IPv6) SetHopLimit(h uint8) { b[ipv6HopLimit] = h }

// SetSrc sets the source address; a is IPv6 (an IPv4 address is written as
// IPv4-mapped).
func (b IPv6) SetSrc(a netip.Addr) { a16 := a.As16(); copy(b[ipv6Src:], a16[:]) }

// SetDst sets the destination address.
func (b IPv6) SetDst(a netip.Addr) { a16 := a.As16(); copy(b[ipv6Dst:], a16[:]) }

// IPv6Fields holds what Encode writes.
type IPv6Fields struct {
	TrafficClass  uint8
	FlowLabel     uint32
	PayloadLength uint16
	NextHeader    uint8
	HopLimit      uint8
	Src, Dst      netip.Addr
}

// Encode writes the fixed header from f.
func (b IPv6) Encode(f *IPv6Fields) {
	binary.BigEndian.PutUint32(b[ipv6VersTCFL:], 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(b[ipv6PayLen:], f.PayloadLength)
	b[ipv6NextHdr] = f.NextHeader
	b[ipv6HopLimit] = f.HopLimit
	b.SetSrc(f.Src)
	b.SetDst(f.Dst)
}

// IPv6Transport is where an IPv6 packet's upper-layer data starts, found by
// walking its extension headers.
type IPv6Transport struct {
	// Protocol is the upper-layer protocol (ProtocolTCP, ProtocolUDP,
	// ProtocolICMPv6, ProtocolNoNext, or anything not an extension header
	// this walker knows, ESP included).
	Protocol uint8
	// Offset of the upper-layer header from the start of the IPv6 header.
	Offset int
	// Fragment is set when a fragment header was seen; then FragOffset (in
	// bytes), MoreFragments and FragID describe it. The upper-layer header
	// is only present when FragOffset is 0.
	Fragment      bool
	MoreFragments bool
	FragOffset    uint16
	FragID        uint32
}

// Transport walks the extension header chain (hop-by-hop, routing,
// fragment, destination options, authentication) of a packet that passed
// IsValid and reports where the upper-layer header starts. ok is false for a
// malformed chain: a header running past Payload Length, hop-by-hop anywhere
// but first, or more than 16 extension headers. The walk stops at a
// non-first fragment, whose data is not a transport header.
func (b IPv6) Transport() (t IPv6Transport, ok bool) {
	if len(b) < IPv6MinimumSize {
		return t, false
	}
	end := IPv6MinimumSize + int(b.PayloadLength())
	if end > len(b) {
		return t, false
	}
	next := b[ipv6NextHdr]
	off := IPv6MinimumSize
	for i := 0; ; i++ {
		var hlen int
		switch next {
		case ProtocolHopByHop:
			if i != 0 {
				return t, false
			}
			fallthrough
		case ProtocolRouting, ProtocolDestOpts:
			if off+2 > end {
				return t, false
			}
			hlen = (int(b[off+1]) + 1) * 8
		case ProtocolAH:
			if off+2 > end {
				return t, false
			}
			hlen = (int(b[off+1]) + 2) * 4
		case ProtocolFragment:
			if off+IPv6FragmentHeaderSize > end {
				return t, false
			}
			fo := binary.BigEndian.Uint16(b[off+2:])
			t.Fragment = true
			t.FragOffset = fo &^ 7
			t.MoreFragments = fo&1 != 0
			t.FragID = binary.BigEndian.Uint32(b[off+4:])
			hlen = IPv6FragmentHeaderSize
			if t.FragOffset != 0 {
				t.Protocol = b[off]
				t.Offset = off + hlen
				return t, true
			}
		default:
			t.Protocol = next
			t.Offset = off
			return t, true
		}
		if i >= ipv6MaxExtHdr || off+hlen > end {
			return t, false
		}
		next = b[off]
		off += hlen
	}
}
