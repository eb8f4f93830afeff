package header

// The internet checksum (RFC 1071): sums, pseudo-headers, and incremental
// updates (RFC 1624).

import (
	"encoding/binary"
	"math/bits"
)

// Checksum returns the 16-bit one's complement sum (RFC 1071) of b added to
// initial, not complemented, so partial sums can be chained: pass the result
// of one call as initial of the next. Every part but the last must have an
// even length, or the byte pairing of the following part shifts.
//
// The loop adds 64-bit little-endian words with end-around carry, 32 bytes
// per iteration. One's complement addition is byte-order independent
// (RFC 1071 section 2(B)), so summing little-endian words (plain loads on
// the machines we run on) and swapping the two bytes of the folded result
// gives the big-endian sum.
func Checksum(b []byte, initial uint16) uint16 {
	acc := uint64(bits.ReverseBytes16(initial))
	var c uint64
	for len(b) >= 32 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[0:8]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[8:16]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[16:24]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[24:32]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[:8]), c)
		b = b[8:]
	}
	if len(b) >= 4 {
		acc, c = bits.Add64(acc, uint64(binary.LittleEndian.Uint32(b[:4])), c)
		b = b[4:]
	}
	if len(b) >= 2 {
		acc, c = bits.Add64(acc, uint64(binary.LittleEndian.Uint16(b[:2])), c)
		b = b[2:]
	}
	if len(b) == 1 {
		// A trailing odd byte is the high byte of a big-endian word,
		// which is the low byte of a little-endian one.
		acc, c = bits.Add64(acc, uint64(b[0]), c)
	}
	// End-around carry: adding the carry can overflow only to 0, which
	// produces one more carry at most.
	acc, c = bits.Add64(acc, 0, c)
	acc += c
	return bits.ReverseBytes16(fold64(acc))
}

// fold64 reduces a 64-bit one's complement accumulator to 16 bits.
func fold64(acc uint64) uint16 {
	acc = (acc >> 32) + (acc & 0xffffffff) // < 2^33
	acc = (acc >> 32) + (acc & 0xffffffff) // < 2^32
	acc = (acc >> 16) + (acc & 0xffff)     // < 2^17
	acc = (acc >> 16) + (acc & 0xffff)     // <= 0xffff
	return uint16(acc)
}

// ChecksumCombine adds two 16-bit one's complement sums.
func ChecksumCombine(a, b uint16) uint16 {
	v := uint32(a) + uint32(b)
	return uint16(v + v>>16)
}

// PseudoHeaderChecksum returns the sum of the IPv4 or IPv6 pseudo-header
// (RFC 793, RFC 8200 section 8.1) for an upper-layer packet of length bytes:
// src and dst are 4 or 16 bytes, sliced straight from the IP header. Feed the
// result as initial to Checksum over the transport header and payload.
func PseudoHeaderChecksum(proto uint8, src, dst []byte, length uint32) uint16 {
	xsum := Checksum(src, uint16(proto))
	xsum = Checksum(dst, xsum)
	xsum = ChecksumCombine(xsum, uint16(length>>16))
	return ChecksumCombine(xsum, uint16(length))
}

// ChecksumUpdate16 returns the stored (complemented) checksum field xsum
// adjusted for one 16-bit word of the covered data changing from old to
// new, by RFC 1624 equation 3: HC' = ~(~HC + ~m + m'). A UDP checksum of
// 0 means "none" and must be left alone by the caller.
func ChecksumUpdate16(xsum, old, new uint16) uint16 {
	return ^ChecksumCombine(ChecksumCombine(^xsum, ^old), new)
}

// ChecksumUpdate applies ChecksumUpdate16 to every word of old and new,
// which have the same even length (4 bytes for IPv4 addresses, 16 for
// IPv6, 2 for ports). Rewriting a NATed address and port costs two calls and
// no pass over the payload.
func ChecksumUpdate(xsum uint16, old, new []byte) uint16 {
	s := ^xsum
	for i := 0; i+1 < len(old) && i+1 < len(new); i += 2 {
		s = ChecksumCombine(s, ^binary.BigEndian.Uint16(old[i:]))
		s = ChecksumCombine(s, binary.BigEndian.Uint16(new[i:]))
	}
	return ^s
}
