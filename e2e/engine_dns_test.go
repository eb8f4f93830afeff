package e2e

// The engine's DNS forwarding and the namespace's autoconfiguration (DHCP,
// DHCPv6, router advertisements) end to end, checked by DNS queries to the
// resolver the namespace learnt about.

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/dnstest"
	"github.com/gopasta/gopasta/internal/nstest"
)

// The name the test resolver answers for, and its answers.
const (
	dnsName = "gopasta.test"
	dnsA    = "198.51.100.7"
	dnsAAAA = "2001:db8:53::7"
)

// dnsCmd is the peer command that queries server for dnsName and wants
// dnsA or dnsAAAA back.
func dnsCmd(server string) string {
	return "dns " + server + " " + dnsName + " " + dnsA + " " + dnsAAAA
}

// startResolver runs the test resolver on UDP and TCP port 53 of each
// address inside the host namespace (the test process is root, so port 53
// is fine whatever identity gopasta runs as: this is the "host resolver").
func startResolver(t *testing.T, h *nstest.Host, addrs ...string) *dnstest.Server {
	t.Helper()
	return serveResolver(t, h, &dnstest.Server{Name: dnsName, A: netip.MustParseAddr(dnsA), AAAA: netip.MustParseAddr(dnsAAAA)}, addrs...)
}

// serveResolver is startResolver with the caller's server (its answers).
func serveResolver(t *testing.T, h *nstest.Host, s *dnstest.Server, addrs ...string) *dnstest.Server {
	t.Helper()
	for _, a := range addrs {
		hp := a + ":53"
		n4 := "4"
		if strings.Contains(a, ":") {
			hp, n4 = "["+a+"]:53", "6"
		}
		pc, err := h.ListenPacket("udp"+n4, hp)
		if err != nil {
			t.Fatalf("resolver on udp %s: %v", hp, err)
		}
		l, err := h.Listen("tcp"+n4, hp)
		if err != nil {
			t.Fatalf("resolver on tcp %s: %v", hp, err)
		}
		s.ServeUDP(pc)
		s.ServeTCP(l)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestEngineDNS: DNS from the namespace reaches the resolver
// the host's resolv.conf names, on host loopback, through --dns-forward's
// address and, by default, through the gateway.
func TestEngineDNS(t *testing.T) {
	tests := []struct {
		name string
		// resolvConf is the host's; resolvers are where the test
		// resolver listens (nothing listens anywhere else).
		resolvConf string
		resolvers  []string
		args       []string
		servers    []string // what the namespace queries
		nslookup   string   // a server for busybox nslookup, if any
	}{
		{
			name:       "dns-forward",
			resolvConf: "nameserver 127.0.0.1\nnameserver ::1\n",
			resolvers:  []string{"127.0.0.1", "::1"},
			args:       []string{"--config-net", "--dns-forward", "192.0.2.53", "--dns-forward", "2001:db8::53"},
			servers:    []string{"192.0.2.53:53", "[2001:db8::53]:53"},
			nslookup:   "192.0.2.53",
		},
		{
			// systemd-resolved's address: only a DNS-aware mapping gets
			// there (the gateway maps to 127.0.0.1, where nothing
			// listens), and the namespace is told to use the gateway.
			name:       "gateway-to-loopback-resolver",
			resolvConf: "search example.test\nnameserver 127.0.0.53\n",
			resolvers:  []string{"127.0.0.53"},
			args:       []string{"--config-net"},
			servers:    []string{"192.0.2.254:53"},
			nslookup:   "192.0.2.254",
		},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, u, hostSetup{ping: true})
					e.h.SetResolvConf(tc.resolvConf)
					srv := startResolver(t, e.h, tc.resolvers...)
					var cmds []string
					for _, s := range tc.servers {
						cmds = append(cmds, dnsCmd(s))
					}
					// nslookup's output follows a marker, apart from the
					// peer's (which names the addresses too).
					script := shellJoin(e.peer(cmds...))
					if tc.nslookup != "" {
						script += " && echo @@nslookup && busybox nslookup " + dnsName + " " + tc.nslookup
					}
					args := append(append([]string{}, tc.args...), "--", "sh", "-c", script)
					r := e.run(t, args...)
					mustSucceed(t, "DNS queries through gopasta", r)
					// Each command: UDP A, UDP AAAA, TCP A.
					wantDone(t, r.Stdout, cmds...)
					if _, ns, _ := strings.Cut(r.Stdout, "@@nslookup"); tc.nslookup != "" && !strings.Contains(ns, dnsA) {
						t.Errorf("busybox nslookup: got %q, want the address %s", ns, dnsA)
					}
					if got, want := srv.QueriesTCP(), uint64(len(tc.servers)); got < want {
						t.Errorf("resolver TCP queries: got %d, want at least %d", got, want)
					}
					if got, want := srv.QueriesUDP(), uint64(2*len(tc.servers)); got < want {
						t.Errorf("resolver UDP queries: got %d, want at least %d", got, want)
					}
				})
			}
		})
	}
}

// ourLL6 is gopasta's link-local address with the default MAC
// 9a:55:9a:55:9a:55 (modified EUI-64), the source of its router
// advertisements when the host's IPv6 gateway is not link-local.
const ourLL6 = "fe80::9855:9aff:fe55:9a55"

// udhcpcScript prints what udhcpc got and applies it with ip(8).
const udhcpcScript = `#!/bin/sh
echo "udhcpc $1 ip=$ip mask=$mask router=$router dns=$dns search=$search mtu=$mtu"
if [ "$1" = bound ]; then
	ip addr add "$ip/$mask" dev "$interface"
	ip route add default via "$router" dev "$interface"
fi
`

// dhclient6Script prints the DHCPv6 lease and applies the address.
const dhclient6Script = `#!/bin/sh
echo "dhclient6 $reason addr=$new_ip6_address/$new_ip6_prefixlen dns=$new_dhcp6_name_servers search=$new_dhcp6_domain_search"
if [ "$reason" = BOUND6 ]; then
	ip -6 addr add "$new_ip6_address/$new_ip6_prefixlen" dev "$interface" nodad
fi
`

// waitLL waits (up to 5 s) until eth0's link-local address has passed
// duplicate address detection: DHCPv6 clients and router solicitations
// need it as their source.
const waitLL = `for i in $(seq 50); do ip -6 addr show dev eth0 scope link | grep -q . && ! ip -6 addr show dev eth0 | grep -q tentative && break; sleep 0.1; done; `

// fastIPv6 skips what only slows tests down: duplicate address detection
// (nothing else is on this link) and the random delay before the first
// router solicitation.
const fastIPv6 = "sysctl -q -w net.ipv6.conf.eth0.accept_dad=0 net.ipv6.conf.eth0.router_solicitation_delay=0 && "

// TestEngineAutoconf: a namespace started without --config-net
// configures itself from gopasta's DHCP, DHCPv6 and router advertisements
// with ordinary clients, and the configuration it gets works: DNS queries
// to the server it was handed reach the host's loopback resolver.
func TestEngineAutoconf(t *testing.T) {
	tests := []struct {
		name   string
		need   string   // a client that must be installed
		args   []string // gopasta options besides the DNS ones
		script func(e *env, dir string) string
		check  func(t *testing.T, out string)
	}{
		{
			name: "dhcp",
			script: func(e *env, dir string) string {
				return "ip link set eth0 up && busybox udhcpc -i eth0 -f -q -n -t 5 -T 1 -s " + dir + "/udhcpc.sh && " +
					shellJoin(e.peer(dnsCmd("192.0.2.254:53"))) + " && ip -j -4 route"
			},
			check: func(t *testing.T, out string) {
				want := "udhcpc bound ip=192.0.2.1 mask=24 router=192.0.2.254 dns=192.0.2.254 search=example.test mtu=65520"
				if !strings.Contains(out, want) {
					t.Errorf("udhcpc lease: got %q, want a line %q", out, want)
				}
			},
		},
		{
			// -m 0 leaves the kernel's MTU (1500 on a new TAP), so the
			// lease names none that the client would apply.
			name: "dhcp with -m 0",
			args: []string{"-m", "0"},
			script: func(e *env, dir string) string {
				return "ip link set eth0 up && busybox udhcpc -i eth0 -f -q -n -t 5 -T 1 -s " + dir + "/udhcpc.sh && " +
					"echo link-mtu=$(cat /sys/class/net/eth0/mtu)"
			},
			check: func(t *testing.T, out string) {
				for _, want := range []string{"udhcpc bound ip=192.0.2.1 mask=24 router=192.0.2.254 dns=192.0.2.254 search=example.test mtu=\n", "link-mtu=1500"} {
					if !strings.Contains(out, want) {
						t.Errorf("udhcpc lease with -m 0: got %q, want %q in it", out, want)
					}
				}
			},
		},
		{
			name: "dhcpv6",
			need: "dhclient",
			script: func(e *env, dir string) string {
				return fastIPv6 + "ip link set eth0 up && " + waitLL +
					"dhclient -6 -1 -lf " + dir + "/leases6 -pf " + dir + "/dhclient6.pid -sf " + dir + "/dhclient6.sh eth0 && " +
					"ip -6 addr show dev eth0 && " +
					shellJoin(e.peer(dnsCmd("[2001:db8::fe]:53")))
			},
			check: func(t *testing.T, out string) {
				want := "dhclient6 BOUND6 addr=2001:db8::1/128 dns=2001:db8::fe search=example.test."
				if !strings.Contains(out, want) {
					t.Errorf("dhclient -6 lease: got %q, want a line %q", out, want)
				}
				if !strings.Contains(out, "inet6 2001:db8::1/128 scope global") {
					t.Errorf("eth0 after DHCPv6: got %q, want 2001:db8::1/128 on it", out)
				}
			},
		},
		{
			name: "slaac",
			script: func(e *env, dir string) string {
				return fastIPv6 + "sysctl -q -w net.ipv6.conf.eth0.accept_ra=2 && ip link set eth0 up && " +
					// Up to 10 s for the RA's prefix to become an address.
					"for i in $(seq 100); do ip -6 addr show dev eth0 scope global | grep -v tentative | grep -q 2001:db8: && break; sleep 0.1; done; " +
					shellJoin(e.peer(dnsCmd("[2001:db8::fe]:53"))) +
					" && echo @@ && ip -j -6 addr show dev eth0 && echo @@ && ip -j -6 route"
			},
			check: func(t *testing.T, out string) {
				parts := strings.Split(out, "@@")
				if len(parts) != 3 {
					t.Fatalf("output: got %q, want three sections", out)
				}
				links, err := nstest.ParseLinks(parts[1])
				if err != nil {
					t.Fatal(err)
				}
				prefix := netip.MustParsePrefix("2001:db8::/64")
				var got []string
				ok := false
				for _, l := range links {
					for _, a := range l.AddrInfo {
						if a.Scope != "global" {
							continue
						}
						got = append(got, a.Local)
						if ad, err := netip.ParseAddr(a.Local); err == nil && prefix.Contains(ad) && a.PrefixLen == 64 && !a.Tentative {
							ok = true
						}
					}
				}
				if !ok {
					t.Errorf("eth0 global IPv6 addresses: got %v, want one in %v/64 from SLAAC", got, prefix)
				}
				rs, err := nstest.ParseRoutes(parts[2])
				if err != nil {
					t.Fatal(err)
				}
				d, found := nstest.DefaultRoute(rs)
				if !found || d.Gateway != ourLL6 || d.Dev != "eth0" {
					t.Errorf("IPv6 default route: got %+v (found %v), want via %s dev eth0 from the RA", d, found, ourLL6)
				}
			},
		},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					if tc.need != "" {
						if _, err := findTool(tc.need); err != nil {
							t.Skipf("skipping: %s is not installed (apt-get install isc-dhcp-client); busybox has no DHCPv6 client", tc.need)
						}
					}
					e := newEnv(t, u, hostSetup{ping: true})
					// A loopback resolver: the namespace must be told
					// to use the gateways, which lead to it.
					e.h.SetResolvConf("search example.test\nnameserver 127.0.0.53\nnameserver ::1\n")
					startResolver(t, e.h, "127.0.0.53", "::1")
					dir := nstest.TempDir(t)
					for name, s := range map[string]string{"udhcpc.sh": udhcpcScript, "dhclient6.sh": dhclient6Script} {
						if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o755); err != nil {
							t.Fatal(err)
						}
					}
					// pasta mode announces resolvers and the search list
					// only when asked to.
					args := append([]string{"--dhcp-dns", "--dhcp-search"}, tc.args...)
					r := e.run(t, append(args, "--", "sh", "-c", tc.script(e, dir))...)
					mustSucceed(t, tc.name+" in a namespace without --config-net", r)
					tc.check(t, r.Stdout)
				})
			}
		})
	}
}
