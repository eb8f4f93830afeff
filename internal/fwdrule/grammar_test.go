package fwdrule

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// describe renders what a value parsed as, compactly.
func describe(s *Spec) string {
	if s.None {
		return "none"
	}
	var out []string
	if s.Scoped {
		at := "*"
		if s.Addr.IsValid() {
			at = s.Addr.String()
		}
		if s.Ifname != "" {
			at += "%" + s.Ifname
		}
		out = append(out, "at "+at)
	}
	for _, inc := range s.Includes {
		to := ""
		if inc.Target.IsValid() {
			to = inc.Target.String() + "/"
		}
		out = append(out, fmt.Sprintf("%d-%d>%s%d", inc.First, inc.Last, to, inc.To))
	}
	for _, r := range s.Excludes {
		out = append(out, fmt.Sprintf("~%d-%d", r.First, r.Last))
	}
	if s.Auto {
		out = append(out, "auto")
	}
	if s.All {
		all := "all"
		if s.AllTo.IsValid() {
			all += ":" + s.AllTo.String()
		}
		out = append(out, all)
	}
	return strings.Join(out, " ")
}

// TestParse: every form of the grammar, read.
func TestParse(t *testing.T) {
	tests := []struct {
		value string
		want  string // describe of the result
	}{
		{"none", "none"},
		{"22", "22-22>22"},
		{"22:23", "22-22>23"},
		{"22,25", "22-22>22 25-25>25"},
		{"22-80:32-90", "22-80>32"},
		{"080", "80-80>80"},
		{"65535:1", "65535-65535>1"},
		// Numbers as strtoul(3) reads them: white space and a plus sign
		// may come first.
		{"+22,\t80- 81:+90-+91", "22-22>22 80-81>90"},
		{" 80", "80-80>80"},
		// Port 0 parses; a rule refuses it (Table.Check).
		{"0", "0-0>0"},
		{"~0", "~0-0"},
		{"192.0.2.1/22", "at 192.0.2.1 22-22>22"},
		{"192.0.2.1%eth0/22", "at 192.0.2.1%eth0 22-22>22"},
		{"fe80::1%eth0/22", "at fe80::1%eth0 22-22>22"},
		{"%eth0/22", "at *%eth0 22-22>22"},
		{"::1/8080", "at ::1 8080-8080>8080"},
		{"[::1]/8080", "at ::1 8080-8080>8080"},
		{"[192.0.2.1]/80", "at 192.0.2.1 80-80>80"},
		{"::ffff:192.0.2.1/80", "at ::ffff:192.0.2.1 80-80>80"},
		// Any address: "*", or nothing before the '/'.
		{"*/22", "at * 22-22>22"},
		{"*%eth0/22", "at *%eth0 22-22>22"},
		{"/22", "at * 22-22>22"},
		// Targets: ports, an address (the ports stay), or both.
		{"80:192.0.2.5", "80-80>192.0.2.5/80"},
		{"22-23:[::1]", "22-23>::1/22"},
		{"80:192.0.2.5/8080", "80-80>192.0.2.5/8080"},
		{"0.0.0.0/5000:192.0.2.5/6000", "at 0.0.0.0 5000-5000>192.0.2.5/6000"},
		{"::/22:::1", "at :: 22-22>::1/22"},
		{"1:2::3", "1-1>2::3/1"},
		// A scope and an item with a target read the same: the scope
		// wins; brackets spell the other meaning.
		{"1:2::3/4", "at 1:2::3 4-4>4"},
		{"1:[2::3]/4", "1-1>2::3/4"},
		{"2000-5000,~3000-3010", "2000-5000>2000 ~3000-3010"},
		{"~3000-3010,2000-5000", "2000-5000>2000 ~3000-3010"},
		{"~22", "~22-22"},
		{"auto", "auto"},
		{"auto,auto", "auto"},
		{"8000-8010,auto", "8000-8010>8000 auto"},
		{"::1/auto,~22", "at ::1 ~22-22 auto"},
		{"all", "all"},
		{"all:192.0.2.9", "all:192.0.2.9"},
		{"127.0.0.1/all,~22", "at 127.0.0.1 ~22-22 all"},
	}
	for _, tc := range tests {
		s, err := Parse('t', tc.value)
		if err != nil {
			t.Errorf("%q: got error %v, want %q", tc.value, err, tc.want)
			continue
		}
		if got := describe(&s); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.value, got, tc.want)
		}
		if s.Value != tc.value || s.Opt != 't' {
			t.Errorf("%q: got value %q of -%c, want %q of -t", tc.value, s.Value, s.Opt, tc.value)
		}
	}
}

// TestParseErrors: what does not parse, in gopasta's words and in pasta's.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		value string
		kind  error
		msg   string // Error()
		pasta string // PastaMessage()
	}{
		{"70000", ErrRange, `"70000": port 70000 is out of range 1-65535`, "Invalid port specifier '70000'"},
		{"99999999999999999999", ErrRange, `"99999999999999999999": port 99999999999999999999 is out of range 1-65535`, ""},
		{"5-3", ErrRange, `"5-3": range 5-3 ends before it starts`, "Invalid port specifier '5-3'"},
		{"80-90:100-101", ErrRange, `"80-90:100-101": target 100-101 has 2 ports, source 80-90 has 11`, ""},
		{"22-80:32", ErrRange, `"22-80:32": target 32 has 1 ports, source 22-80 has 59`, ""},
		{"80:", ErrSyntax, `"80:": missing port number`, ""},
		{"80-", ErrSyntax, `"80-": missing port number`, ""},
		{"-80", ErrSyntax, `"-80": missing port number`, ""},
		{"-1", ErrSyntax, `"-1": missing port number`, "Invalid port specifier '-1'"},
		{"++80", ErrSyntax, `"++80": "++80" is not a port number`, ""},
		{"+", ErrSyntax, `"+": missing port number`, ""},
		{"80 ", ErrSyntax, `"80 ": "80 " is not a port number`, ""},
		{"80x", ErrSyntax, `"80x": "80x" is not a port number`, "Invalid port specifier '80x'"},
		{"+-80", ErrSyntax, `"+-80": missing port number`, ""},
		{"notaport", ErrSyntax, `"notaport": "notaport" is not a port number`, ""},
		{"1.2.3/80", ErrSyntax, `"1.2.3/80": "1.2.3" is not an IP address`, "Invalid port specifier '1.2.3/80'"},
		{"[*]/80", ErrSyntax, `"[*]/80": "*" is not an IP address`, ""},
		{"%/80", ErrSyntax, `"%/80": empty interface name after '%'`, ""},
		{"%averyveryverylongname/80", ErrSyntax, `"%averyveryverylongname/80": interface name "averyveryverylongname" is longer than 15 bytes`,
			"Invalid port specifier '%averyveryverylongname/80'"},
		{"%a:b/80", ErrSyntax, `"%a:b/80": "a:b" is not a valid interface name`, ""},
		{"%./80", ErrSyntax, `"%./80": "." is not a valid interface name`, "Invalid interface name: ."},
		{"%../80", ErrSyntax, `"%../80": ".." is not a valid interface name`, "Invalid interface name: .."},
		{"192.0.2.1/", ErrSyntax, `"192.0.2.1/": no ports after "192.0.2.1/"`, "Invalid port specifier ''"},
		{"80:1.2.3/90", ErrSyntax, `"80:1.2.3/90": "1.2.3" is not an IP address`, ""},
		{"80:1.2.3", ErrSyntax, `"80:1.2.3": "1.2.3" is not a port number`, ""},
		{"80:[::1", ErrSyntax, `"80:[::1": "[::1" is not a port number`, ""},
		{"80:fe80::1%eth0", ErrSyntax, `"80:fe80::1%eth0": "fe80::1%eth0" is not a port number`, ""},
		{"all:nope", ErrSyntax, `"all:nope": "nope" is not an IP address`, ""},
		{"~", ErrSyntax, `"~": missing port number`, ""},
		{"", ErrSyntax, `"": empty port specification`, "Invalid port specifier ''"},
		{"80,,81", ErrSyntax, `"80,,81": empty item in port list`, ""},
		{"80,", ErrSyntax, `"80,": empty item in port list`, ""},
		{"none,80", ErrSyntax, `"none,80": "none" cannot be combined with other ports`, ""},
	}
	for _, tc := range tests {
		s, err := Parse('t', tc.value)
		if err == nil {
			t.Errorf("%q: got %q, want error %q", tc.value, describe(&s), tc.msg)
			continue
		}
		var se *SpecError
		if !errors.As(err, &se) {
			t.Errorf("%q: got error type %T, want *SpecError", tc.value, err)
			continue
		}
		if !errors.Is(err, tc.kind) {
			t.Errorf("%q: got error kind %v, want %v", tc.value, se.Err, tc.kind)
		}
		if got := err.Error(); got != tc.msg {
			t.Errorf("%q: got error %q, want %q", tc.value, got, tc.msg)
		}
		if got := se.PastaMessage(); tc.pasta != "" && got != tc.pasta {
			t.Errorf("%q: got pasta's message %q, want %q", tc.value, got, tc.pasta)
		}
		if se.Opt != 't' || se.Value != tc.value {
			t.Errorf("%q: got the error of -%c %q, want of -t %q", tc.value, se.Opt, se.Value, tc.value)
		}
	}
}

func TestParseEphemeralRange(t *testing.T) {
	tests := []struct {
		in   string
		want Range
		err  bool
	}{
		{"32768\t60999\n", Range{32768, 60999}, false},
		{"1024 65535", Range{1024, 65535}, false},
		{"60999 32768", Range{}, true},
		{"0 100", Range{}, true},
		{"32768", Range{}, true},
		{"a b", Range{}, true},
		{"", Range{}, true},
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

func TestPortSetRuns(t *testing.T) {
	var s PortSet
	s.AddRange(10, 20)
	s.Add(63)
	s.Add(64)
	s.Add(65535)
	var got []string
	s.Runs(1, 65535, func(a, b uint16) { got = append(got, fmt.Sprintf("%d-%d", a, b)) })
	if g, want := strings.Join(got, " "), "1-9 21-62 65-65534"; g != want {
		t.Errorf("got %q, want %q", g, want)
	}
	got = nil
	s.Runs(12, 15, func(a, b uint16) { got = append(got, fmt.Sprintf("%d-%d", a, b)) })
	if len(got) != 0 {
		t.Errorf("inside the set: got runs %q, want none", got)
	}
}

// FuzzParse feeds the values of one option (separated by '\n') to the one
// grammar: the parser never panics and its errors are typed; what parses,
// pesto's dialect adds to a table that validates and deletes again to
// nothing; the command line's dialect builds tables that validate, forward
// no excluded port, and copy TCP ports to UDP unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"22-80:32-90", "192.0.2.1%eth0/22", "%eth0/22", "0.0.0.0/5000:192.0.2.5/6000",
		"2000-5000,~3000-3010", "::1/auto", "8000-8010,auto", "none", "8080-8080:80-80",
		"auto", "all", "~20000-20010", "192.0.2.1/20-30,~25", "1:[2::3]/4", "all:192.0.2.9",
		"127.0.0.1/80\n::1/80", "80\n~22", "none\n80", "70000", "5-3", "80:", "%/80", "~",
		"80,80:81", "auto\nauto", "fe80::1%eth0/22", "", "0.0.0.0/22:127.0.0.1", "22-23:[::1]",
		"8080", "127.0.0.1/8443:443,~8444", "0.0.0.0/53:10.0.0.1/53", "100-200,auto",
		"~25", "all:10.0.0.1", "*%lo/1-5:[::1]/6-10", "80,,", "*/22", "/22",
	} {
		f.Add(byte('t'), s, uint16(32768), uint16(60999))
		f.Add(byte('U'), s, uint16(32768), uint16(60999))
	}
	f.Fuzz(func(t *testing.T, opt byte, in string, ephFirst, ephLast uint16) {
		switch opt {
		case 't', 'u', 'T', 'U':
		default:
			return
		}
		eph := Range{ephFirst, ephLast}
		var specs []Spec
		var excl PortSet
		for _, v := range strings.Split(in, "\n") {
			s, err := Parse(opt, v)
			if err != nil {
				var se *SpecError
				if !errors.As(err, &se) || se.Err == nil || se.Reason == "" || strings.Contains(se.PastaMessage(), "\n") {
					t.Fatalf("%q: untyped or empty error %#v", v, err)
				}
				return
			}
			for _, r := range s.Excludes {
				excl.AddRange(r.First, r.Last)
			}
			specs = append(specs, s)
			tb := Table{Pif: PifHost, Caps: AllCaps}
			if err := Apply(&tb, []Spec{s}, false, Pasta, eph, nil); err != nil {
				continue
			}
			if err := tb.Validate(); err != nil {
				t.Fatalf("%q: added rules that do not validate: %v", v, err)
			}
			if err := Apply(&tb, []Spec{s}, true, Pasta, eph, nil); err != nil {
				t.Fatalf("%q: deleting what it added: %v", v, err)
			}
			if len(tb.Rules) != 0 {
				t.Fatalf("%q: %d rules left after deleting", v, len(tb.Rules))
			}
		}
		// The option fuzzed, the others "none" but for UDP beside TCP,
		// left out so that it copies TCP's ports.
		var o Options
		none := func(opt byte) []Spec { s, _ := Parse(opt, "none"); return []Spec{s} }
		o.TCP, o.UDP, o.TCPNS, o.UDPNS = none('t'), none('u'), none('T'), none('U')
		switch opt {
		case 't':
			o.TCP, o.UDP = specs, nil
		case 'u':
			o.UDP = specs
		case 'T':
			o.TCPNS, o.UDPNS = specs, nil
		case 'U':
			o.UDPNS = specs
		}
		host, splice, err := o.Tables(AllCaps, eph)
		if err != nil {
			var se *SpecError
			var ae *ApplyError
			if !errors.As(err, &se) && !(errors.As(err, &ae) && ae.Spec != nil && ae.Reason() != "") {
				t.Fatalf("%q: untyped error %#v", in, err)
			}
			return
		}
		tb := &host
		if specs[0].NS() {
			tb = &splice
		}
		if err := tb.Validate(); err != nil {
			t.Fatalf("%q: tables that do not validate: %v", in, err)
		}
		for _, r := range tb.Rules {
			if r.Proto == ProtoUDP && (opt == 't' || opt == 'T') {
				if !r.Scan() && r.To != r.First {
					t.Fatalf("%q: UDP copy %s translates ports", in, r)
				}
				continue
			}
			for p := int(r.First); p <= int(r.Last); p++ {
				if excl.Has(uint16(p)) {
					t.Fatalf("%q: rule %s forwards excluded port %d", in, r, p)
				}
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
