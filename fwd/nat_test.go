package fwd

import (
	"net/netip"
	"testing"
)

func TestNATFromTap(t *testing.T) {
	a := netip.MustParseAddr
	p := testParams()
	def := NewNAT(p, &Options{})
	podman := NewNAT(p, &Options{NoMapGW: true, MapGuestAddr4: a("169.254.1.2"),
		DNSForward4: a("169.254.1.1"), DNSHost4: a("192.0.2.53")})
	explicit := NewNAT(p, &Options{NoMapGW: true, MapHostLoopback4: a("10.0.2.9")})
	dnsOnGW := NewNAT(p, &Options{DNSForward4: a("10.0.2.2"), DNSHost4: a("127.0.0.53")})
	// The gateway is the host's resolver too: its DNS goes to it, not to
	// host loopback (what the DNS plan asks for then).
	gwResolver := NewNAT(p, &Options{DNSForward4: a("10.0.2.2"), DNSHost4: a("10.0.2.2"),
		DNSForward6: a("fe80::1"), DNSHost6: a("2001:db8::fe")})
	for _, tc := range []struct {
		name string
		n    NAT
		dst  string
		port uint16
		dns  bool
		want string
	}{
		{"gateway to loopback", def, "10.0.2.2", 80, false, "127.0.0.1"},
		{"v6 gateway to loopback", def, "fe80::1", 80, false, "::1"},
		{"other address untouched", def, "192.0.2.7", 80, false, "192.0.2.7"},
		{"no-map-gw", podman, "10.0.2.2", 80, false, "10.0.2.2"},
		{"map-guest-addr", podman, "169.254.1.2", 80, false, "10.0.2.100"},
		{"dns-forward", podman, "169.254.1.1", 53, true, "192.0.2.53"},
		{"dns-forward other port", podman, "169.254.1.1", 80, true, "169.254.1.1"},
		{"dns-forward DNS over TLS", podman, "169.254.1.1", 853, true, "192.0.2.53"},
		{"dns-forward port 854", podman, "169.254.1.1", 854, true, "169.254.1.1"},
		{"dns-forward 853 not dns proto", podman, "169.254.1.1", 853, false, "169.254.1.1"},
		{"dns-forward not dns proto", podman, "169.254.1.1", 53, false, "169.254.1.1"},
		{"explicit map-host-loopback", explicit, "10.0.2.9", 22, false, "127.0.0.1"},
		{"explicit leaves gateway", explicit, "10.0.2.2", 22, false, "10.0.2.2"},
		{"dns before loopback map", dnsOnGW, "10.0.2.2", 53, true, "127.0.0.53"},
		{"gateway non-dns still loopback", dnsOnGW, "10.0.2.2", 54, true, "127.0.0.1"},
		{"gateway resolver: dns to the gateway", gwResolver, "10.0.2.2", 53, true, "10.0.2.2"},
		{"gateway resolver: v6 dns to the resolver", gwResolver, "fe80::1", 53, true, "2001:db8::fe"},
		{"gateway resolver: other port to loopback", gwResolver, "10.0.2.2", 80, true, "127.0.0.1"},
		{"gateway resolver: v6 other port to loopback", gwResolver, "fe80::1", 80, true, "::1"},
		{"gateway resolver: DNS over TLS to the gateway", gwResolver, "10.0.2.2", 853, true, "10.0.2.2"},
		{"gateway resolver: v6 DNS over TLS to the resolver", gwResolver, "fe80::1", 853, true, "2001:db8::fe"},
		{"loopback resolver: DNS over TLS", dnsOnGW, "10.0.2.2", 853, true, "127.0.0.53"},
		{"gateway resolver: not dns proto to loopback", gwResolver, "10.0.2.2", 53, false, "127.0.0.1"},
		{"gateway resolver: other address untouched", gwResolver, "192.0.2.7", 53, true, "192.0.2.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.n.FromTap(a(tc.dst), tc.port, tc.dns); got != a(tc.want) {
				t.Errorf("FromTap(%s:%d) = %v, want %s", tc.dst, tc.port, got, tc.want)
			}
		})
	}
}

func TestNATFromHost(t *testing.T) {
	a := netip.MustParseAddr
	p := testParams()
	def := NewNAT(p, &Options{})
	podman := NewNAT(p, &Options{NoMapGW: true, MapGuestAddr4: a("169.254.1.2")})
	for _, tc := range []struct {
		name string
		n    NAT
		src  string
		want string
		ok   bool
	}{
		{"loopback appears as gateway", def, "127.0.0.1", "10.0.2.2", true},
		{"v6 loopback as v6 gateway", def, "::1", "fe80::1", true},
		{"other loopback unmapped", def, "127.0.0.2", "", false},
		{"v4-mapped loopback", def, "::ffff:127.0.0.1", "10.0.2.2", true},
		{"no-map-gw loopback", podman, "127.0.0.1", "", false},
		{"guest address via map-guest-addr", podman, "10.0.2.100", "169.254.1.2", true},
		{"guest address unmapped", def, "10.0.2.100", "", false},
		{"ordinary address", def, "192.0.2.7", "192.0.2.7", true},
		{"multicast", def, "224.0.0.1", "", false},
		{"unspecified", def, "0.0.0.0", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.n.FromHost(a(tc.src))
			if ok != tc.ok || (ok && got != a(tc.want)) {
				t.Errorf("FromHost(%s) = %v, %v; want %s, %v", tc.src, got, ok, tc.want, tc.ok)
			}
		})
	}
}
