package config

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testEphemeral is Linux's default ip_local_port_range, so tests do not
// depend on this machine's setting.
var testEphemeral = PortRange{32768, 60999}

func rulesString(rs []PortRule) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
		if r.Weak {
			s[i] += "(weak)"
		}
	}
	return strings.Join(s, " ")
}

func TestParsePortSpecs(t *testing.T) {
	tests := []struct {
		specs []string
		mode  PortMode
		rules string          // rulesString of the result
		fwd   map[uint16]int  // port -> destination, -1 = not forwarded
		excl  []uint16        // ports that must be in Excluded
		auto  map[uint16]bool // AutoCandidate results
		check func(PortSpec) string
	}{
		{specs: nil, mode: PortsUnset, rules: ""},
		{specs: []string{"none"}, mode: PortsNone, rules: "", fwd: map[uint16]int{22: -1}},
		{specs: []string{"none", "none"}, mode: PortsNone, rules: ""},
		// As pasta: "none" first only ends the default (auto).
		{specs: []string{"none", "80"}, mode: PortsSpec, rules: "80-80:80-80", fwd: map[uint16]int{80: 80, 22: -1}},
		{specs: []string{"22"}, mode: PortsSpec, rules: "22-22:22-22", fwd: map[uint16]int{22: 22, 21: -1, 23: -1}},
		{specs: []string{"22:23"}, mode: PortsSpec, rules: "22-22:23-23", fwd: map[uint16]int{22: 23}},
		{specs: []string{"22,25"}, mode: PortsSpec, rules: "22-22:22-22 25-25:25-25", fwd: map[uint16]int{22: 22, 25: 25, 23: -1}},
		{specs: []string{"22-80"}, mode: PortsSpec, rules: "22-80:22-80", fwd: map[uint16]int{22: 22, 80: 80, 81: -1}},
		{specs: []string{"22-80:32-90"}, mode: PortsSpec, rules: "22-80:32-90", fwd: map[uint16]int{22: 32, 50: 60, 80: 90, 21: -1}},
		{specs: []string{"192.0.2.1/22"}, mode: PortsSpec, rules: "192.0.2.1/22-22:22-22", fwd: map[uint16]int{22: 22}},
		{specs: []string{"192.0.2.1%eth0/22"}, mode: PortsSpec, rules: "192.0.2.1%eth0/22-22:22-22", fwd: map[uint16]int{22: 22}},
		{specs: []string{"%eth0/22"}, mode: PortsSpec, rules: "%eth0/22-22:22-22"},
		{specs: []string{"fe80::1%eth0/22"}, mode: PortsSpec, rules: "fe80::1%eth0/22-22:22-22"},
		{specs: []string{"::1/8080"}, mode: PortsSpec, rules: "::1/8080-8080:8080-8080"},
		{specs: []string{"[::1]/8080"}, mode: PortsSpec, rules: "::1/8080-8080:8080-8080"},
		{specs: []string{"0.0.0.0/5000:192.0.2.5/6000"}, mode: PortsSpec,
			rules: "0.0.0.0/5000-5000:[192.0.2.5]/6000-6000", fwd: map[uint16]int{5000: 6000},
			check: func(s PortSpec) string {
				if got, want := s.Rules[0].ToAddr, netip.MustParseAddr("192.0.2.5"); got != want {
					return "ToAddr = " + got.String() + ", want " + want.String()
				}
				return ""
			}},
		{specs: []string{"80:192.0.2.5/8080"}, mode: PortsSpec, rules: "80-80:[192.0.2.5]/8080-8080"},
		{specs: []string{"1:[2::3]/4"}, mode: PortsSpec, rules: "1-1:[2::3]/4-4"},
		// A target address without ports keeps the port numbers (pasta's
		// "N[-M]:TADDR").
		{specs: []string{"0.0.0.0/22:127.0.0.1"}, mode: PortsSpec, rules: "0.0.0.0/22-22:[127.0.0.1]/22-22", fwd: map[uint16]int{22: 22}},
		{specs: []string{"22-23:192.0.2.5"}, mode: PortsSpec, rules: "22-23:[192.0.2.5]/22-23"},
		{specs: []string{"::/22:::1"}, mode: PortsSpec, rules: "::/22-22:[::1]/22-22"},
		{specs: []string{"22:[::1]"}, mode: PortsSpec, rules: "22-22:[::1]/22-22"},
		{specs: []string{"22:[127.0.0.1],80:8080"}, mode: PortsSpec, rules: "22-22:[127.0.0.1]/22-22 80-80:8080-8080"},
		{specs: []string{"1:2::3"}, mode: PortsSpec, rules: "1-1:[2::3]/1-1"},
		{specs: []string{"1:2::3/4"}, mode: PortsSpec, rules: "1:2::3/4-4:4-4"}, // scope wins
		{specs: []string{"2000-5000,~3000-3010"}, mode: PortsSpec, rules: "2000-2999:2000-2999 3011-5000:3011-5000",
			fwd: map[uint16]int{2000: 2000, 2999: 2999, 3000: -1, 3010: -1, 3011: 3011, 5000: 5000}, excl: []uint16{3000, 3005, 3010}},
		{specs: []string{"~3000-3010,2000-5000"}, mode: PortsSpec, rules: "2000-2999:2000-2999 3011-5000:3011-5000"},
		{specs: []string{"2000-5000", "~3000-3010"}, mode: PortsSpec, rules: "2000-2999:2000-2999 3011-5000:3011-5000"},
		{specs: []string{"all", "~22"}, mode: PortsSpec, rules: "1-21:1-21(weak) 23-32767:23-32767(weak) 61000-65535:61000-65535(weak)"},
		{specs: []string{"80", "~22"}, mode: PortsSpec, rules: "80-80:80-80", excl: []uint16{22}},
		{specs: []string{"~22", "~23"}, mode: PortsSpec, rules: "1-21:1-21(weak) 24-32767:24-32767(weak) 61000-65535:61000-65535(weak)"},
		{specs: []string{"::1/80", "127.0.0.1/~22"}, mode: PortsSpec,
			rules: "::1/80-80:80-80 127.0.0.1/1-21:1-21(weak) 127.0.0.1/23-32767:23-32767(weak) 127.0.0.1/61000-65535:61000-65535(weak)"},
		{specs: []string{"192.0.2.1/20-30,~25"}, mode: PortsSpec, rules: "192.0.2.1/20-24:20-24 192.0.2.1/26-30:26-30"},
		{specs: []string{"22-80:32-90,~50"}, mode: PortsSpec, rules: "22-49:32-59 51-80:61-90", fwd: map[uint16]int{49: 59, 50: -1, 51: 61}},
		{specs: []string{"~20000-20010"}, mode: PortsSpec,
			rules: "1-19999:1-19999(weak) 20011-32767:20011-32767(weak) 61000-65535:61000-65535(weak)",
			fwd:   map[uint16]int{1: 1, 20000: -1, 20011: 20011, 32768: -1, 60999: -1, 61000: 61000, 65535: 65535}},
		{specs: []string{"all"}, mode: PortsSpec, rules: "1-32767:1-32767(weak) 61000-65535:61000-65535(weak)",
			fwd: map[uint16]int{1: 1, 40000: -1}},
		{specs: []string{"all,~22"}, mode: PortsSpec, rules: "1-21:1-21(weak) 23-32767:23-32767(weak) 61000-65535:61000-65535(weak)"},
		{specs: []string{"all:192.0.2.9"}, mode: PortsSpec, rules: "1-32767:[192.0.2.9]/1-32767(weak) 61000-65535:[192.0.2.9]/61000-65535(weak)"},
		{specs: []string{"auto"}, mode: PortsAuto, rules: "1-65535(auto)", fwd: map[uint16]int{80: -1},
			auto: map[uint16]bool{80: true, 65535: true}},
		{specs: []string{"::1/auto"}, mode: PortsAuto, rules: "::1/1-65535(auto)"},
		{specs: []string{"8000-8010,auto"}, mode: PortsAuto, rules: "8000-8010:8000-8010 1-65535(auto)",
			fwd: map[uint16]int{8000: 8000, 8011: -1}, auto: map[uint16]bool{8000: false, 8011: true}},
		{specs: []string{"auto,~22"}, mode: PortsAuto, rules: "1-21(auto) 23-65535(auto)", auto: map[uint16]bool{22: false, 23: true}},
		{specs: []string{"127.0.0.1/auto", "::1/auto"}, mode: PortsAuto, rules: "127.0.0.1/1-65535(auto) ::1/1-65535(auto)"},
		// podman's form, and its per-address repeats.
		{specs: []string{"8080-8080:80-80"}, mode: PortsSpec, rules: "8080-8080:80-80", fwd: map[uint16]int{8080: 80}},
		{specs: []string{"127.0.0.1/8080-8080:80-80", "::1/8080-8080:80-80"}, mode: PortsSpec,
			rules: "127.0.0.1/8080-8080:80-80 ::1/8080-8080:80-80"},
		{specs: []string{"%eth0/80", "%eth1/80:81"}, mode: PortsSpec, rules: "%eth0/80-80:80-80 %eth1/80-80:81-81"},
		{specs: []string{"080", "65535"}, mode: PortsSpec, rules: "80-80:80-80 65535-65535:65535-65535"},
		// Numbers as pasta reads them (strtoul(3), base 10): white space
		// and a plus sign may come first.
		{specs: []string{"+22,\t80- 81:+90-+91"}, mode: PortsSpec, rules: "22-22:22-22 80-81:90-91"},
	}
	for _, tt := range tests {
		name := strings.Join(tt.specs, " ")
		s, err := ParsePortSpecsWith(tt.specs, ParseOptions{Ephemeral: testEphemeral})
		if err != nil {
			t.Errorf("%q: got error %v, want none", name, err)
			continue
		}
		if s.Mode != tt.mode {
			t.Errorf("%q: got mode %d, want %d", name, s.Mode, tt.mode)
		}
		if got := rulesString(s.Rules); got != tt.rules {
			t.Errorf("%q: got rules %q, want %q", name, got, tt.rules)
		}
		for p, want := range tt.fwd {
			dst, ok := s.Forwarded(p)
			got := int(dst)
			if !ok {
				got = -1
			}
			if got != want {
				t.Errorf("%q: Forwarded(%d): got %d, want %d", name, p, got, want)
			}
		}
		for _, p := range tt.excl {
			if !s.Excluded.Has(p) {
				t.Errorf("%q: Excluded.Has(%d): got false, want true", name, p)
			}
		}
		for p, want := range tt.auto {
			if got := s.AutoCandidate(p); got != want {
				t.Errorf("%q: AutoCandidate(%d): got %v, want %v", name, p, got, want)
			}
		}
		if tt.check != nil {
			if msg := tt.check(s); msg != "" {
				t.Errorf("%q: %s", name, msg)
			}
		}
	}
}

func TestParsePortSpecsErrors(t *testing.T) {
	tests := []struct {
		specs []string
		err   error
		msg   string // the exact Error() text
	}{
		{[]string{"70000"}, ErrPortRange, `"70000": port 70000 is out of range 1-65535`},
		{[]string{"99999999999999999999"}, ErrPortRange, `"99999999999999999999": port 99999999999999999999 is out of range 1-65535`},
		{[]string{"0"}, ErrPortRange, `"0": port 0 is out of range 1-65535`},
		{[]string{"5-3"}, ErrPortRange, `"5-3": range 5-3 ends before it starts`},
		{[]string{"80:"}, ErrPortSyntax, `"80:": missing port number`},
		{[]string{"80-"}, ErrPortSyntax, `"80-": missing port number`},
		{[]string{"-80"}, ErrPortSyntax, `"-80": missing port number`},
		{[]string{"++80"}, ErrPortSyntax, `"++80": "++80" is not a port number`},
		{[]string{"+"}, ErrPortSyntax, `"+": missing port number`},
		{[]string{"80 "}, ErrPortSyntax, `"80 ": "80 " is not a port number`},
		{[]string{"+-80"}, ErrPortSyntax, `"+-80": missing port number`},
		{[]string{"80-90:100-101"}, ErrPortRange, `"80-90:100-101": target 100-101 has 2 ports, source 80-90 has 11`},
		{[]string{"22-80:32"}, ErrPortRange, `"22-80:32": target 32 has 1 ports, source 22-80 has 59`},
		{[]string{"notaport"}, ErrPortSyntax, `"notaport": "notaport" is not a port number`},
		{[]string{"1.2.3/80"}, ErrPortSyntax, `"1.2.3/80": "1.2.3" is not an IP address`},
		{[]string{"%/80"}, ErrPortSyntax, `"%/80": empty interface name after '%'`},
		{[]string{"/80"}, ErrPortSyntax, `"/80": missing address before '/'`},
		{[]string{"%averyveryverylongname/80"}, ErrPortSyntax, `"%averyveryverylongname/80": interface name "averyveryverylongname" is longer than 15 bytes`},
		{[]string{"%a:b/80"}, ErrPortSyntax, `"%a:b/80": "a:b" is not a valid interface name`},
		{[]string{"192.0.2.1/"}, ErrPortSyntax, `"192.0.2.1/": no ports after "192.0.2.1/"`},
		{[]string{"80:1.2.3/90"}, ErrPortSyntax, `"80:1.2.3/90": "1.2.3" is not an IP address`},
		{[]string{"80:1.2.3"}, ErrPortSyntax, `"80:1.2.3": "1.2.3" is not a port number`},
		{[]string{"80:[::1"}, ErrPortSyntax, `"80:[::1": "[::1" is not a port number`},
		{[]string{"80:fe80::1%eth0"}, ErrPortSyntax, `"80:fe80::1%eth0": "fe80::1%eth0" is not a port number`},
		{[]string{"all:nope"}, ErrPortSyntax, `"all:nope": "nope" is not an IP address`},
		{[]string{"~"}, ErrPortSyntax, `"~": missing port number`},
		{[]string{""}, ErrPortSyntax, `"": empty port specification`},
		{[]string{"80,,81"}, ErrPortSyntax, `"80,,81": empty item in port list`},
		{[]string{"80,"}, ErrPortSyntax, `"80,": empty item in port list`},
		{[]string{"none,80"}, ErrPortConflict, `"none,80": "none" cannot be combined with other ports`},
		// "none" after ports would drop them; before them it only ends
		// the default, as in pasta (see TestParsePortSpecs).
		{[]string{"80", "none"}, ErrPortConflict, `"none": conflicts with the ports given before it`},
		{[]string{"~22", "none"}, ErrPortConflict, `"none": conflicts with the ports given before it`},
		{[]string{"auto,auto"}, ErrPortOverlap, `"auto,auto": auto given twice for overlapping addresses`},
		{[]string{"auto", "::1/auto"}, ErrPortOverlap, `"::1/auto": auto given twice for overlapping addresses`},
		{[]string{"80,80:81"}, ErrPortOverlap, `"80,80:81": port 80 is already forwarded by "80,80:81"`},
		{[]string{"70-90", "80:81"}, ErrPortOverlap, `"80:81": port 80 is already forwarded by "70-90"`},
		{[]string{"0.0.0.0/80", "127.0.0.1/80"}, ErrPortOverlap, `"127.0.0.1/80": port 80 is already forwarded by "0.0.0.0/80"`},
		{[]string{"::/80", "127.0.0.1/80"}, ErrPortOverlap, `"127.0.0.1/80": port 80 is already forwarded by "::/80"`},
		{[]string{"%eth0/80", "80"}, ErrPortOverlap, `"80": port 80 is already forwarded by "%eth0/80"`},
		{[]string{"80", "127.0.0.1/~22"}, ErrPortOverlap, `"127.0.0.1/~22": port 80 is already forwarded by "80"`},
		{[]string{"80,~80"}, ErrPortRange, `"80,~80": every port it forwards is excluded`},
	}
	for _, tt := range tests {
		name := strings.Join(tt.specs, " ")
		s, err := ParsePortSpecsWith(tt.specs, ParseOptions{Ephemeral: testEphemeral})
		if err == nil {
			t.Errorf("%q: got rules %q, want error %q", name, rulesString(s.Rules), tt.msg)
			continue
		}
		var pe *PortSpecError
		if !errors.As(err, &pe) {
			t.Errorf("%q: got error type %T, want *PortSpecError", name, err)
			continue
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("%q: got error kind %v, want %v", name, pe.Err, tt.err)
		}
		if got := err.Error(); got != tt.msg {
			t.Errorf("%q: got error %q, want %q", name, got, tt.msg)
		}
	}
}

// Scopes that cannot receive the same connection may share ports.
func TestPortScopesDisjoint(t *testing.T) {
	for _, specs := range [][]string{
		{"127.0.0.1/80", "::1/80"},
		{"0.0.0.0/80", "::1/80"},
		{"192.0.2.1/80", "192.0.2.2/80:81"},
		{"%eth0/80", "%eth1/80"},
		{"127.0.0.1/auto", "::1/auto"},
	} {
		if _, err := ParsePortSpecs(specs); err != nil {
			t.Errorf("%q: got error %v, want none", specs, err)
		}
	}
}

func TestDefaultPortSpec(t *testing.T) {
	s := DefaultPortSpec()
	if s.Mode != PortsAuto {
		t.Errorf("got mode %d, want PortsAuto", s.Mode)
	}
	for _, p := range []uint16{1, 80, 65535} {
		if !s.AutoCandidate(p) {
			t.Errorf("AutoCandidate(%d): got false, want true", p)
		}
	}
}

func TestMergeUDPFromTCP(t *testing.T) {
	parse := func(specs ...string) PortSpec {
		t.Helper()
		s, err := ParsePortSpecs(specs)
		if err != nil {
			t.Fatalf("%q: %v", specs, err)
		}
		return s
	}
	tests := []struct {
		name     string
		tcp, udp PortSpec
		mode     PortMode
		rules    string
	}{
		{"udp given", parse("80:8080"), parse("53"), PortsSpec, "53-53:53-53"},
		{"udp none", parse("80:8080"), parse("none"), PortsNone, ""},
		{"udp unset, tcp mapped", parse("127.0.0.1/80:8080", "2000-2010,~2005"), PortSpec{}, PortsAuto,
			"1-65535(auto) 127.0.0.1/80-80:80-80(weak) 2000-2004:2000-2004(weak) 2006-2010:2006-2010(weak)"},
		{"udp unset, tcp auto", parse("auto"), PortSpec{}, PortsAuto, "1-65535(auto)"},
		{"udp unset, tcp none", parse("none"), PortSpec{}, PortsAuto, "1-65535(auto)"},
		{"both unset", PortSpec{}, PortSpec{}, PortsAuto, "1-65535(auto)"},
	}
	for _, tt := range tests {
		got := MergeUDPFromTCP(tt.tcp, tt.udp)
		if got.Mode != tt.mode {
			t.Errorf("%s: got mode %d, want %d", tt.name, got.Mode, tt.mode)
		}
		if r := rulesString(got.Rules); r != tt.rules {
			t.Errorf("%s: got rules %q, want %q", tt.name, r, tt.rules)
		}
	}
}

func TestParseEphemeralRange(t *testing.T) {
	tests := []struct {
		in   string
		want PortRange
		err  bool
	}{
		{"32768\t60999\n", PortRange{32768, 60999}, false},
		{"1024 65535", PortRange{1024, 65535}, false},
		{"60999 32768", PortRange{}, true},
		{"32768", PortRange{}, true},
		{"a b", PortRange{}, true},
		{"", PortRange{}, true},
	}
	for _, tt := range tests {
		got, err := ParseEphemeralRange(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("%q: got %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
	if r, err := ReadEphemeralRange(); err != nil {
		t.Logf("ReadEphemeralRange: %v (no /proc?)", err)
	} else if r.First > r.Last || r.First == 0 {
		t.Errorf("ReadEphemeralRange: got %v, want a valid range", r)
	}
}

func TestPortSetSplit(t *testing.T) {
	var s PortSet
	s.AddRange(10, 20)
	s.Add(63)
	s.Add(64)
	s.Add(65535)
	var got []string
	s.split(1, 65535, func(a, b int) { got = append(got, PortRule{First: uint16(a), Last: uint16(b), Auto: true}.String()) })
	want := "1-9(auto) 21-62(auto) 65-65534(auto)"
	if g := strings.Join(got, " "); g != want {
		t.Errorf("got %q, want %q", g, want)
	}
}

// Exclusions that cut rules into tens of thousands of pieces must not make
// parsing quadratic: command lines are user input.
func TestParsePortSpecsManyPieces(t *testing.T) {
	var b strings.Builder
	for p := 2; p < 65535; p += 2 {
		b.WriteString("~")
		b.WriteString(strconv.Itoa(p))
		b.WriteString(",")
	}
	b.WriteString("auto")
	specs := []string{"127.0.0.1/" + b.String(), "::1/" + b.String(), "%lo/1-65535"}
	start := time.Now()
	s, err := ParsePortSpecs(specs)
	if err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	if got, want := len(s.Rules), 3*32768; got != want {
		t.Errorf("got %d rules, want %d", got, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("parsing took %v, want well under 5s", d)
	}
}

func BenchmarkParsePortSpecsPodman(b *testing.B) {
	specs := []string{"127.0.0.1/8080-8080:80-80", "::1/8443-8443:443-443", "2000-5000,~3000-3010"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParsePortSpecs(specs); err != nil {
			b.Fatal(err)
		}
	}
}
