package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// requireTCP skips while the engine has no TCP translator; once
// fwd/tcp.go exists the TCP tests must pass.
func requireTCP(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("fwd", "tcp.go")); err != nil {
		t.Skip("skipping: TCP translator not present (no fwd/tcp.go)")
	}
}

// transferServer serves the helper's transfer protocol on a wildcard
// (dual-stack) port of the host namespace, and returns the port. A
// connection starts with one line:
//
//	PUT N SEED   N bytes of stream SEED follow, then EOF; the server
//	             checks them and answers "OK N SHA256" or "ERR reason"
//	GET N SEED   the server sends N bytes of stream SEED and closes
//	ECHO         the server echoes until EOF, then closes
func transferServer(t *testing.T, h *nstest.Host) int {
	t.Helper()
	l, err := h.Listen("tcp", ":0")
	if err != nil {
		t.Fatalf("transfer server in the host namespace: %v", err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveTransfer(c.(*net.TCPConn))
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func serveTransfer(c *net.TCPConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(xferDeadline))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	f := strings.Fields(line)
	var n int64
	var seed uint64
	if len(f) == 3 {
		n, _ = strconv.ParseInt(f[1], 10, 64)
		seed, _ = strconv.ParseUint(f[2], 10, 64)
	}
	switch {
	case len(f) == 3 && f[0] == "PUT":
		got, h, err := verifyStream(br, n, seed)
		if err != nil {
			fmt.Fprintf(c, "ERR after %d bytes: %v\n", got, err)
			return
		}
		fmt.Fprintf(c, "OK %d %s\n", got, h)
	case len(f) == 3 && f[0] == "GET":
		_, _ = io.CopyN(c, streamOf(seed), n)
	case len(f) == 1 && f[0] == "ECHO":
		_, _ = io.Copy(c, br)
	default:
		fmt.Fprintf(c, "ERR bad request %q\n", line)
	}
}

// tcpSizes are the transfer sizes of the main TCP test: a couple of
// segments, and enough for windows, scaling and back-pressure to matter.
const tcpSizes = "2048,10485760"

// TestIntegrationEngineTCP: uploads and downloads from the namespace to
// the host's own addresses and, through the gateway, to host loopback,
// IPv4 and IPv6, including a link-local IPv6 gateway reached with %eth0;
// every byte checked at the receiving end.
func TestIntegrationEngineTCP(t *testing.T) {
	requireTCP(t)
	tests := []struct {
		name    string
		host    nstest.HostOptions
		env     []string
		args    []string
		targets []string // with %d for the port
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
			name:    "link-local-gateway",
			host:    nstest.HostOptions{LinkLocalGW6: true},
			args:    []string{"--config-net"},
			targets: []string{"[fe80::1%%eth0]:%d"},
		},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					e := newEngineEnv(t, u, tc.host)
					e.env = tc.env
					port := transferServer(t, e.h)
					var targets []string
					for _, tg := range tc.targets {
						targets = append(targets, fmt.Sprintf(tg, port))
					}
					args := append(append([]string{}, tc.args...), "--")
					args = append(args, e.helperCmd(append([]string{"tcp", tcpSizes}, targets...)...)...)
					r := e.run(t, args...)
					mustSucceed(t, "TCP transfers through gopasta", r)
					for _, tg := range targets {
						for _, size := range strings.Split(tcpSizes, ",") {
							for _, dir := range []string{"put", "get"} {
								want := fmt.Sprintf("tcp %s %s %s ok ", dir, tg, size)
								if !strings.Contains(r.Stdout, want) {
									t.Errorf("helper output: got %q, want a line starting %q", r.Stdout, want)
								}
							}
						}
					}
					t.Logf("transfers:\n%s", r.Stdout)
				})
			}
		})
	}
}

// TestIntegrationEngineTCPGiB: one GiB each way through the gateway to
// host loopback, intact. Root only (the path is the same for uid 65534)
// and not with -short.
func TestIntegrationEngineTCPGiB(t *testing.T) {
	requireTCP(t)
	if testing.Short() {
		t.Skip("skipping the 1 GiB transfer in -short mode")
	}
	e := newEngineEnv(t, nstest.RootUser, nstest.HostOptions{})
	port := transferServer(t, e.h)
	target := fmt.Sprintf("192.0.2.254:%d", port)
	start := time.Now()
	r := e.run(t, append([]string{"--config-net", "--"}, e.helperCmd("tcp", strconv.Itoa(1<<30), target)...)...)
	mustSucceed(t, "1 GiB TCP transfers through gopasta", r)
	for _, dir := range []string{"put", "get"} {
		if want := fmt.Sprintf("tcp %s %s %d ok ", dir, target, 1<<30); !strings.Contains(r.Stdout, want) {
			t.Errorf("helper output: got %q, want a line starting %q", r.Stdout, want)
		}
	}
	t.Logf("1 GiB up and down in %v:\n%s", time.Since(start).Round(time.Millisecond), r.Stdout)
}

// churnConns is how many short connections the churn test makes.
const churnConns = 2000

// statsTCP matches --stats lines and captures the live TCP flow count.
var statsTCP = regexp.MustCompile(`stats .*\btcp=(\d+)`)

// TestIntegrationEngineTCPChurn: 2000 short connections in a row, then
// gopasta holds no more file descriptors than before them, and (from
// --stats) no TCP flow.
func TestIntegrationEngineTCPChurn(t *testing.T) {
	requireTCP(t)
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEngineEnv(t, u, nstest.HostOptions{})
			port := transferServer(t, e.h)
			dir := nstest.TempDir(t)
			pidFile, startFile, endFile := dir+"/gopasta.pid", dir+"/start", dir+"/end"
			args := []string{e.bin, "--config-net", "--stats", "1", "-P", pidFile, "--"}
			args = append(args, e.helperCmd("churn", fmt.Sprintf("192.0.2.254:%d", port), strconv.Itoa(churnConns), startFile, endFile)...)
			p := e.h.Start(u, args...)

			var pid int
			err := nstest.WaitFor(20*time.Second, func() error {
				select {
				case <-p.Done():
					r, _ := p.Wait(0)
					return nstest.Stop(fmt.Errorf("gopasta exited early:\n%s", r))
				default:
				}
				var err error
				pid, err = nstest.ReadPIDFile(pidFile)
				return err
			})
			if err != nil {
				t.Fatalf("gopasta pid file: %v", err)
			}
			before, err := countFDs(pid)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(startFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = nstest.WaitFor(60*time.Second, func() error {
				if out, _ := p.Output(); strings.Contains(out, "churn done") {
					return nil
				}
				select {
				case <-p.Done():
					r, _ := p.Wait(0)
					return nstest.Stop(fmt.Errorf("gopasta exited during the churn:\n%s", r))
				default:
				}
				return fmt.Errorf("helper has not finished %d connections", churnConns)
			})
			if err != nil {
				stdout, stderr := p.Output()
				t.Fatalf("%v\nstdout: %s\nstderr: %s", err, stdout, stderr)
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
			if err := os.WriteFile(endFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r, ok := p.Wait(20 * time.Second)
			if !ok {
				t.Fatalf("gopasta: got no exit within 20s of the helper's end")
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
