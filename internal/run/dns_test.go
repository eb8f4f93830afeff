package run

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestParseResolvConf(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		wantServers []netip.Addr
		wantSearch  []string
	}{
		{"empty", "", nil, nil},
		{"servers in order", "nameserver 192.0.2.53\nnameserver 2001:db8::53\nnameserver 127.0.0.53\n",
			addrs("192.0.2.53", "2001:db8::53", "127.0.0.53"), nil},
		{"search", "search a.example b.example\nnameserver 192.0.2.1", addrs("192.0.2.1"), []string{"a.example", "b.example"}},
		{"last of search and domain wins", "search a.example\ndomain b.example\n", nil, []string{"b.example"}},
		{"domain then search", "domain b.example\nsearch c.example d.example\n", nil, []string{"c.example", "d.example"}},
		{"comments", "# nameserver 192.0.2.9\n; nameserver 192.0.2.8\nnameserver 192.0.2.7 # trailing\n", addrs("192.0.2.7"), nil},
		{"malformed addresses skipped", "nameserver not-an-ip\nnameserver 192.0.2.300\nnameserver\nnameserver 192.0.2.6\n", addrs("192.0.2.6"), nil},
		{"zoned server skipped", "nameserver fe80::1%eth0\nnameserver fe80::2\n", addrs("fe80::2"), nil},
		{"mapped v4 unmapped", "nameserver ::ffff:192.0.2.5\n", addrs("192.0.2.5"), nil},
		{"other options ignored", "options edns0 ndots:2\nsortlist 192.0.2.0/24\nnameserver 192.0.2.4\n", addrs("192.0.2.4"), nil},
		{"whitespace", "  nameserver\t192.0.2.3  \r\n", addrs("192.0.2.3"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := parseResolvConf(strings.NewReader(tc.in))
			if !slices.Equal(rc.Servers, tc.wantServers) {
				t.Errorf("servers: got %v, want %v", rc.Servers, tc.wantServers)
			}
			if !slices.Equal(rc.Search, tc.wantSearch) {
				t.Errorf("search: got %q, want %q", rc.Search, tc.wantSearch)
			}
		})
	}
}

func TestReadResolvConf(t *testing.T) {
	if rc := readResolvConf(filepath.Join(t.TempDir(), "missing")); rc.Servers != nil || rc.Search != nil {
		t.Errorf("missing file: got %+v, want an empty configuration", rc)
	}
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte("nameserver 192.0.2.53\nsearch example.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc := readResolvConf(p)
	if !slices.Equal(rc.Servers, addrs("192.0.2.53")) || !slices.Equal(rc.Search, []string{"example.test"}) {
		t.Errorf("readResolvConf: got %+v, want server 192.0.2.53 and search example.test", rc)
	}
}

func FuzzParseResolvConf(f *testing.F) {
	f.Add("nameserver 192.0.2.1\nsearch a b\n")
	f.Add("domain x\nnameserver fe80::1%eth0\n# c\n")
	f.Fuzz(func(t *testing.T, s string) {
		rc := parseResolvConf(strings.NewReader(s))
		for _, a := range rc.Servers {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Errorf("server %v: want valid, zoneless, unmapped addresses only", a)
			}
		}
	})
}

// TestPlanDNS follows pasta: what the namespace is told, and which
// namespace-side address's port 53 goes to which host resolver.
func TestPlanDNS(t *testing.T) {
	gw4, gw6 := netip.MustParseAddr("192.0.2.254"), netip.MustParseAddr("fe80::1")
	tests := []struct {
		name string
		in   dnsInput
		want dnsPlan
	}{
		{
			name: "host resolvers handed out as they are",
			in: dnsInput{MapLo4: gw4, MapLo6: gw6, Resolv: resolvConf{
				Servers: addrs("198.51.100.53", "2001:db8::53"), Search: []string{"example.test"}}},
			want: dnsPlan{DNS4: addrs("198.51.100.53"), DNS6: addrs("2001:db8::53"), Search: []string{"example.test"}},
		},
		{
			name: "loopback resolver reached through the gateway",
			in:   dnsInput{MapLo4: gw4, MapLo6: gw6, Resolv: resolvConf{Servers: addrs("127.0.0.53", "::1")}},
			want: dnsPlan{DNS4: []netip.Addr{gw4}, DNS6: []netip.Addr{gw6},
				Forward4: gw4, ForwardTo4: netip.MustParseAddr("127.0.0.53"),
				Forward6: gw6, ForwardTo6: netip.IPv6Loopback()},
		},
		{
			name: "gateway resolver not shadowed by the loopback mapping",
			in: dnsInput{MapLo4: gw4, MapLo6: gw6, Resolv: resolvConf{
				Servers: addrs("192.0.2.254", "fe80::1", "198.51.100.53")}},
			want: dnsPlan{DNS4: addrs("192.0.2.254", "198.51.100.53"), DNS6: []netip.Addr{gw6},
				Forward4: gw4, ForwardTo4: gw4, Forward6: gw6, ForwardTo6: gw6},
		},
		{
			name: "gateway resolver after another resolver",
			in: dnsInput{MapLo4: gw4, Resolv: resolvConf{
				Servers: addrs("198.51.100.53", "192.0.2.254")}},
			want: dnsPlan{DNS4: addrs("198.51.100.53", "192.0.2.254"),
				Forward4: gw4, ForwardTo4: gw4},
		},
		{
			name: "gateway and loopback resolvers: the first stands for the gateway",
			in: dnsInput{MapLo4: gw4, Resolv: resolvConf{
				Servers: addrs("192.0.2.254", "127.0.0.53")}},
			want: dnsPlan{DNS4: addrs("192.0.2.254"), Forward4: gw4, ForwardTo4: gw4},
		},
		{
			name: "loopback then gateway resolver",
			in: dnsInput{MapLo4: gw4, Resolv: resolvConf{
				Servers: addrs("127.0.0.53", "192.0.2.254")}},
			want: dnsPlan{DNS4: addrs("192.0.2.254"), Forward4: gw4, ForwardTo4: netip.MustParseAddr("127.0.0.53")},
		},
		{
			name: "gateway resolver to dns-host",
			in: dnsInput{MapLo4: gw4, Host4: netip.MustParseAddr("198.51.100.9"),
				Resolv: resolvConf{Servers: addrs("192.0.2.254")}},
			want: dnsPlan{DNS4: addrs("192.0.2.254"), Forward4: gw4, ForwardTo4: netip.MustParseAddr("198.51.100.9")},
		},
		{
			name: "loopback resolver to dns-host",
			in: dnsInput{MapLo6: gw6, Host6: netip.MustParseAddr("2001:db8::9"),
				Resolv: resolvConf{Servers: addrs("::1")}},
			want: dnsPlan{DNS6: []netip.Addr{gw6}, Forward6: gw6, ForwardTo6: netip.MustParseAddr("2001:db8::9")},
		},
		{
			name: "gateway resolver with dns-forward: the forward address stands for it",
			in: dnsInput{Forward4: netip.MustParseAddr("169.254.1.1"), MapLo4: gw4,
				Forward6: netip.MustParseAddr("2001:db8::3"), MapLo6: gw6,
				Resolv: resolvConf{Servers: addrs("192.0.2.254", "fe80::1", "198.51.100.53")}},
			want: dnsPlan{DNS4: addrs("169.254.1.1", "198.51.100.53"), DNS6: addrs("2001:db8::3"),
				Forward4: netip.MustParseAddr("169.254.1.1"), ForwardTo4: gw4,
				Forward6: netip.MustParseAddr("2001:db8::3"), ForwardTo6: gw6},
		},
		{
			name: "gateway resolver with no-map-gw is an ordinary resolver",
			in:   dnsInput{Resolv: resolvConf{Servers: addrs("192.0.2.254")}},
			want: dnsPlan{DNS4: addrs("192.0.2.254")},
		},
		{
			name: "explicit map-host-loopback at a resolver",
			in: dnsInput{MapLo4: netip.MustParseAddr("198.51.100.53"),
				Resolv: resolvConf{Servers: addrs("192.0.2.254", "198.51.100.53")}},
			want: dnsPlan{DNS4: addrs("192.0.2.254", "198.51.100.53"),
				Forward4: netip.MustParseAddr("198.51.100.53"), ForwardTo4: netip.MustParseAddr("198.51.100.53")},
		},
		{
			name: "explicit -D: no implicit forwarding",
			in: dnsInput{DNS: addrs("192.0.2.254"), MapLo4: gw4,
				Resolv: resolvConf{Servers: addrs("192.0.2.254")}},
			want: dnsPlan{DNS4: addrs("192.0.2.254")},
		},
		{
			name: "loopback resolver without loopback mapping is unreachable",
			in:   dnsInput{Resolv: resolvConf{Servers: addrs("127.0.0.53", "198.51.100.53")}},
			want: dnsPlan{DNS4: addrs("198.51.100.53")},
		},
		{
			name: "dns-forward goes to the first resolver",
			in: dnsInput{Forward4: netip.MustParseAddr("169.254.1.1"), MapLo4: gw4,
				Resolv: resolvConf{Servers: addrs("127.0.0.1", "198.51.100.53")}},
			want: dnsPlan{DNS4: addrs("169.254.1.1", "198.51.100.53"),
				Forward4: netip.MustParseAddr("169.254.1.1"), ForwardTo4: netip.MustParseAddr("127.0.0.1")},
		},
		{
			name: "dns-forward to dns-host",
			in: dnsInput{Forward4: netip.MustParseAddr("10.0.2.3"), Host4: netip.MustParseAddr("198.51.100.9"),
				Resolv: resolvConf{Servers: addrs("198.51.100.53")}},
			want: dnsPlan{DNS4: addrs("10.0.2.3", "198.51.100.53"),
				Forward4: netip.MustParseAddr("10.0.2.3"), ForwardTo4: netip.MustParseAddr("198.51.100.9")},
		},
		{
			name: "dns-forward IPv6",
			in: dnsInput{Forward6: netip.MustParseAddr("2001:db8::3"), MapLo6: gw6,
				Resolv: resolvConf{Servers: addrs("192.0.2.1", "::1")}},
			want: dnsPlan{DNS4: addrs("192.0.2.1"), DNS6: addrs("2001:db8::3"),
				Forward6: netip.MustParseAddr("2001:db8::3"), ForwardTo6: netip.IPv6Loopback()},
		},
		{
			name: "explicit -D wins",
			in: dnsInput{DNS: addrs("198.51.100.1", "2001:db8::1", "198.51.100.1"), MapLo4: gw4,
				Resolv: resolvConf{Servers: addrs("127.0.0.53")}},
			want: dnsPlan{DNS4: addrs("198.51.100.1"), DNS6: addrs("2001:db8::1")},
		},
		{
			name: "-D none keeps forwarding",
			in: dnsInput{NoDNS: true, Forward4: netip.MustParseAddr("10.0.2.3"),
				Resolv: resolvConf{Servers: addrs("198.51.100.53"), Search: []string{"x.test"}}},
			want: dnsPlan{Search: []string{"x.test"},
				Forward4: netip.MustParseAddr("10.0.2.3"), ForwardTo4: netip.MustParseAddr("198.51.100.53")},
		},
		{
			name: "duplicates handed out once",
			in:   dnsInput{Resolv: resolvConf{Servers: addrs("198.51.100.53", "198.51.100.53", "2001:db8::53", "2001:db8::53")}},
			want: dnsPlan{DNS4: addrs("198.51.100.53"), DNS6: addrs("2001:db8::53")},
		},
		{
			name: "explicit search",
			in:   dnsInput{Search: []string{"a.test"}, Resolv: resolvConf{Search: []string{"b.test"}}},
			want: dnsPlan{Search: []string{"a.test"}},
		},
		{
			name: "search none",
			in:   dnsInput{NoSearch: true, Resolv: resolvConf{Search: []string{"b.test"}}},
			want: dnsPlan{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := planDNS(tc.in)
			if !slices.Equal(got.DNS4, tc.want.DNS4) || !slices.Equal(got.DNS6, tc.want.DNS6) {
				t.Errorf("servers: got %v %v, want %v %v", got.DNS4, got.DNS6, tc.want.DNS4, tc.want.DNS6)
			}
			if !slices.Equal(got.Search, tc.want.Search) {
				t.Errorf("search: got %q, want %q", got.Search, tc.want.Search)
			}
			if got.Forward4 != tc.want.Forward4 || got.ForwardTo4 != tc.want.ForwardTo4 {
				t.Errorf("IPv4 forwarding: got %v -> %v, want %v -> %v", got.Forward4, got.ForwardTo4, tc.want.Forward4, tc.want.ForwardTo4)
			}
			if got.Forward6 != tc.want.Forward6 || got.ForwardTo6 != tc.want.ForwardTo6 {
				t.Errorf("IPv6 forwarding: got %v -> %v, want %v -> %v", got.Forward6, got.ForwardTo6, tc.want.Forward6, tc.want.ForwardTo6)
			}
		})
	}
}
