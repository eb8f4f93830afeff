package header

// The UDP header view.

import "encoding/binary"

// UDP header (RFC 768):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Source Port          |       Destination Port        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             Length            |            Checksum           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type UDP []byte

const (
	udpSrcPort  = 0
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6

	// UDPMinimumSize is the header length.
	UDPMinimumSize = 8
)

// IsValid reports whether b holds a UDP header whose Length is at least the
// header and at most len(b) (which the caller has cut to the IP payload).
func (b UDP) IsValid() bool {
	if len(b) < UDPMinimumSize {
		return false
	}
	l := int(b.Length())
	return l >= UDPMinimumSize && l <= len(b)
}

// SrcPort returns the source port.
func (b UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(b[udpSrcPort:]) }

// DstPort returns the destination port.
func (b UDP) DstPort() uint16 { return binary.BigEndian.Uint16(b[udpDstPort:]) }

// Length returns the Length field (header plus payload).
func (b UDP) Length() uint16 { return binary.BigEndian.Uint16(b[udpLength:]) }

// Checksum returns the checksum field (0: none, IPv4 only).
func (b UDP) Checksum() uint16 { return binary.BigEndian.Uint16(b[udpChecksum:]) }

// Payload returns the data up to Length. Call it on a header that passed
// IsValid.
func (b UDP) Payload() []byte { return b[UDPMinimumSize:b.Length()] }

// SetSrcPort sets the source port.
func (b UDP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(b[udpSrcPort:], p) }

// SetDstPort sets the destination port.
func (b UDP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(b[udpDstPort:], p) }

// SetLength sets the Length field.
func (b UDP) SetLength(l uint16) { binary.BigEndian.PutUint16(b[udpLength:], l) }

// SetChecksum sets the checksum field.
func (b UDP) SetChecksum(x uint16) { binary.BigEndian.PutUint16(b[udpChecksum:], x) }

// Encode writes the header; the checksum is set to 0 (fill it afterwards
// with CalculateChecksum).
func (b UDP) Encode(src, dst, length uint16) {
	b.SetSrcPort(src)
	b.SetDstPort(dst)
	b.SetLength(length)
	b.SetChecksum(0)
}

// CalculateChecksum returns the checksum to store for datagram b (header and
// payload, Length bytes) given the pseudo-header sum. A computed 0 is sent
// as 0xffff, since 0 means "no checksum" (RFC 768).
func (b UDP) CalculateChecksum(pseudo uint16) uint16 {
	x := TransportChecksum(b, udpChecksum, pseudo)
	if x == 0 {
		x = 0xffff
	}
	return x
}
