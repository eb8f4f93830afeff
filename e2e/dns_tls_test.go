package e2e

// DNS over TLS (and the other protocols of port 853) takes the same way as
// plain DNS: to the resolver behind --dns-forward's address, or behind the
// gateway when that stands for a loopback resolver.

import (
	"testing"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestDNSOverTLSForward: TCP and UDP to port 853 of --dns-forward's
// address (both families), and of the gateway when the host's resolver is
// on loopback (systemd-resolved's 127.0.0.53), reach the host's resolver
// on port 853, as port 53 does (passt becf81a). Servers listen on port 853
// of the resolvers' addresses only: without the redirection the namespace
// reaches the forward address itself, where nothing answers, or host
// 127.0.0.1, where nothing listens on 853 in the second case.
func TestDNSOverTLSForward(t *testing.T) {
	tests := []struct {
		name       string
		resolvConf string
		resolvers  []string // host addresses of the port 853 servers
		args       []string
		dsts       []string // what the namespace connects to
	}{
		{
			name:       "dns-forward",
			resolvConf: "nameserver 127.0.0.1\nnameserver ::1\n",
			resolvers:  []string{"127.0.0.1:853", "[::1]:853"},
			args:       []string{"--config-net", "--dns-forward", "192.0.2.53", "--dns-forward", "2001:db8::53"},
			dsts:       []string{"192.0.2.53:853", "[2001:db8::53]:853"},
		},
		{
			name:       "gateway-to-loopback-resolver",
			resolvConf: "nameserver 127.0.0.53\n",
			resolvers:  []string{"127.0.0.53:853"},
			args:       []string{"--config-net"},
			dsts:       []string{"192.0.2.254:853"},
		},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, u, hostSetup{})
					e.h.SetResolvConf(tc.resolvConf)
					for _, a := range tc.resolvers {
						e.serveTCP(t, a, "")
						e.serveUDP(t, a)
					}
					var cmds []string
					for i, d := range tc.dsts {
						cmds = append(cmds, "put "+d+" 4096 "+string(rune('1'+i)), "udp "+d+" 3")
					}
					r := e.run(t, append(append([]string{}, tc.args...), append([]string{"--"}, e.peer(cmds...)...)...)...)
					mustSucceed(t, "TCP and UDP to port 853 through gopasta", r)
					wantDone(t, r.Stdout, cmds...)
				})
			}
		})
	}
}
