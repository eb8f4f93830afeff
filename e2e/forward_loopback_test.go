package e2e

// Spliced forwarding keeps the loopback address (passt 653705c, fdbb4ef,
// 26f2130): 127.0.0.6 on one side is 127.0.0.6 on the other.

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestForwardLoopbackAddresses: with -T and -U, a namespace process
// reaches a host server that listens on 127.0.0.6 only through the
// namespace's own 127.0.0.6 (TCP 2 KiB and 1 MiB both ways, a UDP echo),
// its 127.0.0.1 does not reach that server, and the namespace's own
// address is not forwarded at all (the listeners take loopback only); with
// -t, -u and --host-lo-to-ns-lo, a host client of 127.0.0.6 reaches a
// namespace server that listens on 127.0.0.6 only (TCP and UDP).
func TestForwardLoopbackAddresses(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const out, in = 18311, 18312
			lo6 := "127.0.0.6"
			dst := fmt.Sprintf("%s:%d", lo6, out)
			e.serveTCP(t, dst, "")
			e.serveUDP(t, dst)
			ag := e.startAgent(t, "--config-net", "--host-lo-to-ns-lo",
				"-t", strconv.Itoa(in), "-u", strconv.Itoa(in), "-T", strconv.Itoa(out), "-U", strconv.Itoa(out))

			// Namespace to host.
			for _, n := range []int64{2 << 10, 1 << 20} {
				for _, op := range []string{"put", "get"} {
					if _, err := ag.do(30*time.Second, op, dst, strconv.FormatInt(n, 10), strconv.FormatInt(n+5, 10)); err != nil {
						t.Errorf("-T: namespace %s %d bytes through %s: %v", op, n, dst, err)
					}
				}
			}
			if _, err := ag.do(15*time.Second, "udp", dst); err != nil {
				t.Errorf("-U: namespace UDP echo through %s: %v", dst, err)
			}
			if _, err := ag.do(15*time.Second, "put", fmt.Sprintf("127.0.0.1:%d", out), "2048", "3"); err == nil {
				t.Errorf("-T: namespace 127.0.0.1:%d reached the host's server on %s only, want it not to (its address kept)", out, lo6)
			}
			own := netip.AddrPortFrom(netip.MustParseAddr(ns4), out).String()
			if _, err := ag.do(10*time.Second, "waitrefused", own, "2000"); err != nil {
				t.Errorf("-T: the namespace's own address %s: %v; want it refused (only loopback is forwarded)", own, err)
			}

			// Host to namespace, --host-lo-to-ns-lo.
			nsDst := fmt.Sprintf("%s:%d", lo6, in)
			ag.must(t, 10*time.Second, "listen", nsDst)
			ag.must(t, 10*time.Second, "udpecho", nsDst)
			to := netip.MustParseAddrPort(nsDst)
			e.waitServing(t, ag.proc, to, 10*time.Second)
			if err := e.get(netip.Addr{}, to, 1<<20, 41); err != nil {
				t.Errorf("-t --host-lo-to-ns-lo: host get 1 MiB through %s: %v", to, err)
			}
			if err := e.udpEcho(netip.Addr{}, to); err != nil {
				t.Errorf("-u --host-lo-to-ns-lo: host UDP echo through %s: %v", to, err)
			}
		})
	}
}
