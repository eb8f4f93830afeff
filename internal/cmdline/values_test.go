package cmdline

import (
	"math"
	"testing"
)

// TestParseCUint: the numbers strtoul(3) with base 0 reads whole, and no
// others (Go's own prefixes and digit separators included).
func TestParseCUint(t *testing.T) {
	tests := []struct {
		in      string
		n       uint64
		neg, ok bool
	}{
		{"0", 0, false, true},
		{"1500", 1500, false, true},
		{"0x5dc", 1500, false, true},
		{"0X5DC", 1500, false, true},
		{"02734", 1500, false, true},
		{"00", 0, false, true},
		{" \t1500", 1500, false, true},
		{"+1500", 1500, false, true},
		{"-0", 0, true, true},
		{"-1", 1, true, true},
		{"99999999999999999999", math.MaxUint64, false, true},
		{"0xffffffffffffffffff", math.MaxUint64, false, true},
		{"", 0, false, false},
		{" ", 0, false, false},
		{"+", 0, false, false},
		{"0x", 0, false, false},
		{"0x+5", 0, false, false},
		{"+-5", 0, false, false},
		{"08", 0, false, false},
		{"1500 ", 0, false, false},
		{"1_500", 0, false, false},
		{"0b101", 0, false, false},
		{"0o17", 0, false, false},
		{"1e3", 0, false, false},
		{"x", 0, false, false},
	}
	for _, tt := range tests {
		n, neg, ok := parseCUint(tt.in)
		if ok != tt.ok || (ok && (n != tt.n || neg != tt.neg)) {
			t.Errorf("parseCUint(%q): got %d, %v, %v, want %d, %v, %v", tt.in, n, neg, ok, tt.n, tt.neg, tt.ok)
		}
	}
}
