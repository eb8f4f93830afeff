package fwdrule

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

const allCaps = AllCaps

// captureEph is the ephemeral range of the machine the reference
// transcripts were captured on.
var captureEph = Range{32768, 60999}

func lines(t *Table) []string {
	var out []string
	for _, r := range t.Rules {
		out = append(out, r.String())
	}
	return out
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
