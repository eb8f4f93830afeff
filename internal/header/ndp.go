package header

// NDP messages and options: solicitations, advertisements, prefix, MTU,
// RDNSS and DNSSL, link-layer addresses.

import (
	"encoding/binary"
	"net/netip"
)

// NDP messages (RFC 4861) are ICMPv6 messages; these views cover the whole
// ICMPv6 message, type and checksum included, so offsets match the RFC
// diagrams. Options follow the fixed part and are walked with
// NDPOptionIter.
//
// Neighbor Solicitation (type 135) and Advertisement (type 136):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Type      |     Code      |          Checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|R|S|O|                     Reserved (NS: all reserved)         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Target Address (16)                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Options ...
type NDPNeighbor []byte

// Router Solicitation (133): Type, Code, Checksum, 4 reserved bytes, options.
// Router Advertisement (134):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Type      |     Code      |          Checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Cur Hop Limit |M|O|  Reserved |       Router Lifetime         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Reachable Time                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Retrans Timer                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Options ...
type NDPRouterAdvert []byte

const (
	ndpFlags      = 4
	ndpTarget     = 8
	raHopLimit    = 4
	raFlags       = 5
	raLifetime    = 6
	raReachable   = 8
	raRetrans     = 12
	rsOptionsOff  = 8
	raOptionsOff  = 16
	nbrOptionsOff = 24

	// NDPNeighborMinimumSize is the length of an NS or NA without options.
	NDPNeighborMinimumSize = 24
	// NDPRouterSolicitMinimumSize is the length of an RS without options.
	NDPRouterSolicitMinimumSize = 8
	// NDPRouterAdvertMinimumSize is the length of an RA without options.
	NDPRouterAdvertMinimumSize = 16
)

// Neighbor Advertisement flags (byte 4).
const (
	NDPFlagRouter    uint8 = 0x80
	NDPFlagSolicited uint8 = 0x40
	NDPFlagOverride  uint8 = 0x20
)

// Router Advertisement flags (byte 5).
const (
	NDPRAFlagManaged uint8 = 0x80 // addresses by DHCPv6
	NDPRAFlagOther   uint8 = 0x40 // other configuration by DHCPv6
)

// NDP option types.
const (
	NDPOptionSourceLinkAddr uint8 = 1
	NDPOptionTargetLinkAddr uint8 = 2
	NDPOptionPrefixInfo     uint8 = 3
	NDPOptionMTU            uint8 = 5
	NDPOptionRDNSS          uint8 = 25
	NDPOptionDNSSL          uint8 = 31
)

// Prefix information flags.
const (
	NDPPrefixFlagOnLink uint8 = 0x80 // L
	NDPPrefixFlagAuto   uint8 = 0x40 // A
)

// NDPRouterSolicitOptions returns the options of a Router Solicitation
// message b, or ok false when b is too short.
func NDPRouterSolicitOptions(b []byte) (opts []byte, ok bool) {
	if len(b) < NDPRouterSolicitMinimumSize {
		return nil, false
	}
	return b[rsOptionsOff:], true
}

// IsValid reports whether b holds a whole NS or NA fixed part.
func (b NDPNeighbor) IsValid() bool { return len(b) >= NDPNeighborMinimumSize }

// Flags returns the R, S and O flags of an advertisement.
func (b NDPNeighbor) Flags() uint8 { return b[ndpFlags] }

// Target returns the target address.
func (b NDPNeighbor) Target() netip.Addr {
	return netip.AddrFrom16([16]byte(b[ndpTarget : ndpTarget+16]))
}

// TargetSlice returns the target address bytes, aliasing b.
func (b NDPNeighbor) TargetSlice() []byte { return b[ndpTarget : ndpTarget+16] }

// Options returns the options area.
func (b NDPNeighbor) Options() []byte { return b[nbrOptionsOff:] }

// Encode writes type, code 0, a zero checksum, flags (for NA) and target.
func (b NDPNeighbor) Encode(typ, flags uint8, target []byte) {
	b[icmpType], b[icmpCode] = typ, 0
	binary.BigEndian.PutUint16(b[icmpChecksum:], 0)
	binary.BigEndian.PutUint32(b[ndpFlags:], uint32(flags)<<24)
	copy(b[ndpTarget:ndpTarget+16], target)
}

// IsValid reports whether b holds a whole RA fixed part.
func (b NDPRouterAdvert) IsValid() bool { return len(b) >= NDPRouterAdvertMinimumSize }

// CurHopLimit returns the advertised hop limit.
func (b NDPRouterAdvert) CurHopLimit() uint8 { return b[raHopLimit] }

// Flags returns the M and O flags.
func (b NDPRouterAdvert) Flags() uint8 { return b[raFlags] }

// RouterLifetime returns the default router lifetime in seconds.
func (b NDPRouterAdvert) RouterLifetime() uint16 { return binary.BigEndian.Uint16(b[raLifetime:]) }

// ReachableTime returns the reachable time in milliseconds.
func (b NDPRouterAdvert) ReachableTime() uint32 { return binary.BigEndian.Uint32(b[raReachable:]) }

// RetransTimer returns the retransmission timer in milliseconds.
func (b NDPRouterAdvert) RetransTimer() uint32 { return binary.BigEndian.Uint32(b[raRetrans:]) }

// Options returns the options area.
func (b NDPRouterAdvert) Options() []byte { return b[raOptionsOff:] }

// Encode writes the fixed part with a zero checksum.
func (b NDPRouterAdvert) Encode(hopLimit, flags uint8, lifetime uint16, reachable, retrans uint32) {
	b[icmpType], b[icmpCode] = ICMPv6RouterAdvertisement, 0
	binary.BigEndian.PutUint16(b[icmpChecksum:], 0)
	b[raHopLimit] = hopLimit
	b[raFlags] = flags
	binary.BigEndian.PutUint16(b[raLifetime:], lifetime)
	binary.BigEndian.PutUint32(b[raReachable:], reachable)
	binary.BigEndian.PutUint32(b[raRetrans:], retrans)
}

// NDPOptionIter walks NDP options without allocating. Each option is a type
// byte, a length byte in units of 8 bytes (0 is invalid), and a body.
type NDPOptionIter struct {
	Options []byte
	// Malformed is set when an option has length 0 or runs past the end;
	// RFC 4861 says to drop the whole message then.
	Malformed bool
}

// Next returns the next option's type and body (the option without its two
// leading bytes); ok is false at the end or on a malformed option.
func (it *NDPOptionIter) Next() (typ uint8, body []byte, ok bool) {
	if len(it.Options) == 0 {
		return 0, nil, false
	}
	if len(it.Options) < 2 {
		it.Malformed, it.Options = true, nil
		return 0, nil, false
	}
	l := int(it.Options[1]) * 8
	if l == 0 || l > len(it.Options) {
		it.Malformed, it.Options = true, nil
		return 0, nil, false
	}
	typ, body = it.Options[0], it.Options[2:l]
	it.Options = it.Options[l:]
	return typ, body, true
}

// NDPLinkAddr returns the MAC address in a source or target link-layer
// address option body, or ok false for a body too short for Ethernet.
func NDPLinkAddr(body []byte) (mac []byte, ok bool) {
	if len(body) < EthernetAddressSize {
		return nil, false
	}
	return body[:EthernetAddressSize], true
}

// NDPPrefixInfo is the body of a prefix information option (30 bytes):
// prefix length, flags, valid and preferred lifetimes, 4 reserved bytes,
// prefix.
type NDPPrefixInfo []byte

// NDPPrefixInfoBodySize is the body length of a prefix information option.
const NDPPrefixInfoBodySize = 30

// IsValid reports whether b is long enough.
func (b NDPPrefixInfo) IsValid() bool { return len(b) >= NDPPrefixInfoBodySize }

// PrefixLength returns the prefix length in bits.
func (b NDPPrefixInfo) PrefixLength() uint8 { return b[0] }

// Flags returns the L and A flags.
func (b NDPPrefixInfo) Flags() uint8 { return b[1] }

// ValidLifetime returns the valid lifetime in seconds.
func (b NDPPrefixInfo) ValidLifetime() uint32 { return binary.BigEndian.Uint32(b[2:]) }

// PreferredLifetime returns the preferred lifetime in seconds.
func (b NDPPrefixInfo) PreferredLifetime() uint32 { return binary.BigEndian.Uint32(b[6:]) }

// Prefix returns the prefix address.
func (b NDPPrefixInfo) Prefix() netip.Addr { return netip.AddrFrom16([16]byte(b[14:30])) }

// NDPMTU returns the MTU in an MTU option body (6 bytes), or ok false.
func NDPMTU(body []byte) (mtu uint32, ok bool) {
	if len(body) < 6 {
		return 0, false
	}
	return binary.BigEndian.Uint32(body[2:]), true
}

// NDPRDNSS splits an RDNSS option body into its lifetime and address
// bytes (16 per server), or ok false when the body is malformed.
func NDPRDNSS(body []byte) (lifetime uint32, addrs []byte, ok bool) {
	if len(body) < 6+16 || (len(body)-6)%16 != 0 {
		return 0, nil, false
	}
	return binary.BigEndian.Uint32(body[2:]), body[6:], true
}

// NDPDNSSL splits a DNSSL option body into its lifetime and the encoded
// domain names (DNS wire format, zero padded), or ok false.
func NDPDNSSL(body []byte) (lifetime uint32, names []byte, ok bool) {
	if len(body) < 6+2 {
		return 0, nil, false
	}
	return binary.BigEndian.Uint32(body[2:]), body[6:], true
}

// EncodeNDPLinkAddrOption writes a source or target link-layer address
// option for an Ethernet MAC and returns its length, 8.
func EncodeNDPLinkAddrOption(b []byte, typ uint8, mac []byte) int {
	b[0], b[1] = typ, 1
	copy(b[2:8], mac)
	return 8
}

// EncodeNDPPrefixInfoOption writes a prefix information option (32 bytes)
// and returns 32. The prefix is masked to its length.
func EncodeNDPPrefixInfoOption(b []byte, prefix netip.Prefix, flags uint8, valid, preferred uint32) int {
	b[0], b[1] = NDPOptionPrefixInfo, 4
	b[2] = uint8(prefix.Bits())
	b[3] = flags
	binary.BigEndian.PutUint32(b[4:], valid)
	binary.BigEndian.PutUint32(b[8:], preferred)
	binary.BigEndian.PutUint32(b[12:], 0)
	a := prefix.Masked().Addr().As16()
	copy(b[16:32], a[:])
	return 32
}

// EncodeNDPMTUOption writes an MTU option and returns its length, 8.
func EncodeNDPMTUOption(b []byte, mtu uint32) int {
	b[0], b[1], b[2], b[3] = NDPOptionMTU, 1, 0, 0
	binary.BigEndian.PutUint32(b[4:], mtu)
	return 8
}

// EncodeNDPRDNSSOption writes an RDNSS option (RFC 8106) for the IPv6
// addresses in servers and returns its length, 8+16*len(servers).
func EncodeNDPRDNSSOption(b []byte, lifetime uint32, servers []netip.Addr) int {
	b[0], b[1], b[2], b[3] = NDPOptionRDNSS, uint8(1+2*len(servers)), 0, 0
	binary.BigEndian.PutUint32(b[4:], lifetime)
	n := 8
	for _, s := range servers {
		a := s.As16()
		copy(b[n:n+16], a[:])
		n += 16
	}
	return n
}

// EncodeNDPDNSSLOption writes a DNSSL option (RFC 8106) for the domains in
// names and returns its length, padded to 8 bytes. Names are left out as
// EncodeDNSSearchList leaves them; with none left, or when b is too short,
// nothing is written and 0 is returned.
func EncodeNDPDNSSLOption(b []byte, lifetime uint32, names []string) int {
	if len(b) < 16 {
		return 0
	}
	n := 8 + EncodeDNSSearchList(b[8:], names)
	if n == 8 {
		return 0
	}
	pad := (8 - n%8) % 8
	if n+pad > len(b) || (n+pad)/8 > 255 {
		return 0
	}
	clear(b[n : n+pad])
	n += pad
	b[0], b[1], b[2], b[3] = NDPOptionDNSSL, uint8(n/8), 0, 0
	binary.BigEndian.PutUint32(b[4:], lifetime)
	return n
}
