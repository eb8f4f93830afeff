package main

import (
	"net/netip"
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

// startResolver runs the test resolver on UDP and TCP port 53 of each
// address inside the host namespace (the test process is root, so port 53
// is fine whatever identity gopasta runs as: this is the "host resolver").
func startResolver(t *testing.T, h *nstest.Host, addrs ...string) *dnstest.Server {
	t.Helper()
	s := &dnstest.Server{Name: dnsName, A: netip.MustParseAddr(dnsA), AAAA: netip.MustParseAddr(dnsAAAA)}
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

// TestIntegrationEngineDNS: DNS from the namespace reaches the resolver
// the host's resolv.conf names, on host loopback, through --dns-forward's
// address and, by default, through the gateway.
func TestIntegrationEngineDNS(t *testing.T) {
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
					e := newEngineEnv(t, u, nstest.HostOptions{})
					e.h.SetResolvConf(tc.resolvConf)
					srv := startResolver(t, e.h, tc.resolvers...)
					var script []string
					for _, s := range tc.servers {
						script = append(script, shellJoin(e.helperCmd("dns", s, dnsName, dnsA, dnsAAAA)))
					}
					if tc.nslookup != "" {
						script = append(script, "busybox nslookup "+dnsName+" "+tc.nslookup)
					}
					args := append(append([]string{}, tc.args...), "--", "sh", "-c", strings.Join(script, " && "))
					r := e.run(t, args...)
					mustSucceed(t, "DNS queries through gopasta", r)
					for _, s := range tc.servers {
						if n := strings.Count(r.Stdout, " "+s+" ok "); n != 3 {
							t.Errorf("answers via %s: got %d, want 3 (UDP A, UDP AAAA, TCP A)\n%s", s, n, r.Stdout)
						}
					}
					if tc.nslookup != "" && !strings.Contains(r.Stdout, dnsA) {
						t.Errorf("busybox nslookup: got %q, want the address %s", r.Stdout, dnsA)
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

// shellJoin quotes argv for sh -c (single quotes; the arguments here never
// contain one).
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + a + "'"
	}
	return strings.Join(q, " ")
}
