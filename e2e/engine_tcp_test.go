package e2e

// The engine's TCP translation end to end: checked transfers from the
// namespace to host peers, and connection churn.

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// tcpSizes are the transfer sizes of the main TCP test: a couple of
// segments, and enough for windows, scaling and back-pressure to matter.
var tcpSizes = []int64{2048, 10 << 20}

// TestEngineTCP: uploads and downloads from the namespace to
// the host's own addresses and, through the gateway, to host loopback,
// IPv4 and IPv6, including a link-local IPv6 gateway reached with %eth0;
// every byte checked at the receiving end.
func TestEngineTCP(t *testing.T) {
	tests := []struct {
		name string
		// linkLocalGW6: the host's IPv6 default route is via fe80::1.
		linkLocalGW6 bool
		env          []string
		args         []string
		targets      []string // with %d for the port
	}{
		{
			name: "host-and-gateway",
			// Addresses of its own, so the host's are not shadowed.
			args:    []string{"--config-net", "-a", "192.0.2.2", "-a", "2001:db8::2/64"},
			targets: []string{"192.0.2.1:%d", "192.0.2.254:%d", "[2001:db8::1]:%d", "[2001:db8::fe]:%d"},
		},
		{
			// The same without TAP offloads: plain frames of at most
			// the MTU, checksums computed both ways.
			name:    "no-offload",
			env:     []string{"GOPASTA_OFFLOAD=0"},
			args:    []string{"--config-net", "-m", "1500", "-a", "192.0.2.2", "-a", "2001:db8::2/64"},
			targets: []string{"192.0.2.1:%d", "[2001:db8::fe]:%d"},
		},
		{
			name:    "mtu1500-offload",
			args:    []string{"--config-net", "-m", "1500", "-a", "192.0.2.2", "-a", "2001:db8::2/64"},
			targets: []string{"192.0.2.1:%d", "[2001:db8::fe]:%d"},
		},
		{
			name:         "link-local-gateway",
			linkLocalGW6: true,
			args:         []string{"--config-net"},
			targets:      []string{"[fe80::1%%eth0]:%d"},
		},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, u, hostSetup{linkLocalGW6: tc.linkLocalGW6, ping: true})
					e.gopastaEnv = tc.env
					port := e.serveTCP(t, ":0", "")
					var cmds []string
					for i, tg := range tc.targets {
						tg = fmt.Sprintf(tg, port)
						for j, n := range tcpSizes {
							seed := i*100 + j
							cmds = append(cmds, fmt.Sprintf("put %s %d %d", tg, n, seed), fmt.Sprintf("get %s %d %d", tg, n, seed+50))
						}
					}
					r := e.run(t, slices.Concat(tc.args, []string{"--"}, e.peer(cmds...))...)
					mustSucceed(t, "TCP transfers through gopasta", r)
					wantDone(t, r.Stdout, cmds...)
					t.Logf("transfers:\n%s", r.Stdout)
				})
			}
		})
	}
}

// TestEngineTCPGiB: one GiB each way through the gateway to
// host loopback, intact. Root only (the path is the same for uid 65534)
// and not with -short.
func TestEngineTCPGiB(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the 1 GiB transfer in -short mode")
	}
	e := newEnv(t, nstest.RootUser, hostSetup{ping: true})
	port := e.serveTCP(t, ":0", "")
	target := fmt.Sprintf("192.0.2.254:%d", port)
	cmds := []string{fmt.Sprintf("put %s %d 1", target, 1<<30), fmt.Sprintf("get %s %d 2", target, 1<<30)}
	start := time.Now()
	r := e.run(t, append([]string{"--config-net", "--"}, e.peer(cmds...)...)...)
	mustSucceed(t, "1 GiB TCP transfers through gopasta", r)
	wantDone(t, r.Stdout, cmds...)
	t.Logf("1 GiB up and down in %v:\n%s", time.Since(start).Round(time.Millisecond), r.Stdout)
}

// churnConns is how many short connections the churn test makes.
const churnConns = 2000

// statsTCP matches --stats lines and captures the live TCP flow count.
var statsTCP = regexp.MustCompile(`stats .*\btcp=(\d+)`)

// TestEngineTCPChurn: 2000 short connections in a row, then
// gopasta holds no more file descriptors than before them, and (from
// --stats) no TCP flow.
func TestEngineTCPChurn(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{ping: true})
			port := e.serveTCP(t, ":0", "")
			pidFile := nstest.TempDir(t) + "/gopasta.pid"
			ag := e.startAgent(t, "--config-net", "--stats", "1", "-P", pidFile)
			p := ag.proc

			pid := waitPIDFile(t, p, pidFile)
			before, err := countFDs(pid)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := ag.do(60*time.Second, "churn", fmt.Sprintf("192.0.2.254:%d", port), strconv.Itoa(churnConns)); err != nil {
				stdout, stderr := p.Output()
				t.Fatalf("%d connections: %v\nstdout: %s\nstderr: %s", churnConns, err, stdout, stderr)
			}
			t.Logf("%d connections in %v", churnConns, time.Since(start).Round(time.Millisecond))
			// Only --stats lines logged from now on count.
			_, stderr := p.Output()
			mark := len(stderr)

			// Flows close once both sides are done; give them a few
			// seconds (and --stats a tick) to go.
			var after int
			var flows string
			err = nstest.WaitFor(15*time.Second, func() error {
				after, err = countFDs(pid)
				if err != nil {
					return nstest.Stop(err)
				}
				_, stderr := p.Output()
				m := statsTCP.FindAllStringSubmatch(stderr[mark:], -1)
				flows = "no --stats line since the churn yet"
				if len(m) > 0 {
					flows = m[len(m)-1][1]
				}
				if after > before || flows != "0" {
					return fmt.Errorf("gopasta fds: got %d, want at most %d as before the churn; live TCP flows (--stats): got %s, want 0", after, before, flows)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			ag.exit()
			r, ok := p.Wait(20 * time.Second)
			if !ok {
				t.Fatalf("gopasta: got no exit within 20s of the agent's end")
			}
			checkNoPanic(t, r)
			mustSucceed(t, "churn through gopasta", r)
		})
	}
}

// countFDs counts the open file descriptors of pid.
func countFDs(pid int) (int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		if err, ok := err.(*os.PathError); ok && err.Err == syscall.ENOENT {
			return 0, fmt.Errorf("gopasta (pid %d) is gone", pid)
		}
		return 0, err
	}
	return len(ents), nil
}
