package e2e

// RootlessKit v2 (built by .ci/run with `go install`) drives gopasta as its
// pasta network driver, gopasta being `pasta` on PATH (a symbolic link in a
// directory put first): `--net=pasta --port-driver=implicit`, so gopasta's
// own auto forwarding publishes the child's ports, plus
// --disable-host-loopback and --detach-netns. The child is the e2e peer in
// agent mode, as a user with subordinate id ranges (RootlessKit maps
// them).

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// RootlessKit's pasta driver gives the child these (its defaults).
const (
	rkGateway = "10.0.2.2"
	rkChild   = "10.0.2.100"
)

// autoWithin bounds how soon a port the child opens is forwarded (gopasta
// scans once a second, as pasta does).
const autoWithin = 5 * time.Second

func TestRootlessKit(t *testing.T) {
	rk := requireTool(t, "rootlesskit", "RootlessKit v2: go install github.com/rootless-containers/rootlesskit/v2/cmd/rootlesskit@v2.3.6")
	u := subidUser(t)
	e := newEnv(t, u, hostSetup{peers: true})
	if r := e.runArgv(t, rk, "--version"); r.Code == 0 {
		t.Logf("%s", strings.TrimSpace(r.Stdout))
	}
	pathDir := nstest.TempDir(t)
	if err := os.Symlink(e.bin, filepath.Join(pathDir, "pasta")); err != nil {
		t.Fatal(err)
	}
	loPort := e.serveTCP(t, "127.0.0.1:0", "") // reached through the gateway
	hostPort := e.serveTCP(t, peer4+":0", "")  // reached at a host address
	udpPort := e.serveUDP(t, peer4+":0")

	for _, tc := range []struct {
		name   string
		flags  []string
		detach bool // the child joins the detached namespace itself
		noLo   bool // --disable-host-loopback
	}{
		{name: "implicit", flags: nil},
		{name: "disable-host-loopback", flags: []string{"--disable-host-loopback"}, noLo: true},
		{name: "detach-netns", flags: []string{"--detach-netns"}, detach: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := nstest.TempDir(t)
			stateDir := filepath.Join(userDir(t, u, top, "rk", 0o700), "state")
			a := &agent{dir: userDir(t, u, top, "agent", 0o755)}
			child := agentArgv(e.self, a.dir)
			if tc.detach {
				// RootlessKit leaves the child in the host's network
				// namespace and tells it where the detached one is.
				child = append([]string{"sh", "-c", `exec nsenter --net="$ROOTLESSKIT_STATE_DIR/netns" -- "$@"`, "sh"}, child...)
			}
			argv := slices.Concat([]string{"env", "PATH=" + pathDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				rk, "--state-dir=" + stateDir, "--net=pasta", "--port-driver=implicit"}, tc.flags, child)
			start := time.Now()
			a.proc = e.h.Start(u, argv...)
			t.Cleanup(a.exit)
			a.waitReady(t, 30*time.Second)
			t.Logf("rootlesskit to the child's agent ready: %v", time.Since(start))

			addrs := a.must(t, 10*time.Second, "addrs")
			if !strings.Contains(addrs, rkChild+"/24") {
				t.Errorf("child's addresses: got %q, want %s/24 (RootlessKit's --address, configured by gopasta)", addrs, rkChild)
			}
			// Child to host: a host address always; the host's loopback
			// through the gateway unless --disable-host-loopback.
			a.must(t, 20*time.Second, "put", fmt.Sprintf("%s:%d", peer4, hostPort), "100000", "3")
			a.must(t, 20*time.Second, "udp", fmt.Sprintf("%s:%d", peer4, udpPort))
			gw := fmt.Sprintf("%s:%d", rkGateway, loPort)
			if tc.noLo {
				if out, err := a.do(10*time.Second, "waitrefused", gw, "3000"); err != nil {
					t.Errorf("with --disable-host-loopback: child -> %s (the host's loopback): got %v (%s), want no connection", gw, err, out)
				}
			} else {
				a.must(t, 20*time.Second, "put", gw, "100000", "4")
			}

			// Host to child: a port the child opens is forwarded by
			// gopasta's auto scan (--port-driver=implicit); below the
			// ephemeral range, which auto leaves to clients.
			port := e.staticPort(t)
			a.serve(t, port)
			opened := time.Now()
			e.waitServing(t, nil, addrPort("127.0.0.1", port), autoWithin)
			t.Logf("child's port %d reachable from the host after %v", port, time.Since(opened))
			if err := e.get(netip.Addr{}, addrPort("127.0.0.1", port), 1<<20, 5); err != nil {
				t.Errorf("host -> child's port %d: %v", port, err)
			}
			if err := e.put(netip.MustParseAddr(peer4), addrPort(nstest.HostAddr4, port), 1<<20, 6); err != nil {
				t.Errorf("host (from %s) -> %s:%d, the child's port: %v", peer4, nstest.HostAddr4, port, err)
			}

			gps := gopastaProcs(t, u.UID, e.bin)
			if len(gps) != 1 {
				t.Errorf("gopasta processes of %s: got %v, want one (RootlessKit's pasta)", u.Name, gps)
			}
			a.exit()
			if _, ok := a.proc.Wait(20 * time.Second); !ok {
				t.Fatalf("rootlesskit: got still running 20s after its child exited, want it ended")
			}
			waitNoGopasta(t, u.UID, e.bin, 5*time.Second)
		})
	}
}
