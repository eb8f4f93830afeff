package e2e

// Spawn mode: what the command gopasta runs sees in its new namespaces
// (network configuration, identity, hostname, PID namespace) and how its
// exit status comes back.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/nstest"
)

// nsView is the namespace as `ip -j` reports it from inside.
type nsView struct {
	links            []nstest.Link
	routes4, routes6 []nstest.Route
	gopasta          bool // the binary under test is gopasta, not pasta
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

// TestConfigNet spawns `ip` in the namespace and checks what
// --config-net (and its absence) left there.
func TestConfigNet(t *testing.T) {
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
			wantCongestion(t, v, "eth0", "reno")
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
			wantCongestion(t, v, "eth0", "reno")
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
					e := newEnv(t, u, hostSetup{})
					args := append(append([]string{}, tc.args...), "--", "sh", "-c", viewScript)
					r := e.run(t, args...)
					if r.Code != 0 {
						t.Fatalf("gopasta %q: got exit %d, want 0\n%s", args, r.Code, r)
					}
					v, err := parseView(r.Stdout)
					if err != nil {
						t.Fatal(err)
					}
					v.gopasta = isGopasta(t, e)
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

// wantCongestion checks that every route through dev names the congestion
// control cc, and that there is at least one per family. pasta leaves the
// namespace's default.
func wantCongestion(t *testing.T, v nsView, dev, cc string) {
	t.Helper()
	if !v.gopasta {
		return
	}
	for _, rs := range [][]nstest.Route{v.routes4, v.routes6} {
		n := 0
		for _, r := range rs {
			if r.Dev != dev {
				continue
			}
			n++
			if !slices.ContainsFunc(r.Metrics, func(m nstest.RouteMetric) bool { return m.Congestion == cc }) {
				t.Errorf("route %q: got no congctl %s", r, cc)
			}
		}
		if n == 0 {
			t.Errorf("routes: got none through %s in %v", dev, rs)
		}
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

// TestExitStatus checks that gopasta exits with its command's
// status, 128+signal when the command was killed, and 127 when the command
// cannot be found, as a shell would.
func TestExitStatus(t *testing.T) {
	tests := []struct {
		name    string
		command []string
		want    int
	}{
		{"exit7", []string{"sh", "-c", "exit 7"}, 7},
		{"exit0", []string{"true"}, 0},
		// The shell may be PID 1 of the new PID namespace, and PID 1 is
		// immune to signals it has no handler for: this only exits 143 if
		// the command runs under an init of gopasta's, as it should.
		{"sigterm", []string{"sh", "-c", "kill -TERM $$"}, 143},
		{"sigterm-child", []string{"sh", "-c", "sh -c 'kill -TERM $$'; exit $?"}, 143},
		{"notfound", []string{"gopasta-no-such-command-xyz"}, 127},
		{"notfound-path", []string{"/nonexistent/gopasta-cmd"}, 127},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, u, hostSetup{})
					args := append([]string{"--config-net", "--"}, tc.command...)
					r := e.run(t, args...)
					if r.Code != tc.want || r.Signaled {
						t.Errorf("gopasta -- %q: got exit %d (signaled %v), want %d\n%s", tc.command, r.Code, r.Signaled, tc.want, r)
					}
				})
			}
		})
	}
}

// TestSpawnNamespaces checks what the spawned command sees: root
// in its own user namespace, its own hostname, ping allowed for its group,
// and a PID namespace with a /proc of its own.
func TestSpawnNamespaces(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		command string
		check   func(t *testing.T, u nstest.User, out string)
	}{
		{"uid", nil, "id -u; id -g", func(t *testing.T, _ nstest.User, out string) {
			if got := strings.Fields(out); len(got) != 2 || got[0] != "0" || got[1] != "0" {
				t.Errorf("id -u; id -g: got %q, want 0 and 0", out)
			}
		}},
		{"hostname", []string{"-H", "gp-test-host"}, "hostname", func(t *testing.T, _ nstest.User, out string) {
			if got := strings.TrimSpace(out); got != "gp-test-host" {
				t.Errorf("hostname: got %q, want %q", got, "gp-test-host")
			}
		}},
		{"ping_group_range", nil, "cat /proc/sys/net/ipv4/ping_group_range", func(t *testing.T, u nstest.User, out string) {
			// Root's command has every id mapped to itself, so every
			// group may ping; any other's has only its own, as 0.
			want := "0 0"
			if u.Root() {
				want = "0 2147483647"
			}
			if got := strings.Join(strings.Fields(out), " "); got != want {
				t.Errorf("ping_group_range: got %q, want %q", got, want)
			}
		}},
		{"pidns", nil, "ls /proc", func(t *testing.T, _ nstest.User, out string) {
			// A fresh PID namespace with /proc remounted: only the
			// command, its shell and gopasta's init. The init is a Go
			// program whose threads take PIDs too, so the command's
			// PID is small but not tiny.
			var pids []int
			for _, f := range strings.Fields(out) {
				if n, err := strconv.Atoi(f); err == nil {
					pids = append(pids, n)
				}
			}
			if len(pids) == 0 || len(pids) > 4 || pids[0] != 1 || pids[len(pids)-1] > 64 {
				t.Errorf("PIDs in /proc: got %v, want a handful of small ones (own PID namespace and /proc)", pids)
			}
		}},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, u, hostSetup{})
					args := append(append([]string{}, tc.args...), "--", "sh", "-c", tc.command)
					r := e.run(t, args...)
					if r.Code != 0 {
						t.Fatalf("gopasta %q: got exit %d, want 0\n%s", args, r.Code, r)
					}
					tc.check(t, u, r.Stdout)
				})
			}
		})
	}
}

// TestSpawnDefaultShell: with no command gopasta runs $SHELL as a login
// shell ("-" before its name in argv[0], as pasta does), so it reads the
// profile files and the user gets their usual PATH and prompt; a command
// given is run as it is.
func TestSpawnDefaultShell(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			for _, tc := range []struct {
				name string
				args []string
				want string
			}{
				{"no command", nil, "-/bin/sh"},
				{"a shell given", []string{"--", "/bin/sh"}, "/bin/sh"},
			} {
				// The shell reads its script from standard input.
				script := "echo 'echo $0' | env SHELL=/bin/sh " + shellJoin(e.gopasta(tc.args...))
				r := e.runArgv(t, "sh", "-c", script)
				mustSucceed(t, tc.name, r)
				if got := strings.TrimSpace(r.Stdout); got != tc.want {
					t.Errorf("%s: got $0 %q, want %q", tc.name, got, tc.want)
				}
			}
		})
	}
}

// TestLocalModePerFamily: on a host with one IP family only, the namespace
// still gets the other in local mode (169.254.2.1/16 via 169.254.2.2, or
// its link-local address via fe80::1), as pasta gives it, and reaches the
// host's loopback through that gateway.
func TestLocalModePerFamily(t *testing.T) {
	tests := []struct {
		name   string
		setup  hostSetup
		server string // on host loopback
		target string // from the namespace, %d the server's port
		want   string // in `ip addr` and `ip route` inside
	}{
		{"IPv6-only host", hostSetup{noIPv4: true}, "127.0.0.1:0", "169.254.2.2:%d", "169.254.2.1/16"},
		{"IPv4-only host", hostSetup{noIPv6: true}, "[::1]:0", "[fe80::1%%" + nstest.HostIfName + "]:%d", "default via fe80::1"},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, u, tc.setup)
					port := e.serveTCP(t, tc.server, "")
					cmds := []string{fmt.Sprintf("put "+tc.target+" 2048 1", port), fmt.Sprintf("get "+tc.target+" 2048 2", port)}
					script := "ip addr; ip route; ip -6 route; " + shellJoin(e.peer(cmds...))
					r := e.run(t, "--config-net", "--", "sh", "-c", script)
					mustSucceed(t, tc.name, r)
					if !strings.Contains(r.Stdout, tc.want) {
						t.Errorf("%s: got\n%s\nwant %q in the namespace's addresses and routes", tc.name, r.Stdout, tc.want)
					}
					wantDone(t, r.Stdout, cmds...)
				})
			}
		})
	}
}

// TestSpawnQuiet: in spawn mode gopasta says nothing on a run that goes
// well, as pasta: the command's output is what the user reads. -d shows
// the start-up summary that attach mode prints.
func TestSpawnQuiet(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			r := e.run(t, "--config-net", "--", "true")
			mustSucceed(t, "gopasta -- true", r)
			if r.Stderr != "" {
				t.Errorf("spawn mode: got stderr %q, want nothing", r.Stderr)
			}
			r = e.run(t, "-d", "--config-net", "--", "true")
			mustSucceed(t, "gopasta -d -- true", r)
			if !strings.Contains(r.Stderr, "namespace interface: ") {
				t.Errorf("spawn mode with -d: got stderr %q, want the summary", r.Stderr)
			}
		})
	}
}
