package e2e

// Port forwarding rules as pasta 2026 reads them: ports with auto, auto
// and the ephemeral range, "*" as an address. As root and as uid 65534,
// like the other forwarding tests.

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// testEphemeral is the host namespace's ip_local_port_range in these
// tests, which auto without ports leaves out.
const testEphemeral = "40000 49999"

// refused reports whether a TCP connection from host loopback to port is
// refused (nothing listens on the host side); an error says it was not.
func (e *env) refused(port int) error {
	c, err := e.dial("tcp", netip.Addr{}, addrPort("127.0.0.1", port))
	if err != nil {
		return nil
	}
	c.Close()
	return fmt.Errorf("host port %d accepts a connection", port)
}

// stillRefused checks that port stays refused for a while: at least one
// auto scan (every second) has gone by.
func (e *env) stillRefused(t *testing.T, port int, why string) {
	t.Helper()
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := e.refused(port); err != nil {
			t.Fatalf("%s: %v, want it refused", why, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestForwardAutoPorts: "-t 18100-18110,auto" forwards a port of the set
// while, and only while, the namespace listens on it, and never a port
// outside the set (pasta 4e09ddf: "auto" makes the value's ports auto).
func TestForwardAutoPorts(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const in, out = 18105, 18200
			ag := e.startAgent(t, "--config-net", "-t", "18100-18110,auto", "-u", "none", "-T", "none", "-U", "none")
			e.stillRefused(t, in, "port of the set, nothing listening in the namespace")

			ag.must(t, 10*time.Second, "listen", fmt.Sprintf("[::]:%d", in))
			ag.must(t, 10*time.Second, "listen", fmt.Sprintf("[::]:%d", out))
			e.waitServing(t, ag.proc, addrPort("127.0.0.1", in), 5*time.Second)
			if err := e.put(netip.MustParseAddr(peer4), addrPort(ns4, in), 100, 4); err != nil {
				t.Errorf("port of the set over the TAP: %v", err)
			}
			e.stillRefused(t, out, "port outside the set, listening in the namespace")

			ag.must(t, 10*time.Second, "unlisten", fmt.Sprintf("[::]:%d", in))
			if err := nstest.WaitFor(5*time.Second, func() error { return e.refused(in) }); err != nil {
				t.Errorf("port of the set, no longer listening in the namespace: %v 5s later, want it refused", err)
			}
		})
	}
}

// TestForwardAutoEphemeral: auto without ports (the default) forwards
// what the namespace listens on but the host's ephemeral ports
// (ip_local_port_range), which belong to clients.
func TestForwardAutoEphemeral(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			if err := e.h.Sysctl("net.ipv4.ip_local_port_range", testEphemeral); err != nil {
				t.Fatal(err)
			}
			const port, eph = 18124, 45000
			ag := e.startAgent(t, "--config-net", "-u", "none", "-T", "none", "-U", "none")
			for _, p := range []int{port, eph} {
				ag.must(t, 10*time.Second, "listen", "[::]:"+strconv.Itoa(p))
			}
			e.waitServing(t, ag.proc, addrPort("127.0.0.1", port), 5*time.Second)
			e.stillRefused(t, eph, "ephemeral port listening in the namespace")
			// The same port named with auto is the user's choice.
			ag2 := e.startAgent(t, "--config-net", "-t", strconv.Itoa(eph+1)+",auto", "-u", "none", "-T", "none", "-U", "none")
			ag2.must(t, 10*time.Second, "listen", "[::]:"+strconv.Itoa(eph+1))
			e.waitServing(t, ag2.proc, addrPort("127.0.0.1", eph+1), 5*time.Second)
		})
	}
}

// TestForwardAnyAddress: "*" as the address of a port spec is any address
// of both families, as no address is (pasta 296d7e3): -t, -u and -T on the
// command line, and -t through pesto.
func TestForwardAnyAddress(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			c := newCtl(t, e)
			const tp, up, tT, added = 18401, 18402, 18403, 18404
			hostDir := nstest.TempDir(t)
			for _, a := range []string{"127.0.0.1", "[::1]"} {
				e.serveTCP(t, fmt.Sprintf("%s:%d", a, tT), hostDir)
			}
			ag := e.startAgent(t, "--config-net", "-c", c.sock, "-t", "*/"+strconv.Itoa(tp), "-u", "*/"+strconv.Itoa(up),
				"-T", "*/"+strconv.Itoa(tT), "-U", "none")
			ag.serve(t, tp)
			ag.serve(t, added)
			var udpAddrs []string
			for _, a := range []string{ns4, "127.0.0.1", "[" + ns6 + "]", "[::1]"} {
				udpAddrs = append(udpAddrs, fmt.Sprintf("%s:%d", a, up))
			}
			ag.must(t, 10*time.Second, append([]string{"udpecho"}, udpAddrs...)...)

			c.wantListing(t, "at start", []string{
				fmt.Sprintf("TCP [*]:%d  =>  %d ", tp, tp),
				fmt.Sprintf("UDP [*]:%d  =>  %d ", up, up),
			}, []string{fmt.Sprintf("TCP [*]%%lo:%d  =>  %d ", tT, tT)})
			reachable(t, e, "-t */PORT", tp, paths()...)
			for _, p := range paths() {
				if err := e.udpEcho(p.local, addrPort(p.dst, up)); err != nil {
					t.Errorf("-u */PORT: %s: %v", p.name, err)
				}
			}
			for _, a := range []string{"127.0.0.1", "[::1]"} {
				dst := fmt.Sprintf("%s:%d", a, tT)
				if _, err := ag.do(15*time.Second, "put", dst, "2048", "5"); err != nil {
					t.Errorf("-T */PORT: namespace to %s: %v", dst, err)
				}
			}

			c.must(t, "-A", "-t", "*/"+strconv.Itoa(added))
			reachable(t, e, "pesto -A -t */PORT", added, paths()...)
		})
	}
}
