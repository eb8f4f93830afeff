package e2e

// --freebind on UDP flow sockets: the sockets of flows, and not only the
// forwarded ports' listeners, bind addresses the host does not have
// configured.

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// anyIP6 is a prefix the host namespace owns by a local route alone
// (`ip route add local PREFIX dev lo`, "AnyIP"): datagrams to any address
// of it are the host's, but bind(2) takes IPv6 addresses that an interface
// has and nothing else, unless the socket has IP_FREEBIND.
const anyIP6 = "2001:db8:5::"

// TestFreebindUDPFlows: with --freebind, UDP flow sockets bind with
// IP_FREEBIND as the listeners do (passt 2c6590d). A host peer's datagram
// to an address of a local route reaches a -u port's listener bound to
// any address, and the peer's own reply socket binds that address: without
// IP_FREEBIND, bind(2) refuses it and the datagram goes nowhere. A flow the
// namespace opens binds -o's address, which is such an address too.
func TestFreebindUDPFlows(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			e.hostIP(t, "-6", "route", "add", "local", anyIP6+"/64", "dev", "lo")
			var mu sync.Mutex
			var sources []netip.Addr
			srv := e.serveUDPWith(t, "["+peer6+"]:0", func(pc net.PacketConn) {
				buf := make([]byte, 65536)
				for {
					n, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					mu.Lock()
					sources = append(sources, from.(*net.UDPAddr).AddrPort().Addr())
					mu.Unlock()
					pc.WriteTo(buf[:n], from)
				}
			})
			const p = 18271
			out := anyIP6 + "9"
			ag := e.startAgent(t, "--config-net", "--freebind", "-o", out,
				"-t", "none", "-u", strconv.Itoa(p), "-T", "none", "-U", "none")
			ag.serve(t, p)

			dst := addrPort(anyIP6+"7", p)
			if err := e.udpEcho(netip.MustParseAddr(peer6), dst); err != nil {
				t.Errorf("host peer to %v (a -u port on an address of a local route): %v", dst, err)
			}

			if _, err := ag.do(30*time.Second, "udp", fmt.Sprintf("[%s]:%d", peer6, srv), "3"); err != nil {
				t.Errorf("namespace to [%s]:%d with -o %s: %v", peer6, srv, out, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Contains(sources, netip.MustParseAddr(out)) {
				t.Errorf("sources the host server saw: got %v, want %s (-o)", sources, out)
			}
		})
	}
}
