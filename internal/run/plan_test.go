package run

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/ns"
)

// planString renders the parts of a plan the tests compare.
func planString(p *netPlan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "if=%s mtu=%d v4=%v v6=%v", p.Ifname, p.MTU, p.IPv4, p.IPv6)
	if p.IPv4 {
		fmt.Fprintf(&b, " addr4=%v gw4=%v", p.Addr4, p.Gateway4)
	}
	if p.IPv6 {
		fmt.Fprintf(&b, " addr6=%v gw6=%v", p.Addr6, p.Gateway6)
	}
	b.WriteString(" addrs=[")
	for i, a := range p.Addrs {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(a.String())
	}
	b.WriteString("] routes=[")
	for i, r := range p.Routes {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%v", r.Dst)
		if r.Gateway.IsValid() {
			fmt.Fprintf(&b, ">%v", r.Gateway)
		}
	}
	b.WriteString("]")
	return b.String()
}

func TestPlanNetwork(t *testing.T) {
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr
	dual := func() *ns.Template {
		return &ns.Template{
			Ifname4: "eth0", Ifname6: "eth0",
			Addrs4:   []netip.Prefix{pfx("192.0.2.1/24"), pfx("192.0.2.9/24")},
			Addrs6:   []netip.Prefix{pfx("2001:db8::1/64")},
			Gateway4: addr("192.0.2.254"), Gateway6: addr("fe80::1"),
			Routes4: []ns.Route{{Dst: pfx("0.0.0.0/0"), Gateway: addr("192.0.2.254")},
				{Dst: pfx("198.51.100.0/24"), Gateway: addr("192.0.2.253")}},
			Routes6: []ns.Route{{Dst: pfx("::/0"), Gateway: addr("fe80::1")}},
		}
	}
	cfgWith := func(f func(c *config.Config)) *config.Config {
		c := &config.Config{MTU: -1}
		if f != nil {
			f(c)
		}
		return c
	}
	tests := []struct {
		name    string
		cfg     *config.Config
		tmpl    *ns.Template
		want    string
		wantErr string
	}{
		{
			name: "copy the template",
			cfg:  cfgWith(nil), tmpl: dual(),
			want: "if=eth0 mtu=65520 v4=true v6=true addr4=192.0.2.1/24 gw4=192.0.2.254 addr6=2001:db8::1/64 gw6=fe80::1" +
				" addrs=[192.0.2.1/24 192.0.2.9/24 2001:db8::1/64] routes=[0.0.0.0/0>192.0.2.254 198.51.100.0/24>192.0.2.253 ::/0>fe80::1]",
		},
		{
			// The parser gives -a without a length its class's (10/8),
			// as pasta: the host address's length is not the user's.
			name: "-a without a length keeps the class guess",
			cfg: cfgWith(func(c *config.Config) {
				c.Addr4 = pfx("10.0.0.5/8")
			}),
			tmpl: dual(),
			want: "if=eth0 mtu=65520 v4=true v6=true addr4=10.0.0.5/8 gw4=192.0.2.254 addr6=2001:db8::1/64 gw6=fe80::1" +
				" addrs=[10.0.0.5/8 2001:db8::1/64] routes=[0.0.0.0/0>192.0.2.254 198.51.100.0/24>192.0.2.253 ::/0>fe80::1]",
		},
		{
			name: "-a with a length, -g, -I, -m",
			cfg: cfgWith(func(c *config.Config) {
				c.Addr4, c.Addr4LenGiven = pfx("10.0.2.100/16"), true
				c.Gateway4, c.NSIfName, c.MTU = addr("10.0.2.2"), "tap0", 1500
			}),
			tmpl: dual(),
			want: "if=tap0 mtu=1500 v4=true v6=true addr4=10.0.2.100/16 gw4=10.0.2.2 addr6=2001:db8::1/64 gw6=fe80::1" +
				" addrs=[10.0.2.100/16 2001:db8::1/64] routes=[0.0.0.0/0>10.0.2.2 ::/0>fe80::1]",
		},
		{
			name: "-n alone changes the copied length",
			cfg:  cfgWith(func(c *config.Config) { c.Prefix4Len = 16 }),
			tmpl: dual(),
			want: "if=eth0 mtu=65520 v4=true v6=true addr4=192.0.2.1/16 gw4=192.0.2.254 addr6=2001:db8::1/64 gw6=fe80::1" +
				" addrs=[192.0.2.1/16 192.0.2.9/24 2001:db8::1/64] routes=[0.0.0.0/0>192.0.2.254 198.51.100.0/24>192.0.2.253 ::/0>fe80::1]",
		},
		{
			name: "--no-copy-addrs, --no-copy-routes",
			cfg:  cfgWith(func(c *config.Config) { c.NoCopyAddrs, c.NoCopyRoutes = true, true }),
			tmpl: dual(),
			want: "if=eth0 mtu=65520 v4=true v6=true addr4=192.0.2.1/24 gw4=192.0.2.254 addr6=2001:db8::1/64 gw6=fe80::1" +
				" addrs=[192.0.2.1/24 2001:db8::1/64] routes=[0.0.0.0/0>192.0.2.254 ::/0>fe80::1]",
		},
		{
			name: "-4 and -m 0",
			cfg:  cfgWith(func(c *config.Config) { c.IPv4Only, c.MTU = true, 0 }),
			tmpl: dual(),
			want: "if=eth0 mtu=0 v4=true v6=false addr4=192.0.2.1/24 gw4=192.0.2.254" +
				" addrs=[192.0.2.1/24 192.0.2.9/24] routes=[0.0.0.0/0>192.0.2.254 198.51.100.0/24>192.0.2.253]",
		},
		{
			name: "local mode",
			cfg:  cfgWith(nil),
			tmpl: &ns.Template{Local: true},
			want: "if=tap0 mtu=65520 v4=true v6=true addr4=169.254.2.1/16 gw4=169.254.2.2 addr6=invalid Prefix gw6=fe80::1" +
				" addrs=[169.254.2.1/16] routes=[0.0.0.0/0>169.254.2.2 ::/0>fe80::1]",
		},
		{
			// A family the host lacks runs in local mode, as with pasta.
			name: "IPv6-only host",
			cfg:  cfgWith(nil),
			tmpl: &ns.Template{Ifname6: "wlan0", Addrs6: []netip.Prefix{pfx("2001:db8::1/64")}, Gateway6: addr("fe80::2"),
				Routes6: []ns.Route{{Dst: pfx("::/0"), Gateway: addr("fe80::2")}, {Dst: pfx("2001:db8:5::/48"), Gateway: addr("fe80::3")}}},
			want: "if=wlan0 mtu=65520 v4=true v6=true addr4=169.254.2.1/16 gw4=169.254.2.2 addr6=2001:db8::1/64 gw6=fe80::2" +
				" addrs=[169.254.2.1/16 2001:db8::1/64] routes=[0.0.0.0/0>169.254.2.2 ::/0>fe80::2 2001:db8:5::/48>fe80::3]",
		},
		{
			name: "IPv4-only host",
			cfg:  cfgWith(nil),
			tmpl: &ns.Template{Ifname4: "eth0", Addrs4: []netip.Prefix{pfx("192.0.2.1/24")}, Gateway4: addr("192.0.2.254"),
				Routes4: []ns.Route{{Dst: pfx("0.0.0.0/0"), Gateway: addr("192.0.2.254")}}},
			want: "if=eth0 mtu=65520 v4=true v6=true addr4=192.0.2.1/24 gw4=192.0.2.254 addr6=invalid Prefix gw6=fe80::1" +
				" addrs=[192.0.2.1/24] routes=[0.0.0.0/0>192.0.2.254 ::/0>fe80::1]",
		},
		{
			name: "IPv4-only host with -4",
			cfg:  cfgWith(func(c *config.Config) { c.IPv4Only = true }),
			tmpl: &ns.Template{Ifname4: "eth0", Addrs4: []netip.Prefix{pfx("192.0.2.1/24")}, Gateway4: addr("192.0.2.254")},
			want: "if=eth0 mtu=65520 v4=true v6=false addr4=192.0.2.1/24 gw4=192.0.2.254 addrs=[192.0.2.1/24] routes=[0.0.0.0/0>192.0.2.254]",
		},
		{
			name:    "--outbound-if6 without IPv6",
			cfg:     cfgWith(func(c *config.Config) { c.OutboundIf6 = "lo" }),
			tmpl:    &ns.Template{Ifname4: "eth0", Addrs4: []netip.Prefix{pfx("192.0.2.1/24")}, Gateway4: addr("192.0.2.254")},
			wantErr: "--outbound-if6 lo: the interface has no address or route of that family to use",
		},
		{
			// -a wins over local mode's address.
			name: "IPv6-only host, -a for IPv4",
			cfg:  cfgWith(func(c *config.Config) { c.Addr4, c.Addr4LenGiven = pfx("10.0.2.100/24"), true }),
			tmpl: &ns.Template{Ifname6: "wlan0", Addrs6: []netip.Prefix{pfx("2001:db8::1/64")}, Gateway6: addr("fe80::2")},
			want: "if=wlan0 mtu=65520 v4=true v6=true addr4=10.0.2.100/24 gw4=169.254.2.2 addr6=2001:db8::1/64 gw6=fe80::2" +
				" addrs=[10.0.2.100/24 2001:db8::1/64] routes=[0.0.0.0/0>169.254.2.2 ::/0>fe80::2]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planNetwork(tc.cfg, tc.tmpl)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("planNetwork: %v", err)
			}
			if got := planString(p); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestPlanDropIPv6 checks what is left when the host or the namespace has
// no IPv6: the IPv4 half of the plan, an IPv4 route through an IPv6
// router gone too.
func TestPlanDropIPv6(t *testing.T) {
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr
	p := &netPlan{
		Ifname: "eth0", MTU: 65520, IPv4: true, IPv6: true, Local6: true,
		Addr4: pfx("192.0.2.1/24"), Gateway4: addr("192.0.2.254"),
		Addr6: pfx("2001:db8::1/64"), Gateway6: addr("fe80::1"),
		Addrs: []netip.Prefix{pfx("192.0.2.1/24"), pfx("2001:db8::1/64")},
		Routes: []ns.Route{{Dst: pfx("0.0.0.0/0"), Gateway: addr("192.0.2.254")},
			{Dst: pfx("198.51.100.0/24"), Gateway: addr("fe80::2")},
			{Dst: pfx("::/0"), Gateway: addr("fe80::1")}},
	}
	p.dropIPv6()
	want := "if=eth0 mtu=65520 v4=true v6=false addr4=192.0.2.1/24 gw4=192.0.2.254 addrs=[192.0.2.1/24] routes=[0.0.0.0/0>192.0.2.254]"
	if got := planString(p); got != want || p.Local6 || p.Addr6.IsValid() || p.Gateway6.IsValid() {
		t.Errorf("got %s (local6 %v, addr6 %v, gw6 %v), want %s and no IPv6 left", got, p.Local6, p.Addr6, p.Gateway6, want)
	}
}
