package fwdrule

// Port numbers: sets of them, ranges, and the host's ephemeral range,
// which "all", exclusions-only values and auto leave out.

import (
	"errors"
	"math/bits"
	"os"
	"strings"
)

// Range is an inclusive range of port numbers.
type Range struct{ First, Last uint16 }

// DefaultEphemeral is RFC 6335's dynamic port range, used when the
// kernel's ip_local_port_range cannot be read (as pasta does).
var DefaultEphemeral = Range{49152, 65535}

// PortSet is a set of port numbers, one bit each.
type PortSet [NumPorts / 64]uint64

// Has reports whether p is in the set.
func (s *PortSet) Has(p uint16) bool { return s[p>>6]&(1<<(p&63)) != 0 }

// Add puts p in the set.
func (s *PortSet) Add(p uint16) { s[p>>6] |= 1 << (p & 63) }

// AddRange puts first..last (inclusive) in the set.
func (s *PortSet) AddRange(first, last uint16) {
	for p := int(first); p <= int(last); {
		if p&63 == 0 && p+63 <= int(last) { // whole word: long ranges stay cheap
			s[p>>6], p = ^uint64(0), p+64
			continue
		}
		s.Add(uint16(p))
		p++
	}
}

// Union adds every port of o to s.
func (s *PortSet) Union(o *PortSet) {
	for i := range s {
		s[i] |= o[i]
	}
}

// next returns the first port in p..last whose membership equals member,
// or -1. Word at a time, so splitting 65535-port ranges stays cheap.
func (s *PortSet) next(p, last int, member bool) int {
	for p <= last {
		w := s[p>>6]
		if !member {
			w = ^w
		}
		if w >>= uint(p & 63); w != 0 {
			if p += bits.TrailingZeros64(w); p <= last {
				return p
			}
			return -1
		}
		p = (p | 63) + 1
	}
	return -1
}

// Runs calls fn for each maximal run of first..last outside s, in order.
func (s *PortSet) Runs(first, last uint16, fn func(first, last uint16)) {
	for p, end := int(first), int(last); p <= end; {
		if p = s.next(p, end, false); p < 0 {
			return
		}
		stop := s.next(p, end, true)
		if stop < 0 {
			stop = end + 1
		}
		fn(uint16(p), uint16(stop-1))
		p = stop
	}
}

// ParseEphemeralRange parses /proc/sys/net/ipv4/ip_local_port_range: two
// port numbers separated by white space, the first not above the second.
func ParseEphemeralRange(content string) (Range, error) {
	f := strings.Fields(content)
	if len(f) != 2 {
		return Range{}, errors.New("ip_local_port_range: want two port numbers")
	}
	var r Range
	for i, p := range []*uint16{&r.First, &r.Last} {
		n, bad := parsePort(f[i])
		if bad != nil || n == 0 {
			return Range{}, errors.New("ip_local_port_range: " + strings.TrimSpace(content) + ": not a port range")
		}
		*p = n
	}
	if r.First > r.Last {
		return Range{}, errors.New("ip_local_port_range: " + strings.TrimSpace(content) + ": range ends before it starts")
	}
	return r, nil
}

// ReadEphemeralRange reads the ephemeral port range of the caller's
// network namespace: gopasta reads the host's, before its sandbox is on,
// when it parses its options and again when it builds its tables.
func ReadEphemeralRange() (Range, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return Range{}, err
	}
	return ParseEphemeralRange(string(b))
}

// Ephemeral is the host's ephemeral range, or DefaultEphemeral when it
// cannot be read.
func Ephemeral() Range {
	if r, err := ReadEphemeralRange(); err == nil {
		return r
	}
	return DefaultEphemeral
}
