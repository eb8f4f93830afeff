package header

// The ICMPv4 and ICMPv6 header views.

import "encoding/binary"

// ICMPv4 (RFC 792) and ICMPv6 (RFC 4443) share the first four bytes; echo
// messages continue with an identifier and a sequence number:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Type      |     Code      |          Checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Identifier          |        Sequence Number        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Data ...
//	+-+-+-+-+-
type ICMPv4 []byte

// ICMPv6 has the same layout as ICMPv4; its NDP messages are in ndp.go.
type ICMPv6 []byte

const (
	icmpType     = 0
	icmpCode     = 1
	icmpChecksum = 2
	icmpIdent    = 4
	icmpSeq      = 6

	// ICMPv4MinimumSize covers type, code, checksum and the 4-byte rest
	// of header (echo id/seq, or unused for errors).
	ICMPv4MinimumSize = 8
	// ICMPv6MinimumSize is the same for ICMPv6.
	ICMPv6MinimumSize = 8
)

// ICMPv4 types.
const (
	ICMPv4EchoReply      uint8 = 0
	ICMPv4DstUnreachable uint8 = 3
	ICMPv4Echo           uint8 = 8
	ICMPv4TimeExceeded   uint8 = 11
	ICMPv4ParamProblem   uint8 = 12
)

// ICMPv4 destination unreachable codes.
const (
	ICMPv4NetUnreachable  uint8 = 0
	ICMPv4HostUnreachable uint8 = 1
	ICMPv4ProtoUnreach    uint8 = 2
	ICMPv4PortUnreachable uint8 = 3
	ICMPv4FragNeeded      uint8 = 4
)

// ICMPv6 types.
const (
	ICMPv6DstUnreachable        uint8 = 1
	ICMPv6PacketTooBig          uint8 = 2
	ICMPv6TimeExceeded          uint8 = 3
	ICMPv6ParamProblem          uint8 = 4
	ICMPv6EchoRequest           uint8 = 128
	ICMPv6EchoReply             uint8 = 129
	ICMPv6RouterSolicitation    uint8 = 133
	ICMPv6RouterAdvertisement   uint8 = 134
	ICMPv6NeighborSolicitation  uint8 = 135
	ICMPv6NeighborAdvertisement uint8 = 136
	ICMPv6Redirect              uint8 = 137
)

// ICMPv6 destination unreachable codes.
const (
	ICMPv6NoRoute         uint8 = 0
	ICMPv6AdminProhibited uint8 = 1
	ICMPv6AddrUnreachable uint8 = 3
	ICMPv6PortUnreachable uint8 = 4
)

// IsValid reports whether b holds at least the 8-byte ICMP header.
func (b ICMPv4) IsValid() bool { return len(b) >= ICMPv4MinimumSize }

// Type returns the message type.
func (b ICMPv4) Type() uint8 { return b[icmpType] }

// Code returns the message code.
func (b ICMPv4) Code() uint8 { return b[icmpCode] }

// Checksum returns the checksum field.
func (b ICMPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[icmpChecksum:]) }

// Ident returns the echo identifier.
func (b ICMPv4) Ident() uint16 { return binary.BigEndian.Uint16(b[icmpIdent:]) }

// Seq returns the echo sequence number.
func (b ICMPv4) Seq() uint16 { return binary.BigEndian.Uint16(b[icmpSeq:]) }

// MTU returns the next-hop MTU of a fragmentation-needed message (RFC 1191).
func (b ICMPv4) MTU() uint16 { return binary.BigEndian.Uint16(b[icmpSeq:]) }

// Payload returns what follows the 8-byte header.
func (b ICMPv4) Payload() []byte { return b[ICMPv4MinimumSize:] }

// SetType sets the message type.
func (b ICMPv4) SetType(t uint8) { b[icmpType] = t }

// SetCode sets the message code.
func (b ICMPv4) SetCode(c uint8) { b[icmpCode] = c }

// SetChecksum sets the checksum field.
func (b ICMPv4) SetChecksum(x uint16) { binary.BigEndian.PutUint16(b[icmpChecksum:], x) }

// SetIdent sets the echo identifier.
func (b ICMPv4) SetIdent(id uint16) { binary.BigEndian.PutUint16(b[icmpIdent:], id) }

// SetSeq sets the echo sequence number.
func (b ICMPv4) SetSeq(s uint16) { binary.BigEndian.PutUint16(b[icmpSeq:], s) }

// SetRest sets the 4 bytes after the checksum (unused, MTU, pointer...).
func (b ICMPv4) SetRest(v uint32) { binary.BigEndian.PutUint32(b[icmpIdent:], v) }

// CalculateChecksum returns the checksum to store over the whole message b
// (ICMPv4 has no pseudo-header).
func (b ICMPv4) CalculateChecksum() uint16 { return TransportChecksum(b, icmpChecksum, 0) }

// IsValid reports whether b holds at least the 8-byte ICMPv6 header.
func (b ICMPv6) IsValid() bool { return len(b) >= ICMPv6MinimumSize }

// Type returns the message type.
func (b ICMPv6) Type() uint8 { return b[icmpType] }

// Code returns the message code.
func (b ICMPv6) Code() uint8 { return b[icmpCode] }

// Checksum returns the checksum field.
func (b ICMPv6) Checksum() uint16 { return binary.BigEndian.Uint16(b[icmpChecksum:]) }

// Ident returns the echo identifier.
func (b ICMPv6) Ident() uint16 { return binary.BigEndian.Uint16(b[icmpIdent:]) }

// Seq returns the echo sequence number.
func (b ICMPv6) Seq() uint16 { return binary.BigEndian.Uint16(b[icmpSeq:]) }

// MTU returns the MTU of a packet-too-big message.
func (b ICMPv6) MTU() uint32 { return binary.BigEndian.Uint32(b[icmpIdent:]) }

// Payload returns what follows the 8-byte header.
func (b ICMPv6) Payload() []byte { return b[ICMPv6MinimumSize:] }

// SetType sets the message type.
func (b ICMPv6) SetType(t uint8) { b[icmpType] = t }

// SetCode sets the message code.
func (b ICMPv6) SetCode(c uint8) { b[icmpCode] = c }

// SetChecksum sets the checksum field.
func (b ICMPv6) SetChecksum(x uint16) { binary.BigEndian.PutUint16(b[icmpChecksum:], x) }

// SetIdent sets the echo identifier.
func (b ICMPv6) SetIdent(id uint16) { binary.BigEndian.PutUint16(b[icmpIdent:], id) }

// SetSeq sets the echo sequence number.
func (b ICMPv6) SetSeq(s uint16) { binary.BigEndian.PutUint16(b[icmpSeq:], s) }

// SetRest sets the 4 bytes after the checksum (unused, MTU, pointer...).
func (b ICMPv6) SetRest(v uint32) { binary.BigEndian.PutUint32(b[icmpIdent:], v) }

// CalculateChecksum returns the checksum to store over message b given the
// IPv6 pseudo-header sum (PseudoHeaderChecksum with ProtocolICMPv6).
func (b ICMPv6) CalculateChecksum(pseudo uint16) uint16 {
	return TransportChecksum(b, icmpChecksum, pseudo)
}
