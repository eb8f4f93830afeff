package run

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/gopasta/gopasta/internal/config"
)

func TestLinkLocalFromMAC(t *testing.T) {
	tests := []struct {
		mac  net.HardwareAddr
		want string
	}{
		{config.DefaultMAC, "fe80::9855:9aff:fe55:9a55"},
		{net.HardwareAddr{0, 0, 0, 0, 0, 0}, "fe80::200:ff:fe00:0"},
		// The universal/local bit is inverted, not set.
		{net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}, "fe80::11:22ff:fe33:4455"},
		{net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "fe80::fdff:ffff:feff:ffff"},
		// Not an Ethernet address: just the prefix, never a panic.
		{net.HardwareAddr{1, 2, 3}, "fe80::"},
		{nil, "fe80::"},
	}
	for _, tc := range tests {
		got := linkLocalFromMAC(tc.mac)
		if got != netip.MustParseAddr(tc.want) || !got.IsLinkLocalUnicast() {
			t.Errorf("linkLocalFromMAC(%v): got %v, want %s", tc.mac, got, tc.want)
		}
	}
}

// testPlan is the plan for the integration fixture's host: both families,
// a global IPv6 gateway.
func testPlan() *netPlan {
	return &netPlan{
		Ifname: "eth0", MTU: 65520, IPv4: true, IPv6: true,
		Addr4:    netip.MustParsePrefix("192.0.2.1/24"),
		Addr6:    netip.MustParsePrefix("2001:db8::1/64"),
		Gateway4: netip.MustParseAddr("192.0.2.254"),
		Gateway6: netip.MustParseAddr("2001:db8::fe"),
	}
}

// pastaDefaults is what the command line gives with no options: pasta
// mode hands out no DNS by DHCP unless --dhcp-dns.
func pastaDefaults() *config.Config {
	return &config.Config{MTU: -1, NoDHCPDNS: true, NoDHCPSearch: true}
}

func TestPlanEngine(t *testing.T) {
	loopRC := resolvConf{Servers: addrs("127.0.0.53", "::1"), Search: []string{"example.test"}}
	tests := []struct {
		name  string
		cfg   func(c *config.Config)
		plan  func(p *netPlan)
		rc    resolvConf
		check func(t *testing.T, es engineSetup)
	}{
		{
			name: "defaults",
			check: func(t *testing.T, es engineSetup) {
				p := es.params
				if p.OurMAC.String() != config.DefaultMAC.String() || p.MTU != 65520 {
					t.Errorf("MAC, MTU: got %v %d, want %v 65520", p.OurMAC, p.MTU, config.DefaultMAC)
				}
				if p.Addr4 != netip.MustParseAddr("192.0.2.1") || p.Prefix4 != 24 || p.Gateway4 != netip.MustParseAddr("192.0.2.254") {
					t.Errorf("IPv4: got %v/%d via %v, want 192.0.2.1/24 via 192.0.2.254", p.Addr4, p.Prefix4, p.Gateway4)
				}
				if p.Addr6 != netip.MustParseAddr("2001:db8::1") || p.Prefix6 != 64 || p.Gateway6 != netip.MustParseAddr("2001:db8::fe") {
					t.Errorf("IPv6: got %v/%d via %v, want 2001:db8::1/64 via 2001:db8::fe", p.Addr6, p.Prefix6, p.Gateway6)
				}
				if want := netip.MustParseAddr("fe80::9855:9aff:fe55:9a55"); p.OurLL6 != want {
					t.Errorf("our link-local address: got %v, want %v (from the MAC)", p.OurLL6, want)
				}
				if p.NoDHCP || p.NoDHCPv6 || p.NoNDP || p.NoRA {
					t.Errorf("responders: got NoDHCP=%v NoDHCPv6=%v NoNDP=%v NoRA=%v, want all on", p.NoDHCP, p.NoDHCPv6, p.NoNDP, p.NoRA)
				}
				if es.opts.NoMapGW {
					t.Errorf("NoMapGW: got true, want the gateway mapped to host loopback by default")
				}
			},
		},
		{
			name: "mac and kernel MTU",
			cfg:  func(c *config.Config) { c.OurMAC = net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55} },
			plan: func(p *netPlan) { p.MTU = 0 },
			check: func(t *testing.T, es engineSetup) {
				if es.params.MTU != 0 {
					t.Errorf("MTU with -m 0: got %d, want 0 (none announced: the kernel's MTU stays)", es.params.MTU)
				}
				if want := netip.MustParseAddr("fe80::11:22ff:fe33:4455"); es.params.OurLL6 != want {
					t.Errorf("link-local address with -M: got %v, want %v", es.params.OurLL6, want)
				}
			},
		},
		{
			name: "link-local gateway is our address",
			plan: func(p *netPlan) { p.Gateway6 = netip.MustParseAddr("fe80::1") },
			check: func(t *testing.T, es engineSetup) {
				if es.params.OurLL6 != netip.MustParseAddr("fe80::1") {
					t.Errorf("OurLL6: got %v, want the gateway fe80::1 (RAs must come from it)", es.params.OurLL6)
				}
			},
		},
		{
			name: "no IPv6 address",
			plan: func(p *netPlan) { p.Addr6 = netip.Prefix{} },
			check: func(t *testing.T, es engineSetup) {
				if es.params.Prefix6 != 64 || es.params.Addr6.IsValid() {
					t.Errorf("IPv6 without an address: got %v/%d, want none/64 (SLAAC prefix length)", es.params.Addr6, es.params.Prefix6)
				}
			},
		},
		{
			name: "IPv4 only",
			plan: func(p *netPlan) { p.IPv6 = false },
			check: func(t *testing.T, es engineSetup) {
				p := es.params
				if !p.NoDHCPv6 || !p.NoNDP || !p.NoRA || p.NoDHCP {
					t.Errorf("responders: got NoDHCP=%v NoDHCPv6=%v NoNDP=%v NoRA=%v, want only DHCPv4", p.NoDHCP, p.NoDHCPv6, p.NoNDP, p.NoRA)
				}
				if p.Addr6.IsValid() || p.Gateway6.IsValid() {
					t.Errorf("IPv6 parameters: got %v via %v, want none", p.Addr6, p.Gateway6)
				}
			},
		},
		{
			name: "IPv6 only",
			plan: func(p *netPlan) { p.IPv4 = false },
			check: func(t *testing.T, es engineSetup) {
				if !es.params.NoDHCP || es.params.Addr4.IsValid() {
					t.Errorf("IPv6 only: got NoDHCP=%v Addr4=%v, want DHCP off and no IPv4 address", es.params.NoDHCP, es.params.Addr4)
				}
			},
		},
		{
			name: "no-ndp implies no RA",
			cfg:  func(c *config.Config) { c.NoNDP = true },
			check: func(t *testing.T, es engineSetup) {
				if !es.params.NoNDP || !es.params.NoRA {
					t.Errorf("--no-ndp: got NoNDP=%v NoRA=%v, want both", es.params.NoNDP, es.params.NoRA)
				}
			},
		},
		{
			name: "switches",
			cfg: func(c *config.Config) {
				c.NoDHCP, c.NoDHCPv6, c.NoRA, c.NoTCP, c.NoUDP, c.NoICMP = true, true, true, true, true, true
				c.Hostname, c.FQDN = "h", "h.example.test"
			},
			check: func(t *testing.T, es engineSetup) {
				p, o := es.params, es.opts
				if !p.NoDHCP || !p.NoDHCPv6 || !p.NoRA || p.NoNDP {
					t.Errorf("responders: got NoDHCP=%v NoDHCPv6=%v NoRA=%v NoNDP=%v, want NDP only", p.NoDHCP, p.NoDHCPv6, p.NoRA, p.NoNDP)
				}
				if !o.NoTCP || !o.NoUDP || !o.NoICMP {
					t.Errorf("protocols: got NoTCP=%v NoUDP=%v NoICMP=%v, want all off", o.NoTCP, o.NoUDP, o.NoICMP)
				}
				if p.Hostname != "h" || p.FQDN != "h.example.test" {
					t.Errorf("names: got %q %q, want h h.example.test", p.Hostname, p.FQDN)
				}
			},
		},
		{
			name: "loopback resolver forwarded, not announced by default",
			rc:   loopRC,
			check: func(t *testing.T, es engineSetup) {
				o := es.opts
				if o.DNSForward4 != netip.MustParseAddr("192.0.2.254") || o.DNSHost4 != netip.MustParseAddr("127.0.0.53") {
					t.Errorf("IPv4 DNS forwarding: got %v -> %v, want 192.0.2.254 -> 127.0.0.53", o.DNSForward4, o.DNSHost4)
				}
				if o.DNSForward6 != netip.MustParseAddr("2001:db8::fe") || o.DNSHost6 != netip.IPv6Loopback() {
					t.Errorf("IPv6 DNS forwarding: got %v -> %v, want 2001:db8::fe -> ::1", o.DNSForward6, o.DNSHost6)
				}
				if es.params.DNS4 != nil || es.params.DNS6 != nil || es.params.Search != nil {
					t.Errorf("announced DNS: got %v %v %q, want none without --dhcp-dns/--dhcp-search", es.params.DNS4, es.params.DNS6, es.params.Search)
				}
			},
		},
		{
			name: "dhcp-dns and dhcp-search",
			cfg:  func(c *config.Config) { c.NoDHCPDNS, c.NoDHCPSearch = false, false },
			rc:   loopRC,
			check: func(t *testing.T, es engineSetup) {
				p := es.params
				if !slices.Equal(p.DNS4, addrs("192.0.2.254")) || !slices.Equal(p.DNS6, addrs("2001:db8::fe")) {
					t.Errorf("announced DNS: got %v %v, want the gateways", p.DNS4, p.DNS6)
				}
				if !slices.Equal(p.Search, []string{"example.test"}) {
					t.Errorf("announced search: got %q, want [example.test]", p.Search)
				}
			},
		},
		{
			name: "no-map-gw leaves a loopback resolver unreachable",
			cfg:  func(c *config.Config) { c.NoMapGW, c.NoDHCPDNS = true, false },
			rc:   loopRC,
			check: func(t *testing.T, es engineSetup) {
				if !es.opts.NoMapGW {
					t.Errorf("NoMapGW: got false, want true")
				}
				if es.opts.DNSForward4.IsValid() || es.params.DNS4 != nil {
					t.Errorf("DNS: got forward %v, announced %v, want neither", es.opts.DNSForward4, es.params.DNS4)
				}
			},
		},
		{
			name: "map-host-loopback none",
			cfg:  func(c *config.Config) { c.NoMapHostLoopback = true },
			check: func(t *testing.T, es engineSetup) {
				if !es.opts.NoMapGW {
					t.Errorf("NoMapGW with --map-host-loopback none: got false, want true")
				}
			},
		},
		{
			name: "explicit map-host-loopback carries DNS",
			cfg: func(c *config.Config) {
				c.MapHostLoopback4 = netip.MustParseAddr("192.0.2.99")
				c.NoDHCPDNS = false
			},
			rc: resolvConf{Servers: addrs("127.0.0.53")},
			check: func(t *testing.T, es engineSetup) {
				o := es.opts
				if o.MapHostLoopback4 != netip.MustParseAddr("192.0.2.99") {
					t.Errorf("MapHostLoopback4: got %v, want 192.0.2.99", o.MapHostLoopback4)
				}
				if o.DNSForward4 != netip.MustParseAddr("192.0.2.99") || !slices.Equal(es.params.DNS4, addrs("192.0.2.99")) {
					t.Errorf("DNS: got forward %v, announced %v, want 192.0.2.99 both", o.DNSForward4, es.params.DNS4)
				}
			},
		},
		{
			name: "dns-forward with dns-host",
			cfg: func(c *config.Config) {
				c.DNSForward4 = netip.MustParseAddr("169.254.1.1")
				c.DNSHost4 = netip.MustParseAddr("198.51.100.53")
			},
			rc: loopRC,
			check: func(t *testing.T, es engineSetup) {
				if es.opts.DNSForward4 != netip.MustParseAddr("169.254.1.1") || es.opts.DNSHost4 != netip.MustParseAddr("198.51.100.53") {
					t.Errorf("DNS forwarding: got %v -> %v, want 169.254.1.1 -> 198.51.100.53", es.opts.DNSForward4, es.opts.DNSHost4)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, plan := pastaDefaults(), testPlan()
			if tc.cfg != nil {
				tc.cfg(cfg)
			}
			if tc.plan != nil {
				tc.plan(plan)
			}
			tc.check(t, planEngine(cfg, plan, tc.rc))
		})
	}
}

// TestPlanEngineExplicitMapWithNoMapGW: --no-map-gw turns off only the
// gateway default; an explicit --map-host-loopback still maps, and DNS
// planning sees the same address the NAT will map.
func TestPlanEngineExplicitMapWithNoMapGW(t *testing.T) {
	cfg := &config.Config{NoMapGW: true, MapHostLoopback4: netip.MustParseAddr("192.0.2.77"), MTU: -1}
	p := &netPlan{IPv4: true, Addr4: netip.MustParsePrefix("192.0.2.1/24"), Gateway4: netip.MustParseAddr("192.0.2.254")}
	es := planEngine(cfg, p, resolvConf{Servers: []netip.Addr{netip.MustParseAddr("127.0.0.53")}})
	if got, want := es.opts.DNSForward4, netip.MustParseAddr("192.0.2.77"); got != want {
		t.Errorf("DNS forward: got %v, want %v (the explicit loopback mapping)", got, want)
	}
	if got, want := es.opts.DNSHost4, netip.MustParseAddr("127.0.0.53"); got != want {
		t.Errorf("DNS host: got %v, want %v", got, want)
	}
}
