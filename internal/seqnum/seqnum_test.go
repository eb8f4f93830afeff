package seqnum

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b      Value
		less, leq bool
	}{
		{1, 2, true, true},
		{2, 1, false, false},
		{5, 5, false, true},
		{0xfffffff0, 0x10, true, true}, // wrapped
		{0x10, 0xfffffff0, false, false},
	} {
		if got := tc.a.LessThan(tc.b); got != tc.less {
			t.Errorf("%#x < %#x: got %v, want %v", tc.a, tc.b, got, tc.less)
		}
		if got := tc.a.LessThanEq(tc.b); got != tc.leq {
			t.Errorf("%#x <= %#x: got %v, want %v", tc.a, tc.b, got, tc.leq)
		}
	}
}

func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		v, first Value
		size     uint32
		want     bool
	}{
		{10, 10, 1, true},
		{11, 10, 1, false},
		{9, 10, 100, false},
		{5, 0xfffffffb, 16, true}, // across the wrap
		{0, 0, 0, false},
	} {
		if got := tc.v.InWindow(tc.first, tc.size); got != tc.want {
			t.Errorf("%#x in [%#x, +%d): got %v, want %v", tc.v, tc.first, tc.size, got, tc.want)
		}
	}
	if got := Value(0xfffffff0).Size(0x10); got != 0x20 {
		t.Errorf("size across wrap: got %#x, want 0x20", got)
	}
	if !Value(3).InRange(0xfffffffe, 5) || Value(5).InRange(0xfffffffe, 5) {
		t.Error("InRange across the wrap is wrong")
	}
}

// TestSipHashVector checks the reference vector from the SipHash paper
// (appendix A): key 00..0f, message 00..0e, output a129ca6149be45e5.
func TestSipHashVector(t *testing.T) {
	var key [16]byte
	m := make([]byte, 15)
	for i := range key {
		key[i] = byte(i)
	}
	for i := range m {
		m[i] = byte(i)
	}
	got := sipHash24(binary.LittleEndian.Uint64(key[:8]), binary.LittleEndian.Uint64(key[8:]), m)
	if want := uint64(0xa129ca6149be45e5); got != want {
		t.Errorf("got %#x, want %#x", got, want)
	}
}

func TestISN(t *testing.T) {
	g := NewISNGenerator()
	a := netip.MustParseAddrPort("192.0.2.1:40000")
	b := netip.MustParseAddrPort("198.51.100.1:80")
	now := time.Now()
	x, y := g.ISN(a, b, now), g.ISN(a, b, now)
	if x != y {
		t.Errorf("same tuple and time: got %#x and %#x, want equal", x, y)
	}
	if later := g.ISN(a, b, now.Add(time.Millisecond)); later-x != 250 {
		t.Errorf("1 ms later: got advance %d, want 250 (4 µs ticks)", later-x)
	}
	if g.ISN(b, a, now) == x {
		t.Error("reversed tuple gave the same ISN")
	}
	if NewISNGenerator().ISN(a, b, now) == x {
		t.Error("two keys gave the same ISN")
	}
}

func BenchmarkISN(b *testing.B) {
	g := NewISNGenerator()
	s := netip.MustParseAddrPort("[2001:db8::1]:40000")
	d := netip.MustParseAddrPort("[2001:db8::2]:80")
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		g.ISN(s, d, now)
	}
}
