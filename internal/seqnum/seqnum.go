// Package seqnum provides TCP sequence number arithmetic (RFC 9293 section
// 3.4: comparisons modulo 2^32) and RFC 6528 initial sequence numbers.
package seqnum

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"net/netip"
	"time"
)

// Value is a TCP sequence number. Comparisons are modulo 2^32: a is "less
// than" b when b lies within the 2^31 values after a.
type Value uint32

// LessThan reports whether v comes before w in sequence space.
func (v Value) LessThan(w Value) bool { return int32(v-w) < 0 }

// LessThanEq reports whether v comes before w or equals it.
func (v Value) LessThanEq(w Value) bool { return int32(v-w) <= 0 }

// InRange reports whether v is in [a, b).
func (v Value) InRange(a, b Value) bool { return v-a < b-a }

// InWindow reports whether v is in [first, first+size).
func (v Value) InWindow(first Value, size uint32) bool { return uint32(v-first) < size }

// Add returns v advanced by n bytes.
func (v Value) Add(n uint32) Value { return v + Value(n) }

// Size returns the number of bytes from v up to w (w must not be before v).
func (v Value) Size(w Value) uint32 { return uint32(w - v) }

// ISNGenerator makes initial sequence numbers as RFC 6528 asks: a keyed
// pseudo-random function of the connection's four-tuple plus a clock ticking
// every 4 microseconds, so that sequence numbers of a reused four-tuple keep
// advancing while an off-path attacker cannot predict them.
type ISNGenerator struct {
	k0, k1 uint64
	start  time.Time
}

// NewISNGenerator makes a generator with a fresh random key.
func NewISNGenerator() *ISNGenerator {
	var key [16]byte
	if _, err := rand.Read(key[:]); err != nil {
		// crypto/rand does not fail on Linux 3.17+ (getrandom); this is
		// unreachable in practice, and a zero key still yields valid ISNs.
		key = [16]byte{}
	}
	return &ISNGenerator{
		k0:    binary.LittleEndian.Uint64(key[:8]),
		k1:    binary.LittleEndian.Uint64(key[8:]),
		start: time.Now(),
	}
}

// ISN returns the initial sequence number for a connection from src to dst.
func (g *ISNGenerator) ISN(src netip.AddrPort, dst netip.AddrPort, now time.Time) Value {
	var m [36]byte
	s16, d16 := src.Addr().As16(), dst.Addr().As16()
	copy(m[0:16], s16[:])
	copy(m[16:32], d16[:])
	binary.BigEndian.PutUint16(m[32:], src.Port())
	binary.BigEndian.PutUint16(m[34:], dst.Port())
	h := sipHash24(g.k0, g.k1, m[:])
	tick := uint32(now.Sub(g.start).Microseconds() / 4)
	return Value(uint32(h) + tick)
}

// sipHash24 is SipHash-2-4 (Aumasson and Bernstein), the PRF RFC 6528
// suggests a family of; written out here to stay allocation-free.
func sipHash24(k0, k1 uint64, m []byte) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13)
		v1 ^= v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16)
		v3 ^= v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21)
		v3 ^= v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17)
		v1 ^= v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	n := len(m)
	for len(m) >= 8 {
		w := binary.LittleEndian.Uint64(m)
		v3 ^= w
		round()
		round()
		v0 ^= w
		m = m[8:]
	}
	var last [8]byte
	copy(last[:], m)
	last[7] = byte(n)
	w := binary.LittleEndian.Uint64(last[:])
	v3 ^= w
	round()
	round()
	v0 ^= w
	v2 ^= 0xff
	round()
	round()
	round()
	round()
	return v0 ^ v1 ^ v2 ^ v3
}
