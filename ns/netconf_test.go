package ns_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/ns"
	"github.com/gopasta/gopasta/tap"
)

func ipLinks(t *testing.T) map[string]nstest.Link {
	t.Helper()
	ls, err := nstest.ParseLinks(tmplIP(t, "-j", "addr"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]nstest.Link{}
	for _, l := range ls {
		m[l.IfName] = l
	}
	return m
}

// ipRoutes returns the main table of family as nstest.Route's strings,
// sorted.
func ipRoutes(t *testing.T, family string) []string {
	t.Helper()
	rs, err := nstest.ParseRoutes(tmplIP(t, "-j", family, "route", "show", "table", "main"))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range rs {
		keys = append(keys, r.String())
	}
	slices.Sort(keys)
	return keys
}

// TestConfigureInterface copies a host template into a second namespace,
// as --config-net does: discover in the "host", then open a TAP named like
// the template interface in the "namespace" and configure it.
func TestConfigureInterface(t *testing.T) {
	restore := nstest.EnterNetns(t)
	tmplHost(t)
	tmpl, err := ns.DiscoverTemplate(ns.TemplateOptions{})
	restore()
	if err != nil {
		t.Fatalf("DiscoverTemplate: %v", err)
	}

	ourMAC := mustMAC("9a:55:9a:55:9a:55")
	for _, tc := range []struct {
		name       string
		nc         func(ifindex int) ns.NetConfig
		wantAddrs  []string
		wantRoute4 []string
		wantRoute6 []string
		wantMTU    int
	}{
		{
			name: "copy the template",
			nc: func(ifindex int) ns.NetConfig {
				return ns.NetConfig{
					Ifindex: ifindex, MTU: 65520, MAC: ourMAC,
					Addrs:    append(slices.Clone(tmpl.Addrs4), tmpl.Addrs6...),
					Routes:   append(slices.Clone(tmpl.Routes4), tmpl.Routes6...),
					Gateway4: tmpl.Gateway4, Gateway6: tmpl.Gateway6,
					Up: true,
				}
			},
			wantAddrs: []string{"192.0.2.1/24", "2001:db8::1/64"},
			wantRoute4: []string{
				"192.0.2.0/24 dev eth0 src 192.0.2.1",
				"198.51.100.0/24 via 192.0.2.253 dev eth0",
				"default via 192.0.2.254 dev eth0",
			},
			wantRoute6: []string{"2001:db8::/64 dev eth0", "default via 2001:db8::fe dev eth0", "fe80::/64 dev eth0"},
			wantMTU:    65520,
		},
		{
			// rootlesskit's -a 10.0.2.100 -n 24 -g 10.0.2.2: one address
			// and a default route; a copied route's host prefsrc must be
			// dropped rather than make the kernel refuse the route.
			name: "address and gateway given",
			nc: func(ifindex int) ns.NetConfig {
				return ns.NetConfig{
					Ifindex:  ifindex,
					Addrs:    pfx("10.0.2.100/24"),
					Routes:   []ns.Route{{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gateway: addr("10.0.2.3"), Src: addr("192.0.2.1")}},
					Gateway4: addr("10.0.2.2"),
					Up:       true,
				}
			},
			wantAddrs: []string{"10.0.2.100/24"},
			wantRoute4: []string{
				"10.0.2.0/24 dev eth0 src 10.0.2.100",
				"198.51.100.0/24 via 10.0.2.3 dev eth0",
				"default via 10.0.2.2 dev eth0",
			},
			wantRoute6: []string{"fe80::/64 dev eth0"},
			wantMTU:    1500,
		},
		{
			name: "IPv4 route via an IPv6 next hop",
			nc: func(ifindex int) ns.NetConfig {
				return ns.NetConfig{
					Ifindex: ifindex,
					Addrs:   pfx("192.0.2.1/24", "2001:db8::1/64"),
					Routes:  []ns.Route{{Dst: netip.MustParsePrefix("198.18.0.0/24"), Gateway: addr("2001:db8::fd")}},
					Up:      true,
				}
			},
			wantAddrs:  []string{"192.0.2.1/24", "2001:db8::1/64"},
			wantRoute4: []string{"192.0.2.0/24 dev eth0 src 192.0.2.1", "198.18.0.0/24 via 2001:db8::fd dev eth0"},
			wantRoute6: []string{"2001:db8::/64 dev eth0", "fe80::/64 dev eth0"},
			wantMTU:    1500,
		},
		{
			// Every route through the interface names the congestion
			// control: the added ones (direct, gatewayed, default, with
			// an MTU) and those the kernel made, which keep their
			// preferred source.
			name: "congestion control",
			nc: func(ifindex int) ns.NetConfig {
				return ns.NetConfig{
					Ifindex: ifindex,
					Addrs:   pfx("192.0.2.1/24", "2001:db8::1/64", "198.18.0.9/32"),
					Routes: []ns.Route{
						{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gateway: addr("192.0.2.253"), MTU: 1400},
						{Dst: netip.MustParsePrefix("203.0.113.0/24")},
					},
					Gateway4: addr("192.0.2.254"), Gateway6: addr("fe80::1"),
					Up: true, CongestionControl: "reno",
				}
			},
			wantAddrs: []string{"192.0.2.1/24", "198.18.0.9/32", "2001:db8::1/64"},
			wantRoute4: []string{
				"192.0.2.0/24 dev eth0 src 192.0.2.1 congctl reno",
				"198.51.100.0/24 via 192.0.2.253 dev eth0 mtu 1400 congctl reno",
				"203.0.113.0/24 dev eth0 congctl reno",
				"default via 192.0.2.254 dev eth0 congctl reno",
			},
			wantRoute6: []string{
				"2001:db8::/64 dev eth0 congctl reno",
				"default via fe80::1 dev eth0 congctl reno",
				"fe80::/64 dev eth0 congctl reno",
			},
			wantMTU: 1500,
		},
		{
			// A name the kernel does not know: the routes are added
			// without it.
			name: "unknown congestion control",
			nc: func(ifindex int) ns.NetConfig {
				return ns.NetConfig{
					Ifindex:  ifindex,
					Addrs:    pfx("192.0.2.1/24"),
					Routes:   []ns.Route{{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gateway: addr("192.0.2.253")}},
					Gateway4: addr("192.0.2.254"),
					Up:       true, CongestionControl: "no-such-algorithm",
				}
			},
			wantAddrs: []string{"192.0.2.1/24"},
			wantRoute4: []string{
				"192.0.2.0/24 dev eth0 src 192.0.2.1",
				"198.51.100.0/24 via 192.0.2.253 dev eth0",
				"default via 192.0.2.254 dev eth0",
			},
			wantRoute6: []string{"fe80::/64 dev eth0"},
			wantMTU:    1500,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer nstest.EnterNetns(t)()
			if err := ns.LoopbackUp(); err != nil {
				t.Fatalf("LoopbackUp: %v", err)
			}
			d, err := tap.Open(tap.Config{Name: tmpl.Ifname4})
			if errors.Is(err, tap.ErrTunUnavailable) && os.Geteuid() != 0 {
				t.Skipf("no TAP for this user: %v", err)
			}
			if err != nil {
				t.Fatalf("tap.Open: %v", err)
			}
			defer d.Close()

			nc := tc.nc(d.Index())
			if err := ns.ConfigureInterface(nc); err != nil {
				t.Fatalf("ConfigureInterface(%+v): %v", nc, err)
			}
			// Idempotent: a second run only meets EEXIST.
			if err := ns.ConfigureInterface(nc); err != nil {
				t.Fatalf("second ConfigureInterface: %v", err)
			}

			links := ipLinks(t)
			if lo := links["lo"]; !lo.Up() {
				t.Errorf("lo flags: got %v, want UP", lo.Flags)
			}
			l, ok := links[d.Name()]
			if !ok {
				t.Fatalf("links: no %s in %v", d.Name(), links)
			}
			if !l.Up() {
				t.Errorf("%s flags: got %v, want UP", d.Name(), l.Flags)
			}
			if l.MTU != tc.wantMTU {
				t.Errorf("%s MTU: got %d, want %d", d.Name(), l.MTU, tc.wantMTU)
			}
			if nc.MAC != nil && l.Address != nc.MAC.String() {
				t.Errorf("%s MAC: got %s, want %s", d.Name(), l.Address, nc.MAC)
			}
			addrs, tentative := l.GlobalAddrs(), l.TentativeAddrs()
			slices.Sort(addrs)
			if !slices.Equal(addrs, tc.wantAddrs) {
				t.Errorf("%s addresses: got %v, want %v", d.Name(), addrs, tc.wantAddrs)
			}
			if len(tentative) > 0 {
				t.Errorf("%s tentative addresses: got %v, want none (nodad)", d.Name(), tentative)
			}
			if got := ipRoutes(t, "-4"); !slices.Equal(got, tc.wantRoute4) {
				t.Errorf("IPv4 routes:\n got %v\nwant %v", got, tc.wantRoute4)
			}
			if got := ipRoutes(t, "-6"); !slices.Equal(got, tc.wantRoute6) {
				t.Errorf("IPv6 routes:\n got %v\nwant %v", got, tc.wantRoute6)
			}
			// /proc/sys/net follows the reading thread's namespace, so
			// this is the TAP's setting, not the host's.
			if b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + d.Name() + "/accept_dad"); err != nil || strings.TrimSpace(string(b)) != "0" {
				t.Errorf("accept_dad of %s: got %q (%v), want 0", d.Name(), b, err)
			}
		})
	}
}

func TestConfigureInterfaceErrors(t *testing.T) {
	defer nstest.EnterNetns(t)()
	for _, tc := range []struct {
		name string
		nc   ns.NetConfig
		want string
	}{
		{"no ifindex", ns.NetConfig{}, "invalid ifindex"},
		{"missing interface", ns.NetConfig{Ifindex: 4242}, "4242"},
		{"bad MAC", ns.NetConfig{Ifindex: 1, MAC: mustMAC("02:00:00:00:00:00:00:01")}, "not 6 bytes"},
		{"bad MTU", ns.NetConfig{Ifindex: 1, MTU: 1 << 20}, "out of range"},
		{"bad route gateway", ns.NetConfig{Ifindex: 1, Up: true,
			Routes: []ns.Route{{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gateway: addr("203.0.113.9")}}}, "198.51.100.0/24"},
		{"bad route gateway, with a congestion control", ns.NetConfig{Ifindex: 1, Up: true, CongestionControl: "reno",
			Routes: []ns.Route{{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gateway: addr("203.0.113.9")}}}, "198.51.100.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ns.ConfigureInterface(tc.nc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ConfigureInterface(%+v): got %v, want an error mentioning %q", tc.nc, err, tc.want)
			}
		})
	}
}

// tmplChildEnv marks the test binary re-run as uid 65534 inside its own
// user and network namespace by TestTemplateRootless.
const tmplChildEnv = "GOPASTA_NS_TEMPLATE_USERNS"

// TestTemplateRootless re-runs the discovery and configuration tests as
// uid 65534 in a user+network namespace that uid created (unshare -Urn):
// everything here must work with only the capabilities a rootless user
// gets in its own namespaces.
func TestTemplateRootless(t *testing.T) {
	if os.Getenv(tmplChildEnv) != "" {
		t.Skip("already the rootless child")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to uid 65534")
	}
	for _, tool := range []string{"setpriv", "unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	bin := nstest.SelfBinary(t) // one uid 65534 can execute
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"unshare", "-Urn", bin, "-test.v", "-test.count=1",
		"-test.run=^(TestDiscoverTemplate|TestDiscoverTemplateMissingInterface|TestConfigureInterface|TestConfigureInterfaceErrors)$")
	cmd.Env = append(os.Environ(), tmplChildEnv+"=1")
	cmd.Dir = "/"
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	switch {
	case ctx.Err() != nil:
		t.Fatalf("rootless child timed out:\n%s", out)
	case strings.Contains(out, "unshare failed"):
		t.Skipf("unprivileged user namespaces unavailable:\n%s", out)
	case err != nil:
		t.Fatalf("rootless child: %v\n%s", err, out)
	case strings.Contains(out, "--- SKIP"):
		t.Logf("rootless child skipped some tests:\n%s", out)
	}
	for _, name := range []string{"TestDiscoverTemplate", "TestConfigureInterface", "TestConfigureInterfaceErrors"} {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Errorf("rootless child: no PASS for %s", name)
		}
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}
