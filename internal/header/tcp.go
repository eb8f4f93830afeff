package header

// The TCP header view.

import "encoding/binary"

// TCP header (RFC 9293):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Source Port          |       Destination Port        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Sequence Number                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Acknowledgment Number                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Data |       |C|E|U|A|P|R|S|F|                               |
//	| Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//	|       |       |R|E|G|K|H|T|N|N|                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Checksum            |         Urgent Pointer        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           [Options]                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type TCP []byte

const (
	tcpSrcPort  = 0
	tcpDstPort  = 2
	tcpSeq      = 4
	tcpAck      = 8
	tcpDataOff  = 12
	tcpFlags    = 13
	tcpWindow   = 14
	tcpChecksum = 16
	tcpUrgent   = 18

	// TCPMinimumSize is the header length without options.
	TCPMinimumSize = 20
	// TCPMaximumHeaderSize is the header length with data offset 15.
	TCPMaximumHeaderSize = 60
)

// TCP flags, as in the flags byte.
const (
	TCPFlagFIN uint8 = 1 << iota
	TCPFlagSYN
	TCPFlagRST
	TCPFlagPSH
	TCPFlagACK
	TCPFlagURG
	TCPFlagECE
	TCPFlagCWR
)

// IsValid reports whether b holds a whole TCP header: at least 20 bytes and
// a data offset between 5 and what b holds.
func (b TCP) IsValid() bool {
	if len(b) < TCPMinimumSize {
		return false
	}
	do := b.DataOffset()
	return do >= TCPMinimumSize && do <= len(b)
}

// SrcPort returns the source port.
func (b TCP) SrcPort() uint16 { return binary.BigEndian.Uint16(b[tcpSrcPort:]) }

// DstPort returns the destination port.
func (b TCP) DstPort() uint16 { return binary.BigEndian.Uint16(b[tcpDstPort:]) }

// Seq returns the sequence number.
func (b TCP) Seq() uint32 { return binary.BigEndian.Uint32(b[tcpSeq:]) }

// Ack returns the acknowledgment number.
func (b TCP) Ack() uint32 { return binary.BigEndian.Uint32(b[tcpAck:]) }

// DataOffset returns the header length in bytes.
func (b TCP) DataOffset() int { return int(b[tcpDataOff]>>4) * 4 }

// Flags returns the flags byte (TCPFlag*).
func (b TCP) Flags() uint8 { return b[tcpFlags] }

// Window returns the raw (unscaled) window.
func (b TCP) Window() uint16 { return binary.BigEndian.Uint16(b[tcpWindow:]) }

// Checksum returns the checksum field.
func (b TCP) Checksum() uint16 { return binary.BigEndian.Uint16(b[tcpChecksum:]) }

// UrgentPointer returns the urgent pointer.
func (b TCP) UrgentPointer() uint16 { return binary.BigEndian.Uint16(b[tcpUrgent:]) }

// Options returns the options area. Call it on a header that passed IsValid.
func (b TCP) Options() []byte { return b[TCPMinimumSize:b.DataOffset()] }

// Payload returns the data after the header. Call it on a header that
// passed IsValid.
func (b TCP) Payload() []byte { return b[b.DataOffset():] }

// SetSrcPort sets the source port.
func (b TCP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(b[tcpSrcPort:], p) }

// SetDstPort sets the destination port.
func (b TCP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(b[tcpDstPort:], p) }

// SetSeq sets the sequence number.
func (b TCP) SetSeq(s uint32) { binary.BigEndian.PutUint32(b[tcpSeq:], s) }

// SetAck sets the acknowledgment number.
func (b TCP) SetAck(a uint32) { binary.BigEndian.PutUint32(b[tcpAck:], a) }

// SetFlags sets the flags byte.
func (b TCP) SetFlags(f uint8) { b[tcpFlags] = f }

// SetWindow sets the raw window.
func (b TCP) SetWindow(w uint16) { binary.BigEndian.PutUint16(b[tcpWindow:], w) }

// SetChecksum sets the checksum field.
func (b TCP) SetChecksum(x uint16) { binary.BigEndian.PutUint16(b[tcpChecksum:], x) }

// TCPFields holds what Encode writes. The options themselves are written by
// the Encode*Option helpers into b[TCPMinimumSize:]; DataOffset counts them.
type TCPFields struct {
	SrcPort, DstPort uint16
	Seq, Ack         uint32
	DataOffset       int // header length in bytes, a multiple of 4
	Flags            uint8
	Window           uint16
	Checksum         uint16
	UrgentPointer    uint16
}

// Encode writes the fixed part of the header from f.
func (b TCP) Encode(f *TCPFields) {
	binary.BigEndian.PutUint16(b[tcpSrcPort:], f.SrcPort)
	binary.BigEndian.PutUint16(b[tcpDstPort:], f.DstPort)
	binary.BigEndian.PutUint32(b[tcpSeq:], f.Seq)
	binary.BigEndian.PutUint32(b[tcpAck:], f.Ack)
	b[tcpDataOff] = uint8(f.DataOffset/4) << 4
	b[tcpFlags] = f.Flags
	binary.BigEndian.PutUint16(b[tcpWindow:], f.Window)
	binary.BigEndian.PutUint16(b[tcpChecksum:], f.Checksum)
	binary.BigEndian.PutUint16(b[tcpUrgent:], f.UrgentPointer)
}

// TransportChecksum computes the checksum to store for a TCP, UDP or ICMPv6
// packet b (header and payload) whose checksum field, at csumOff, is
// treated as zero; pseudo is PseudoHeaderChecksum's result.
func TransportChecksum(b []byte, csumOff int, pseudo uint16) uint16 {
	x := Checksum(b[:csumOff], pseudo)
	x = Checksum(b[csumOff+2:], x)
	return ^x
}

// CalculateChecksum returns the checksum to store for segment b given the
// pseudo-header sum.
func (b TCP) CalculateChecksum(pseudo uint16) uint16 {
	return TransportChecksum(b, tcpChecksum, pseudo)
}
