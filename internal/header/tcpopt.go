package header

// TCP options: parsing (MSS, window scale, SACK, timestamps) and encoding.

import "encoding/binary"

// TCP option kinds (IANA "TCP Option Kind Numbers").
const (
	TCPOptionEOL           uint8 = 0
	TCPOptionNOP           uint8 = 1
	TCPOptionMSS           uint8 = 2
	TCPOptionWS            uint8 = 3
	TCPOptionSACKPermitted uint8 = 4
	TCPOptionSACK          uint8 = 5
	TCPOptionTS            uint8 = 8

	TCPOptionMSSLength           = 4
	TCPOptionWSLength            = 3
	TCPOptionSACKPermittedLength = 2
	TCPOptionTSLength            = 10

	// TCPMaxSACKBlocks is how many SACK blocks fit in 40 option bytes.
	TCPMaxSACKBlocks = 4
	// TCPMaxWindowScale is RFC 7323's limit on the shift count.
	TCPMaxWindowScale = 14
)

// TCPOptionIter walks TCP options without allocating:
//
//	it := TCPOptionIter{Options: seg.Options()}
//	for kind, data, ok := it.Next(); ok; kind, data, ok = it.Next() { ... }
//	if it.Malformed { drop }
type TCPOptionIter struct {
	Options []byte
	// Malformed is set once Next met an option whose length byte is
	// missing, below 2, or runs past the options area.
	Malformed bool
}

// Next returns the next option's kind and data (without kind and length
// bytes), skipping NOPs; ok is false at the end, at EOL or on a malformed
// option.
func (it *TCPOptionIter) Next() (kind uint8, data []byte, ok bool) {
	for len(it.Options) > 0 {
		kind = it.Options[0]
		switch kind {
		case TCPOptionEOL:
			it.Options = nil
			return 0, nil, false
		case TCPOptionNOP:
			it.Options = it.Options[1:]
			continue
		}
		if len(it.Options) < 2 {
			break
		}
		l := int(it.Options[1])
		if l < 2 || l > len(it.Options) {
			break
		}
		data = it.Options[2:l]
		it.Options = it.Options[l:]
		return kind, data, true
	}
	if len(it.Options) > 0 {
		it.Malformed = true
		it.Options = nil
	}
	return 0, nil, false
}

// SACKBlock is one SACK range [Start, End) in sequence space.
type SACKBlock struct{ Start, End uint32 }

// TCPOptions is the subset of options the engine acts on.
type TCPOptions struct {
	MSS           uint16 // 0 when absent
	WS            int    // shift count, -1 when absent, capped at 14
	SACKPermitted bool
	TS            bool // timestamps present
	TSVal, TSEcr  uint32
	SACKBlocks    [TCPMaxSACKBlocks]SACKBlock
	NumSACK       int
}

// ParseTCPOptions fills o from an options area; it returns false when the
// area is malformed or a known option has the wrong length. Unknown
// options are skipped.
func ParseTCPOptions(opts []byte, o *TCPOptions) bool {
	*o = TCPOptions{WS: -1}
	it := TCPOptionIter{Options: opts}
	for kind, data, ok := it.Next(); ok; kind, data, ok = it.Next() {
		switch kind {
		case TCPOptionMSS:
			if len(data) != 2 {
				return false
			}
			o.MSS = binary.BigEndian.Uint16(data)
		case TCPOptionWS:
			if len(data) != 1 {
				return false
			}
			o.WS = min(int(data[0]), TCPMaxWindowScale)
		case TCPOptionSACKPermitted:
			if len(data) != 0 {
				return false
			}
			o.SACKPermitted = true
		case TCPOptionTS:
			if len(data) != 8 {
				return false
			}
			o.TS = true
			o.TSVal = binary.BigEndian.Uint32(data)
			o.TSEcr = binary.BigEndian.Uint32(data[4:])
		case TCPOptionSACK:
			if len(data)%8 != 0 || len(data) == 0 {
				return false
			}
			for ; len(data) >= 8 && o.NumSACK < TCPMaxSACKBlocks; data = data[8:] {
				o.SACKBlocks[o.NumSACK] = SACKBlock{
					Start: binary.BigEndian.Uint32(data),
					End:   binary.BigEndian.Uint32(data[4:]),
				}
				o.NumSACK++
			}
		}
	}
	return !it.Malformed
}

// EncodeMSSOption writes an MSS option into b and returns its length.
func EncodeMSSOption(b []byte, mss uint16) int {
	b[0], b[1] = TCPOptionMSS, TCPOptionMSSLength
	binary.BigEndian.PutUint16(b[2:], mss)
	return TCPOptionMSSLength
}

// EncodeWSOption writes a NOP and a window scale option into b (4 bytes,
// keeping what follows aligned) and returns 4.
func EncodeWSOption(b []byte, shift uint8) int {
	b[0], b[1], b[2], b[3] = TCPOptionNOP, TCPOptionWS, TCPOptionWSLength, shift
	return 4
}

// EncodeSACKPermittedOption writes two NOPs and SACK-permitted (4 bytes)
// and returns 4.
func EncodeSACKPermittedOption(b []byte) int {
	b[0], b[1], b[2], b[3] = TCPOptionNOP, TCPOptionNOP, TCPOptionSACKPermitted, TCPOptionSACKPermittedLength
	return 4
}

// EncodeTSOption writes two NOPs and a timestamps option (12 bytes) and
// returns 12.
func EncodeTSOption(b []byte, val, ecr uint32) int {
	b[0], b[1], b[2], b[3] = TCPOptionNOP, TCPOptionNOP, TCPOptionTS, TCPOptionTSLength
	binary.BigEndian.PutUint32(b[4:], val)
	binary.BigEndian.PutUint32(b[8:], ecr)
	return 12
}

// EncodeSACKOption writes two NOPs and a SACK option with blocks (at most
// 4, or 3 alongside timestamps) and returns its length, 4+8*len(blocks).
func EncodeSACKOption(b []byte, blocks []SACKBlock) int {
	b[0], b[1], b[2], b[3] = TCPOptionNOP, TCPOptionNOP, TCPOptionSACK, uint8(2+8*len(blocks))
	n := 4
	for _, s := range blocks {
		binary.BigEndian.PutUint32(b[n:], s.Start)
		binary.BigEndian.PutUint32(b[n+4:], s.End)
		n += 8
	}
	return n
}
