package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParsePortSpecs feeds one or more option values (separated by '\n')
// and checks the parser never panics, errors are typed, and a successful
// result keeps its promises.
func FuzzParsePortSpecs(f *testing.F) {
	for _, s := range []string{
		"22-80:32-90", "192.0.2.1%eth0/22", "%eth0/22", "0.0.0.0/5000:192.0.2.5/6000",
		"2000-5000,~3000-3010", "::1/auto", "8000-8010,auto", "none", "8080-8080:80-80",
		"auto", "all", "~20000-20010", "192.0.2.1/20-30,~25", "1:[2::3]/4", "all:192.0.2.9",
		"127.0.0.1/80\n::1/80", "80\n~22", "none\n80", "70000", "5-3", "80:", "%/80", "~",
		"80,80:81", "auto\nauto", "fe80::1%eth0/22", "", "0.0.0.0/22:127.0.0.1", "22-23:[::1]",
	} {
		f.Add(s, uint16(32768), uint16(60999))
	}
	f.Fuzz(func(t *testing.T, in string, ephFirst, ephLast uint16) {
		specs := strings.Split(in, "\n")
		s, err := ParsePortSpecsWith(specs, ParseOptions{Ephemeral: PortRange{ephFirst, ephLast}})
		if err != nil {
			var pe *PortSpecError
			if !errors.As(err, &pe) || pe.Err == nil || pe.Reason == "" {
				t.Fatalf("%q: untyped or empty error %#v", in, err)
			}
			return
		}
		if s.Mode == PortsNone && len(s.Rules) != 0 {
			t.Fatalf("%q: mode none with rules %v", in, s.Rules)
		}
		if s.Mode == PortsSpec && len(s.Rules) == 0 {
			t.Fatalf("%q: mode spec without rules", in)
		}
		hasAuto := false
		for i, r := range s.Rules {
			hasAuto = hasAuto || r.Auto
			if r.First == 0 || r.First > r.Last {
				t.Fatalf("%q: rule %v has a bad source range", in, r)
			}
			if r.ToFirst == 0 || int(r.ToFirst)+int(r.Last-r.First) > 65535 {
				t.Fatalf("%q: rule %v targets ports outside 1-65535", in, r)
			}
			if p := s.Excluded.next(int(r.First), int(r.Last), true); p >= 0 {
				t.Fatalf("%q: rule %v forwards excluded port %d", in, r, p)
			}
			for _, o := range s.Rules[:i] {
				if o.Auto == r.Auto && o.First <= r.Last && r.First <= o.Last && scopesOverlap(&o, &r) {
					t.Fatalf("%q: rules %v and %v overlap", in, o, r)
				}
			}
		}
		if hasAuto != (s.Mode == PortsAuto) {
			t.Fatalf("%q: mode %d but auto rules %v", in, s.Mode, hasAuto)
		}
		// Forwarded agrees with the rules at their edges.
		for _, r := range s.Rules {
			if r.Auto {
				continue
			}
			for _, p := range [2]uint16{r.First, r.Last} {
				dst, ok := s.Forwarded(p)
				if !ok || dst == 0 || s.Excluded.Has(p) {
					t.Fatalf("%q: Forwarded(%d) = %d, %v for rule %v", in, p, dst, ok, r)
				}
			}
		}
		m := MergeUDPFromTCP(s, PortSpec{})
		for _, r := range m.Rules {
			if !r.Auto && r.ToFirst != r.First {
				t.Fatalf("%q: UDP copy %v translates ports", in, r)
			}
		}
	})
}

// FuzzParseEphemeralRange checks the sysctl parser never panics and only
// returns valid ranges.
func FuzzParseEphemeralRange(f *testing.F) {
	for _, s := range []string{"32768\t60999\n", "1 65535", "", "5 3", "0 0", "a b c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r, err := ParseEphemeralRange(in)
		if err == nil && (r.First == 0 || r.First > r.Last) {
			t.Fatalf("%q: got invalid range %v without error", in, r)
		}
	})
}
