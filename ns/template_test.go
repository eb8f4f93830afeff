package ns_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/ns"
)

// tmplIP runs ip(8) as a fixture tool from the locked thread, whose
// network namespace the child inherits.
func tmplIP(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

const (
	tmplMAC  = "02:67:70:6e:73:01"
	tmplMTU  = 1400
	mainIf   = "eth0"
	sideIf   = "side0"
	sideAddr = "203.0.113.1/24"
)

// tmplHost builds the "host" fixture in the current (fresh) namespace:
// eth0 (a veth with its peer up beside it) with 192.0.2.1/24 and
// 2001:db8::1/64, default routes via 192.0.2.254 and 2001:db8::fe, an extra
// route to 198.51.100.0/24 via 192.0.2.253, and link-local destinations
// that must never be copied.
func tmplHost(t *testing.T) {
	t.Helper()
	tmplIP(t, "link", "add", mainIf, "type", "veth", "peer", "name", "peer0")
	tmplIP(t, "link", "set", mainIf, "address", tmplMAC, "mtu", "1400", "up")
	tmplIP(t, "link", "set", "peer0", "up")
	tmplIP(t, "addr", "add", "192.0.2.1/24", "dev", mainIf)
	tmplIP(t, "-6", "addr", "add", "2001:db8::1/64", "dev", mainIf, "nodad")
	tmplIP(t, "route", "add", "default", "via", "192.0.2.254", "dev", mainIf)
	tmplIP(t, "route", "add", "198.51.100.0/24", "via", "192.0.2.253", "dev", mainIf)
	tmplIP(t, "route", "add", "169.254.0.0/16", "dev", mainIf)
	tmplIP(t, "-6", "route", "add", "fe80::/64", "dev", mainIf, "metric", "100")
	tmplIP(t, "-6", "route", "add", "default", "via", "2001:db8::fe", "dev", mainIf)
}

// tmplSide adds side0, an interface with only a connected IPv4 route and
// an IPv6 address but no default route.
func tmplSide(t *testing.T) {
	t.Helper()
	tmplIP(t, "link", "add", sideIf, "type", "veth", "peer", "name", "sidep0")
	tmplIP(t, "link", "set", sideIf, "up")
	tmplIP(t, "link", "set", "sidep0", "up")
	tmplIP(t, "addr", "add", sideAddr, "dev", sideIf)
	tmplIP(t, "-6", "addr", "add", "2001:db8:1::1/64", "dev", sideIf, "nodad")
}

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

func addr(s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	return netip.MustParseAddr(s)
}

// routeKeys reduces routes to "dst via gw" strings, in order.
func routeKeys(rs []ns.Route) []string {
	var out []string
	for _, r := range rs {
		k := r.Dst.String()
		if r.Gateway.IsValid() {
			k += " via " + r.Gateway.String()
		}
		out = append(out, k)
	}
	return out
}

func TestDiscoverTemplate(t *testing.T) {
	type want struct {
		local            bool
		if4, if6         string
		addrs4, addrs6   []netip.Prefix
		gw4, gw6         netip.Addr
		routes4, routes6 []string // sorted "dst via gw"
		mtu              int
		mac              string
	}
	hostRoutes4 := []string{"0.0.0.0/0 via 192.0.2.254", "192.0.2.0/24", "198.51.100.0/24 via 192.0.2.253"}
	hostRoutes6 := []string{"2001:db8::/64", "::/0 via 2001:db8::fe"}
	sideOnly := want{ // the template of the side interface, which has no default route
		if4: sideIf, if6: sideIf,
		addrs4: pfx(sideAddr), addrs6: pfx("2001:db8:1::1/64"),
		routes4: []string{"203.0.113.0/24"}, routes6: []string{"2001:db8:1::/64"},
		mtu: 1500,
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T)
		opts  ns.TemplateOptions
		want  want
	}{
		{
			name:  "default routes",
			setup: func(t *testing.T) { tmplSide(t); tmplHost(t) },
			want: want{
				if4: mainIf, if6: mainIf,
				addrs4: pfx("192.0.2.1/24"), addrs6: pfx("2001:db8::1/64"),
				gw4: addr("192.0.2.254"), gw6: addr("2001:db8::fe"),
				routes4: hostRoutes4, routes6: hostRoutes6,
				mtu: tmplMTU, mac: tmplMAC,
			},
		},
		{
			name: "IPv4 route via an IPv6 next hop (RTA_VIA)",
			setup: func(t *testing.T) {
				tmplHost(t)
				tmplIP(t, "route", "add", "198.18.0.0/24", "via", "inet6", "2001:db8::fd", "dev", mainIf)
			},
			opts: ns.TemplateOptions{NoIPv6: true},
			want: want{
				if4: mainIf, addrs4: pfx("192.0.2.1/24"), gw4: addr("192.0.2.254"),
				routes4: append(slices.Clone(hostRoutes4), "198.18.0.0/24 via 2001:db8::fd"),
				mtu:     tmplMTU, mac: tmplMAC,
			},
		},
		{
			name:  "-i forces an interface without default route",
			setup: func(t *testing.T) { tmplHost(t); tmplSide(t) },
			opts:  ns.TemplateOptions{Interface: sideIf},
			want:  sideOnly,
		},
		{
			name:  "--outbound-if4 picks the IPv4 template only",
			setup: func(t *testing.T) { tmplHost(t); tmplSide(t) },
			opts:  ns.TemplateOptions{OutboundIf4: sideIf},
			want: want{
				if4: sideIf, if6: mainIf,
				addrs4: pfx(sideAddr), addrs6: pfx("2001:db8::1/64"),
				gw6:     addr("2001:db8::fe"),
				routes4: []string{"203.0.113.0/24"}, routes6: hostRoutes6,
				mtu: 1500,
			},
		},
		{
			name:  "only non-default routes",
			setup: tmplSide,
			want:  sideOnly,
		},
		{
			name:  "no routes: local mode",
			setup: func(t *testing.T) { tmplIP(t, "link", "set", "lo", "up") },
			want: want{
				local:  true,
				addrs4: []netip.Prefix{ns.LocalAddr4},
				gw4:    ns.LocalGateway4, gw6: ns.LocalGateway6,
			},
		},
		{
			name: "multipath default: first next hop wins",
			setup: func(t *testing.T) {
				tmplSide(t)
				tmplIP(t, "link", "add", mainIf, "type", "veth", "peer", "name", "peer0")
				tmplIP(t, "link", "set", mainIf, "address", tmplMAC, "mtu", "1400", "up")
				tmplIP(t, "link", "set", "peer0", "up")
				tmplIP(t, "addr", "add", "192.0.2.1/24", "dev", mainIf)
				tmplIP(t, "route", "add", "default",
					"nexthop", "via", "192.0.2.254", "dev", mainIf,
					"nexthop", "via", "203.0.113.254", "dev", sideIf)
			},
			opts: ns.TemplateOptions{NoIPv6: true},
			want: want{
				if4: mainIf, addrs4: pfx("192.0.2.1/24"), gw4: addr("192.0.2.254"),
				routes4: []string{"0.0.0.0/0 via 192.0.2.254", "192.0.2.0/24"},
				mtu:     tmplMTU, mac: tmplMAC,
			},
		},
		{
			name:  "-6 style: IPv4 skipped",
			setup: tmplHost,
			opts:  ns.TemplateOptions{NoIPv4: true},
			want: want{
				if6: mainIf, addrs6: pfx("2001:db8::1/64"), gw6: addr("2001:db8::fe"),
				routes6: hostRoutes6, mtu: tmplMTU, mac: tmplMAC,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer nstest.EnterNetns(t)()
			tc.setup(t)
			got, err := ns.DiscoverTemplate(tc.opts)
			if err != nil {
				t.Fatalf("DiscoverTemplate(%+v): %v", tc.opts, err)
			}
			w := tc.want
			check := func(what string, g, w any) {
				t.Helper()
				gj, _ := json.Marshal(g)
				wj, _ := json.Marshal(w)
				if string(gj) != string(wj) {
					t.Errorf("%s: got %s, want %s", what, gj, wj)
				}
			}
			check("Local", got.Local, w.local)
			check("Ifname4", got.Ifname4, w.if4)
			check("Ifname6", got.Ifname6, w.if6)
			if (got.Ifindex4 != 0) != (w.if4 != "") || (got.Ifindex6 != 0) != (w.if6 != "") {
				t.Errorf("Ifindex4/6: got %d/%d, want non-zero exactly for %q/%q", got.Ifindex4, got.Ifindex6, w.if4, w.if6)
			}
			check("Addrs4", got.Addrs4, w.addrs4)
			check("Addrs6", got.Addrs6, w.addrs6)
			check("Gateway4", got.Gateway4, w.gw4)
			check("Gateway6", got.Gateway6, w.gw6)
			r4, r6 := routeKeys(got.Routes4), routeKeys(got.Routes6)
			slices.Sort(r4)
			slices.Sort(r6)
			w4, w6 := slices.Clone(w.routes4), slices.Clone(w.routes6)
			slices.Sort(w4)
			slices.Sort(w6)
			check("Routes4", r4, w4)
			check("Routes6", r6, w6)
			for _, r := range append(slices.Clone(got.Routes4), got.Routes6...) {
				if r.Ifindex != got.Ifindex4 && r.Ifindex != got.Ifindex6 {
					t.Errorf("route %v: ifindex %d is not the template's (%d/%d)", r, r.Ifindex, got.Ifindex4, got.Ifindex6)
				}
			}
			check("MTU", got.MTU, w.mtu)
			if w.mac != "" {
				check("MAC", got.MAC.String(), w.mac)
			}
		})
	}
}

func TestDiscoverTemplateMissingInterface(t *testing.T) {
	for _, opts := range []ns.TemplateOptions{
		{Interface: "gpnosuch0"},
		{OutboundIf4: "gpnosuch0"},
		{OutboundIf6: "gpnosuch0"},
	} {
		t.Run("", func(t *testing.T) {
			defer nstest.EnterNetns(t)()
			_, err := ns.DiscoverTemplate(opts)
			if !errors.Is(err, ns.ErrNoTemplateInterface) {
				t.Fatalf("DiscoverTemplate(%+v): got %v, want ErrNoTemplateInterface", opts, err)
			}
			var te *ns.TemplateInterfaceError
			if !errors.As(err, &te) || te.Name != "gpnosuch0" || !strings.Contains(err.Error(), "gpnosuch0") {
				t.Fatalf("DiscoverTemplate(%+v): got %v, want a *TemplateInterfaceError naming gpnosuch0", opts, err)
			}
		})
	}
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}
