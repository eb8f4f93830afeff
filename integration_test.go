package main

// Integration tests: they build the gopasta binary (internal/nstest.Binary)
// and drive it inside a throwaway "host" network namespace
// (internal/nstest.HostNS) as root and as uid 65534, checking what the
// namespace it serves looks like from the inside. They need root to create
// the host namespace and skip otherwise; uid 65534 also needs a usable
// /dev/net/tun (chmod 0666) and unprivileged user namespaces.
//
// GOPASTA_BIN=/usr/bin/pasta go test -run Integration . runs the same checks
// against the reference implementation.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// spawnTimeout bounds one gopasta spawn of a short command.
const spawnTimeout = 30 * time.Second

// nsView is the namespace as `ip -j` reports it from inside.
type nsView struct {
	links            []nstest.Link
	routes4, routes6 []nstest.Route
}

// viewScript prints ip -j addr, -4 route and -6 route separated by marker
// lines, so one spawn yields all three.
const viewScript = `ip -j addr; echo @@; ip -j -4 route; echo @@; ip -j -6 route`

func parseView(out string) (nsView, error) {
	parts := strings.Split(out, "@@")
	if len(parts) != 3 {
		return nsView{}, fmt.Errorf("got %d sections of ip output, want 3: %q", len(parts), out)
	}
	var v nsView
	var err error
	if v.links, err = nstest.ParseLinks(parts[0]); err != nil {
		return v, err
	}
	if v.routes4, err = nstest.ParseRoutes(parts[1]); err != nil {
		return v, err
	}
	v.routes6, err = nstest.ParseRoutes(parts[2])
	return v, err
}

// setup skips unless root (for the host netns) and u can use the TAP and
// user namespaces, then returns a fresh host namespace and the binary.
func setup(t *testing.T, u nstest.User) (*nstest.Host, string) {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTun(t, u)
	nstest.RequireUserNS(t, u)
	bin := nstest.Binary(t)
	return nstest.HostNS(t), bin
}

// gopasta runs the binary inside h as u and waits for it, bounded.
func gopasta(t *testing.T, h *nstest.Host, u nstest.User, bin string, args ...string) nstest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), spawnTimeout)
	defer cancel()
	r := h.RunContext(ctx, u, append([]string{bin}, args...)...)
	if r.TimedOut {
		t.Fatalf("gopasta %q: got no exit within %v, want it to finish\n%s", args, spawnTimeout, r)
	}
	checkNoPanic(t, r)
	return r
}

// checkNoPanic fails the test when output looks like a Go runtime crash.
func checkNoPanic(t *testing.T, r nstest.Result) {
	t.Helper()
	for _, s := range []string{r.Stdout, r.Stderr} {
		if strings.Contains(s, "panic:") || strings.Contains(s, "goroutine ") {
			t.Errorf("output: got a Go panic/stack trace, want none:\n%s", s)
		}
	}
}

// TestIntegrationConfigNet spawns `ip` in the namespace and checks what
// --config-net (and its absence) left there.
func TestIntegrationConfigNet(t *testing.T) {
	const (
		addr4 = "192.0.2.1/24"
		addr6 = "2001:db8::1/64"
	)
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, v nsView)
	}{
		{"copied", []string{"--config-net"}, func(t *testing.T, v nsView) {
			l := wantLink(t, v, "eth0")
			wantAddrs(t, l, addr4, addr6)
			wantMTU(t, l, 65520)
			wantUp(t, l, true)
			wantDefault(t, v.routes4, "192.0.2.254", "eth0")
			wantDefault(t, v.routes6, "2001:db8::fe", "eth0")
			wantUp(t, wantLink(t, v, "lo"), true)
		}},
		{"mtu1500", []string{"--config-net", "-m", "1500"}, func(t *testing.T, v nsView) {
			wantMTU(t, wantLink(t, v, "eth0"), 1500)
		}},
		{"ifname", []string{"--config-net", "-I", "tap7"}, func(t *testing.T, v nsView) {
			if _, ok := nstest.FindLink(v.links, "eth0"); ok {
				t.Errorf("links: got %v, want no eth0 with -I tap7", nstest.Names(v.links))
			}
			l := wantLink(t, v, "tap7")
			wantAddrs(t, l, addr4, addr6)
			wantDefault(t, v.routes4, "192.0.2.254", "tap7")
			wantDefault(t, v.routes6, "2001:db8::fe", "tap7")
		}},
		{"explicit", []string{"--config-net", "-a", "10.0.2.100", "-n", "24", "-g", "10.0.2.2"}, func(t *testing.T, v nsView) {
			l := wantLink(t, v, "eth0")
			var got4 []string
			for _, a := range l.GlobalAddrs() {
				if !strings.Contains(a, ":") {
					got4 = append(got4, a)
				}
			}
			if !slices.Equal(got4, []string{"10.0.2.100/24"}) {
				t.Errorf("IPv4 addresses: got %v, want exactly [10.0.2.100/24]", got4)
			}
			wantDefault(t, v.routes4, "10.0.2.2", "eth0")
		}},
		{"unconfigured", nil, func(t *testing.T, v nsView) {
			wantUp(t, wantLink(t, v, "lo"), true)
			l := wantLink(t, v, "eth0")
			wantUp(t, l, false)
			if got := l.GlobalAddrs(); len(got) != 0 {
				t.Errorf("eth0 global addresses without --config-net: got %v, want none", got)
			}
		}},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					h, bin := setup(t, u)
					args := append(append([]string{}, tc.args...), "--", "sh", "-c", viewScript)
					r := gopasta(t, h, u, bin, args...)
					if r.Code != 0 {
						t.Fatalf("gopasta %q: got exit %d, want 0\n%s", args, r.Code, r)
					}
					v, err := parseView(r.Stdout)
					if err != nil {
						t.Fatal(err)
					}
					tc.check(t, v)
				})
			}
		})
	}
}

func wantLink(t *testing.T, v nsView, name string) nstest.Link {
	t.Helper()
	l, ok := nstest.FindLink(v.links, name)
	if !ok {
		t.Fatalf("links: got %v, want one named %q", nstest.Names(v.links), name)
	}
	return l
}

func wantAddrs(t *testing.T, l nstest.Link, want ...string) {
	t.Helper()
	got := l.GlobalAddrs()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s global addresses: got %v, want %s among them", l.IfName, got, w)
		}
	}
}

func wantMTU(t *testing.T, l nstest.Link, want int) {
	t.Helper()
	if l.MTU != want {
		t.Errorf("%s MTU: got %d, want %d", l.IfName, l.MTU, want)
	}
}

func wantUp(t *testing.T, l nstest.Link, want bool) {
	t.Helper()
	if got := l.Up(); got != want {
		t.Errorf("%s UP: got %v (flags %v), want %v", l.IfName, got, l.Flags, want)
	}
}

func wantDefault(t *testing.T, rs []nstest.Route, gw, dev string) {
	t.Helper()
	d, ok := nstest.DefaultRoute(rs)
	if !ok {
		t.Errorf("routes: got %+v, want a default route via %s dev %s", rs, gw, dev)
		return
	}
	if d.Gateway != gw || d.Dev != dev {
		t.Errorf("default route: got via %q dev %q, want via %s dev %s", d.Gateway, d.Dev, gw, dev)
	}
}
