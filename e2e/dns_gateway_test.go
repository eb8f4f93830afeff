package e2e

// The gateway is the host's resolver too (the home router case): gopasta
// maps the gateway to host loopback, but DNS to it must still reach the
// resolver at the gateway's address, unless --dns-forward gives the
// namespace another address for it.

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/dnstest"
	"github.com/gopasta/gopasta/internal/nstest"
)

// What a resolver on host loopback answers, to tell it from the one at the
// gateway's address.
const (
	loDNSA    = "198.51.100.99"
	loDNSAAAA = "2001:db8:53::99"
)

// TestDNSGatewayResolver: the host's resolv.conf names its gateway, where a
// resolver listens (UDP and TCP, IPv4 and IPv6), and another resolver
// listens on host loopback, where the gateway maps to. Without
// --dns-forward, DNS to the gateway reaches the gateway's resolver while
// other traffic to the gateway still reaches host loopback; with it, DNS to
// the forward address reaches the gateway's resolver and DNS to the
// gateway reaches host loopback, as any traffic to it does.
func TestDNSGatewayResolver(t *testing.T) {
	gw4, gw6 := nstest.HostGW4, nstest.HostGW6
	const tcpPort = 18401
	tests := []struct {
		name string
		args []string
		// cmds: the peer's checks; gwQueries: how many of the dns
		// commands reach the gateway's resolver, loQueries the
		// loopback one.
		cmds                 []string
		gwQueries, loQueries int
	}{
		{
			name: "gateway",
			cmds: []string{
				dnsCmd(gw4 + ":53"), dnsCmd("[" + gw6 + "]:53"),
				fmt.Sprintf("put %s:%d 4096 1", gw4, tcpPort),
				fmt.Sprintf("put [%s]:%d 4096 2", gw6, tcpPort),
			},
			gwQueries: 2,
		},
		{
			name: "dns-forward",
			args: []string{"--dns-forward", "192.0.2.53", "--dns-forward", "2001:db8::53"},
			cmds: []string{
				dnsCmd("192.0.2.53:53"), dnsCmd("[2001:db8::53]:53"),
				loDNSCmd(gw4 + ":53"), loDNSCmd("[" + gw6 + "]:53"),
			},
			gwQueries: 2, loQueries: 2,
		},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, u, hostSetup{})
					// The gateway's addresses are the host's own here, so
					// that a resolver can listen on them.
					for _, a := range []string{gw4 + "/32", gw6 + "/128"} {
						args := []string{"ip", "-n", e.h.Name(), "addr", "add", a, "dev", "lo"}
						if strings.Contains(a, ":") {
							args = append(args, "nodad")
						}
						if r := nstest.Run(t, nstest.RootUser, args...); r.Code != 0 {
							t.Fatalf("%q: %s", args, r)
						}
					}
					e.h.SetResolvConf(fmt.Sprintf("nameserver %s\nnameserver %s\n", gw4, gw6))
					gw := startResolver(t, e.h, gw4, gw6)
					lo := serveResolver(t, e.h, &dnstest.Server{Name: dnsName,
						A: netip.MustParseAddr(loDNSA), AAAA: netip.MustParseAddr(loDNSAAAA)}, "127.0.0.1", "::1")
					for _, a := range []string{"127.0.0.1", "[::1]"} {
						e.serveTCP(t, fmt.Sprintf("%s:%d", a, tcpPort), "")
					}
					args := slices.Concat([]string{"--config-net"}, tc.args, []string{"--"}, e.peer(tc.cmds...))
					r := e.run(t, args...)
					mustSucceed(t, "queries through gopasta", r)
					wantDone(t, r.Stdout, tc.cmds...)
					// Each dns command: UDP A, UDP AAAA (either may be
					// retried), TCP A.
					for _, c := range []struct {
						name     string
						s        *dnstest.Server
						commands int
					}{{"the gateway's", gw, tc.gwQueries}, {"host loopback's", lo, tc.loQueries}} {
						udp, tcp := c.s.QueriesUDP(), c.s.QueriesTCP()
						if udp < uint64(2*c.commands) || tcp != uint64(c.commands) || (c.commands == 0 && udp != 0) {
							t.Errorf("%s resolver: got %d UDP and %d TCP queries, want %d (or more) and %d",
								c.name, udp, tcp, 2*c.commands, c.commands)
						}
					}
				})
			}
		})
	}
}

// loDNSCmd is the peer command that queries server and wants the answers
// of the resolver on host loopback.
func loDNSCmd(server string) string {
	return "dns " + server + " " + dnsName + " " + loDNSA + " " + loDNSAAAA
}
