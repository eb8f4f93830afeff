package fwdrule

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

const allCaps = CapIPv4 | CapIPv6 | CapTCP | CapUDP | CapScan | CapIfname

// captureEph is the ephemeral range of the machine the reference
// transcripts were captured on.
var captureEph = Ephemeral{32768, 60999}

func lines(t *Table) []string {
	var out []string
	for _, r := range t.Rules {
		out = append(out, r.String())
	}
	return out
}

func mustApply(t *testing.T, tb *Table, opt byte, spec string, del bool) {
	t.Helper()
	if err := ApplySpec(tb, opt, spec, del, captureEph, nil); err != nil {
		t.Fatalf("-%c %s: got error %v, want nil", opt, spec, err)
	}
}

// TestReferenceTables: pasta started with "-t 8080" (and its defaults
// -u auto, -T auto, -U auto) listed these rules; applying the same values
// to empty tables must give them, text and all (trailing spaces included).
func TestReferenceTables(t *testing.T) {
	host := Table{Pif: PifHost, Caps: allCaps}
	splice := Table{Pif: PifSplice, Caps: allCaps}
	mustApply(t, &host, 't', "8080", false)
	mustApply(t, &host, 'u', "auto", false)
	mustApply(t, &splice, 'T', "auto", false)
	mustApply(t, &splice, 'U', "auto", false)
	wantHost := []string{
		"TCP [*]:8080  =>  8080 ",
		"UDP [*]:1-32767  =>  1-32767  (best effort) (auto-scan)",
		"UDP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
	}
	wantSplice := []string{
		"TCP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)",
		"TCP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
		"UDP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)",
		"UDP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
	}
	if got := lines(&host); !slices.Equal(got, wantHost) {
		t.Errorf("HOST: got %q, want %q", got, wantHost)
	}
	if got := lines(&splice); !slices.Equal(got, wantSplice) {
		t.Errorf("SPLICE: got %q, want %q", got, wantSplice)
	}
}

func TestApplySpec(t *testing.T) {
	tests := []struct {
		opt  byte
		spec string
		caps Caps
		want []string
	}{
		{'t', "127.0.0.1/8443:443,~8444", allCaps, []string{"TCP [127.0.0.1]:8443  =>  443 "}},
		{'u', "0.0.0.0/53:10.0.0.1/53", allCaps, []string{"UDP [0.0.0.0]:53  =>  10.0.0.1:53 "}},
		{'u', "100-200,auto", allCaps, []string{"UDP [*]:100-200  =>  100-200  (auto-scan)"}},
		{'t', "5-25,~10-20", allCaps, []string{"TCP [*]:5-9  =>  5-9 ", "TCP [*]:21-25  =>  21-25 "}},
		{'t', "22-80:32-90", allCaps, []string{"TCP [*]:22-80  =>  32-90 "}},
		{'t', "22,25", allCaps, []string{"TCP [*]:22  =>  22 ", "TCP [*]:25  =>  25 "}},
		{'t', "~25", allCaps, []string{"TCP [*]:1-24  =>  1-24  (best effort)", "TCP [*]:26-32767  =>  26-32767  (best effort)",
			"TCP [*]:61000-65535  =>  61000-65535  (best effort)"}},
		{'t', "all", allCaps, []string{"TCP [*]:1-32767  =>  1-32767  (best effort)", "TCP [*]:61000-65535  =>  61000-65535  (best effort)"}},
		{'t', "127.0.0.1/all", allCaps, []string{"TCP [127.0.0.1]:1-32767  =>  1-32767  (best effort)",
			"TCP [127.0.0.1]:61000-65535  =>  61000-65535  (best effort)"}},
		{'t', "all,80", allCaps, []string{"TCP [*]:80  =>  80 "}}, // includes make "all" moot, as in pasta
		{'t', "[::1]/22", allCaps, []string{"TCP [::1]:22  =>  22 "}},
		{'t', "::1/22", allCaps, []string{"TCP [::1]:22  =>  22 "}},
		{'t', "fe80::1%eth0/22", allCaps, []string{"TCP [fe80::1]%eth0:22  =>  22 "}},
		{'t', "%eth0/22", allCaps, []string{"TCP [*]%eth0:22  =>  22 "}},
		{'t', "*%eth0/22", allCaps, []string{"TCP [*]%eth0:22  =>  22 "}},
		{'t', "*/22", allCaps, []string{"TCP [*]:22  =>  22 "}},
		{'t', "[127.0.0.1]/22:[10.0.0.2]/2222", allCaps, []string{"TCP [127.0.0.1]:22  =>  10.0.0.2:2222 "}},
		{'t', "::/80:2001:db8::5/8080", allCaps, []string{"TCP [::]:80  =>  2001:db8::5:8080 "}},
		{'t', "80", CapIPv4 | CapTCP, []string{"TCP [0.0.0.0]:80  =>  80 "}},
		{'t', "80", CapIPv6 | CapTCP, []string{"TCP [::]:80  =>  80 "}},
		{'T', "8080", allCaps, []string{"TCP [*]%lo:8080  =>  8080 "}},
		{'T', "8080", allCaps &^ CapIfname, []string{"TCP [127.0.0.1]:8080  =>  8080 ", "TCP [::1]:8080  =>  8080 "}},
		{'U', "53", allCaps &^ CapIfname &^ CapIPv6, []string{"UDP [127.0.0.1]:53  =>  53 "}},
		{'t', "none", allCaps, nil},
		{'t', " 80", allCaps, []string{"TCP [*]:80  =>  80 "}}, // strtoul skips blanks
		{'t', "65535:1", allCaps, []string{"TCP [*]:65535  =>  1 "}},
	}
	for _, tc := range tests {
		tb := Table{Pif: PifHost, Caps: tc.caps}
		var warned []string
		err := ApplySpec(&tb, tc.opt, tc.spec, false, captureEph, func(s string) { warned = append(warned, s) })
		if err != nil {
			t.Errorf("-%c %q: got error %v, want nil", tc.opt, tc.spec, err)
			continue
		}
		if got := lines(&tb); !slices.Equal(got, tc.want) {
			t.Errorf("-%c %q: got %q, want %q", tc.opt, tc.spec, got, tc.want)
		}
		if tc.caps&CapIfname == 0 && (tc.opt == 'T' || tc.opt == 'U') && len(warned) != 1 {
			t.Errorf("-%c %q without CapIfname: got warnings %q, want one", tc.opt, tc.spec, warned)
		}
	}
}

func TestApplySpecErrors(t *testing.T) {
	tests := []struct {
		opt     byte
		spec    string
		caps    Caps
		before  string // applied first, with -t
		wantMsg string
		kind    error // nil: a *SpecError
	}{
		{'t', "80x", allCaps, "", "Invalid port specifier '80x'", nil},
		{'t', "", allCaps, "", "Invalid port specifier ''", nil},
		{'t', "70000", allCaps, "", "Invalid port specifier '70000'", nil},
		{'t', "5-3", allCaps, "", "Invalid port specifier '5-3'", nil},
		{'t', "80:90-91", allCaps, "", "Invalid port specifier '80:90-91'", nil},
		{'t', "-1", allCaps, "", "Invalid port specifier '-1'", nil},
		{'t', "1.2.3.4/", allCaps, "", "Invalid port specifier ''", nil},
		{'t', "auto", allCaps &^ CapScan, "", "'auto' port forwarding is only allowed for pasta", nil},
		{'T', "127.0.0.1/80", allCaps, "", "Listening address not allowed for -T 127.0.0.1/80", nil},
		{'t', "%./80", allCaps, "", "Invalid interface name: .", nil},
		{'t', "%eth0/80", allCaps &^ CapIfname, "", "Device binding for '-t %eth0/80' unsupported (requires kernel 5.7+)", nil},
		{'t', "%0123456789abcdef/80", allCaps, "", "Invalid port specifier '%0123456789abcdef/80'", nil},
		{'t', "none", allCaps, "22", "-t none conflicts with previous options", nil},
		{'t', "80", allCaps, "80", "Forwarding configuration conflict: TCP [*]:80  =>  80  versus TCP [*]:80  =>  80 ", ErrConflict},
		{'t', "0.0.0.0/80", allCaps, "80", "Forwarding configuration conflict: TCP [0.0.0.0]:80  =>  80  versus TCP [*]:80  =>  80 ", ErrConflict},
		{'t', "0", allCaps, "", "Forwarding rule attempts to map from port 0", ErrInvalid},
		{'t', "80:0", allCaps, "", "Forwarding rule attempts to map to port 0", ErrInvalid},
		{'t', "80:10.0.0.1", allCaps, "", "Dual stack forward to IPv4 address 10.0.0.1 unsupported\nDid you mean 0.0.0.0/... instead?", ErrInvalid},
		{'t', "0.0.0.0/80:224.0.0.1", allCaps, "", "Multicast target address 224.0.0.1 for forwarding rule", ErrInvalid},
		{'t', "0.0.0.0/80:[::1]", allCaps, "", "Forward from IPv4 (0.0.0.0) to IPv6 (::1) unsupported", ErrInvalid},
		{'t', "::1/80", CapIPv4 | CapTCP, "", "IPv6 forward, but IPv6 not enabled", ErrInvalid},
		{'u', "80", allCaps &^ CapUDP, "", "Can't add UDP forwarding rule, UDP not enabled", ErrInvalid},
	}
	for _, tc := range tests {
		tb := Table{Pif: PifHost, Caps: tc.caps}
		if tc.before != "" {
			mustApply(t, &tb, 't', tc.before, false)
		}
		err := ApplySpec(&tb, tc.opt, tc.spec, false, captureEph, nil)
		if err == nil {
			t.Errorf("-%c %q: got nil error, want %q", tc.opt, tc.spec, tc.wantMsg)
			continue
		}
		msg := err.Error()
		var ae *ApplyError
		if errors.As(err, &ae) {
			msg = ae.Err.Error()
			if !strings.Contains(err.Error(), "Unable to add rule ") {
				t.Errorf("-%c %q: got %q, want it to say which rule could not be added", tc.opt, tc.spec, err)
			}
		}
		if !strings.HasPrefix(msg, tc.wantMsg) {
			t.Errorf("-%c %q: got %q, want %q", tc.opt, tc.spec, msg, tc.wantMsg)
		}
		if tc.kind == nil && !IsSpecError(err) {
			t.Errorf("-%c %q: got %T, want *SpecError", tc.opt, tc.spec, err)
		}
		if tc.kind != nil && !errors.Is(err, tc.kind) {
			t.Errorf("-%c %q: got %v, want errors.Is %v", tc.opt, tc.spec, err, tc.kind)
		}
	}
}

func TestDelete(t *testing.T) {
	tb := Table{Pif: PifHost, Caps: allCaps}
	mustApply(t, &tb, 't', "8080,9090", false)
	mustApply(t, &tb, 't', "8080", true)
	if got, want := lines(&tb), []string{"TCP [*]:9090  =>  9090 "}; !slices.Equal(got, want) {
		t.Fatalf("after -D -t 8080: got %q, want %q", got, want)
	}
	for _, tc := range []struct{ spec, want string }{
		{"7070", "Couldn't find forwarding rule to delete: TCP [*]:7070  =>  7070 "},
		{"9090-9091", "Specifier TCP [*]:9090-9091  =>  9090-9091  conflicts with rule TCP [*]:9090  =>  9090 , but doesn't match it, can't delete"},
		{"9090:80", "Specifier TCP [*]:9090  =>  80  conflicts with rule"},
	} {
		err := ApplySpec(&tb, 't', tc.spec, true, captureEph, nil)
		var ae *ApplyError
		if !errors.As(err, &ae) || ae.Op != "delete" || !errors.Is(err, ErrNotFound) {
			t.Errorf("-D -t %s: got %v, want an ApplyError for a delete", tc.spec, err)
			continue
		}
		if !strings.HasPrefix(ae.Err.Error(), tc.want) {
			t.Errorf("-D -t %s: got %q, want %q", tc.spec, ae.Err, tc.want)
		}
	}
}

// TestCheck: the server's validation, one rule at a time, on the wire's
// terms (what pesto cannot even produce).
func TestCheck(t *testing.T) {
	ok := Rule{First: 80, Last: 80, To: 80, Proto: ProtoTCP, Flags: FlagDual}
	tests := []struct {
		name string
		mod  func(r *Rule)
		caps Caps
		want string // "" = valid
	}{
		{"valid", func(*Rule) {}, allCaps, ""},
		{"first > last", func(r *Rule) { r.First = 81 }, allCaps, "Rule has invalid port range 81-80"},
		{"to wraps", func(r *Rule) { r.Last, r.To = 81, 65535 }, allCaps, "Forwarding rule attempts to map to port 0"},
		{"to at the top", func(r *Rule) { r.Last, r.To = 81, 65534 }, allCaps, ""},
		{"unknown flag", func(r *Rule) { r.Flags |= 0x80 }, allCaps, "Rule has invalid flags 0x80"},
		{"dual with address", func(r *Rule) { r.Addr = Inany(netip.MustParseAddr("::1")) }, allCaps, "Dual stack rule has non-wildcard address ::1"},
		{"dual without IPv6", func(*Rule) {}, allCaps &^ CapIPv6, "Dual stack forward, but IPv6 not enabled"},
		{"dual without IPv4", func(*Rule) {}, allCaps &^ CapIPv4, "Dual stack forward, but IPv4 not enabled"},
		{"IPv4 without IPv4", func(r *Rule) { r.Flags, r.Addr = 0, Any4 }, allCaps &^ CapIPv4, "IPv4 forward, but IPv4 not enabled"},
		{"no TCP", func(*Rule) {}, allCaps &^ CapTCP, "Can't add TCP forwarding rule, TCP not enabled"},
		{"SCTP", func(r *Rule) { r.Proto = 132 }, allCaps, "Unsupported protocol 0x84 (<unknown protocol>) for forwarding rule"},
		{"broadcast target", func(r *Rule) {
			r.Flags, r.Addr, r.TAddr = 0, Any4, Inany(netip.MustParseAddr("255.255.255.255"))
		}, allCaps, "Multicast target address 255.255.255.255 for forwarding rule"},
		{"IPv6 multicast target", func(r *Rule) { r.Flags, r.TAddr = 0, Inany(netip.MustParseAddr("ff02::1")) }, allCaps, "Multicast target address ff02::1"},
		{"scan without the capability is not checked", func(r *Rule) { r.Flags |= FlagScan }, allCaps &^ CapScan, ""},
		{"ifname without the capability is not checked", func(r *Rule) { r.SetIfname("lo") }, allCaps &^ CapIfname, ""},
	}
	for _, tc := range tests {
		r := ok
		tc.mod(&r)
		tb := Table{Caps: tc.caps}
		err := tb.Add(r)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: got %v, want valid", tc.name, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestConflicts(t *testing.T) {
	mk := func(addr string, dual bool, first, last uint16, proto uint8) Rule {
		r := Rule{First: first, Last: last, To: first, Proto: proto}
		if dual {
			r.Flags = FlagDual
		} else {
			r.Addr = Inany(netip.MustParseAddr(addr))
		}
		return r
	}
	tests := []struct {
		a, b Rule
		want bool
	}{
		{mk("", true, 80, 80, ProtoTCP), mk("127.0.0.1", false, 80, 80, ProtoTCP), true},
		{mk("", true, 80, 80, ProtoTCP), mk("", true, 80, 80, ProtoUDP), false},
		{mk("", true, 80, 90, ProtoTCP), mk("", true, 91, 95, ProtoTCP), false},
		{mk("", true, 80, 90, ProtoTCP), mk("", true, 90, 95, ProtoTCP), true},
		{mk("0.0.0.0", false, 80, 80, ProtoTCP), mk("127.0.0.1", false, 80, 80, ProtoTCP), true},
		{mk("0.0.0.0", false, 80, 80, ProtoTCP), mk("::1", false, 80, 80, ProtoTCP), false},
		{mk("::", false, 80, 80, ProtoTCP), mk("::1", false, 80, 80, ProtoTCP), true},
		{mk("::", false, 80, 80, ProtoTCP), mk("0.0.0.0", false, 80, 80, ProtoTCP), false},
		{mk("127.0.0.1", false, 80, 80, ProtoTCP), mk("::1", false, 80, 80, ProtoTCP), false},
		{mk("127.0.0.1", false, 80, 80, ProtoTCP), mk("127.0.0.1", false, 80, 80, ProtoTCP), true},
	}
	for _, tc := range tests {
		if got := Conflicts(&tc.a, &tc.b); got != tc.want {
			t.Errorf("%s vs %s: got %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := Conflicts(&tc.b, &tc.a); got != tc.want {
			t.Errorf("%s vs %s (swapped): got %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestLimits(t *testing.T) {
	tb := Table{Caps: allCaps}
	for i := range MaxRules {
		if err := tb.Add(Rule{First: uint16(i + 1), Last: uint16(i + 1), To: 1, Proto: ProtoTCP, Flags: FlagDual}); err != nil {
			t.Fatalf("rule %d: %v", i, err)
		}
	}
	err := tb.Add(Rule{First: 1000, Last: 1000, To: 1, Proto: ProtoTCP, Flags: FlagDual})
	if !errors.Is(err, ErrFull) {
		t.Errorf("rule 256: got %v, want ErrFull", err)
	}
	tb = Table{Caps: allCaps}
	for i := range 5 {
		a := Inany(netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}))
		if err := tb.Add(Rule{Addr: a, First: 1, Last: 65535, To: 1, Proto: ProtoTCP}); err != nil {
			t.Fatalf("full range %d: %v", i, err)
		}
	}
	err = tb.Add(Rule{Addr: Inany(netip.MustParseAddr("127.0.0.9")), First: 1, Last: 6, To: 1, Proto: ProtoTCP})
	if !errors.Is(err, ErrFull) {
		t.Errorf("ports past %d: got %v, want ErrFull", MaxPorts, err)
	}
}

func TestEncodeDecode(t *testing.T) {
	r := Rule{Addr: Inany(netip.MustParseAddr("192.0.2.1")), TAddr: Inany(netip.MustParseAddr("10.0.0.1")),
		First: 8080, Last: 8081, To: 80, Proto: ProtoUDP, Flags: FlagWeak | FlagScan}
	r.SetIfname("eth0")
	b := r.Append(nil)
	want := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1,
		'e', 't', 'h', '0', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0x1f, 0x90, 0x1f, 0x91, 0x00, 0x50, 17, 6}
	if !bytes.Equal(b, want) {
		t.Errorf("got % x, want % x", b, want)
	}
	if got := Decode(b); got != r {
		t.Errorf("round trip: got %#v, want %#v", got, r)
	}
}

func TestFormatAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"::", "::"}, {"0.0.0.0", "0.0.0.0"}, {"::1", "::1"}, {"::2", "::2"},
		{"::102:304", "::1.2.3.4"}, // inet_ntop's IPv4-compatible form
		{"2001:db8::1", "2001:db8::1"}, {"fe80::1:0:0:1", "fe80::1:0:0:1"},
		{"1:0:0:1:0:0:0:1", "1:0:0:1::1"}, {"1:0:2:0:3:0:4:0", "1:0:2:0:3:0:4:0"},
	} {
		if got := FormatAddr(Inany(netip.MustParseAddr(tc.in))); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzApplySpec(f *testing.F) {
	for _, s := range []string{"8080", "127.0.0.1/8443:443,~8444", "0.0.0.0/53:10.0.0.1/53", "100-200,auto",
		"~25", "all:10.0.0.1", "fe80::1%eth0/22", "*%lo/1-5:[::1]/6-10", "none", "80,,"} {
		f.Add(byte('t'), s)
		f.Add(byte('U'), s)
	}
	f.Fuzz(func(t *testing.T, opt byte, spec string) {
		switch opt {
		case 't', 'u', 'T', 'U':
		default:
			return
		}
		tb := Table{Pif: PifHost, Caps: allCaps}
		if err := ApplySpec(&tb, opt, spec, false, captureEph, nil); err != nil {
			return
		}
		// What a value adds is a valid table, and deleting it again
		// leaves nothing.
		if err := tb.Validate(); err != nil {
			t.Fatalf("%q: added rules that do not validate: %v", spec, err)
		}
		if err := ApplySpec(&tb, opt, spec, true, captureEph, nil); err != nil {
			t.Fatalf("%q: deleting what it added: %v", spec, err)
		}
		if len(tb.Rules) != 0 {
			t.Fatalf("%q: %d rules left after deleting", spec, len(tb.Rules))
		}
	})
}
