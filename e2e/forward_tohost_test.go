package e2e

// Port forwarding out of the namespace (-T, -U, static and auto): a peer
// agent in the namespace reaches servers on host loopback through its own
// loopback.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestForwardToHost: -T and -U: a namespace process reaches a
// host loopback server through its own 127.0.0.1:P and [::1]:P (TCP 2 KiB
// and 10 MiB both ways, UDP echoes, resets mid-transfer both ways); and -T
// auto forwards a host listener opened later within about 2 s.
func TestForwardToHost(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const p = 18201
			hostDir := nstest.TempDir(t)
			for _, a := range []string{"127.0.0.1", "[::1]"} {
				e.serveTCP(t, fmt.Sprintf("%s:%d", a, p), hostDir)
				e.serveUDP(t, fmt.Sprintf("%s:%d", a, p))
			}
			ag := e.startAgent(t, "--config-net", "-t", "none", "-u", "none", "-T", strconv.Itoa(p), "-U", strconv.Itoa(p))
			for _, a := range []string{"127.0.0.1", "[::1]"} {
				dst := fmt.Sprintf("%s:%d", a, p)
				for _, n := range []int64{2 << 10, 10 << 20} {
					for _, op := range []string{"put", "get"} {
						if _, err := ag.do(30*time.Second, op, dst, strconv.FormatInt(n, 10), strconv.FormatInt(n+3, 10)); err != nil {
							t.Errorf("-T %s: namespace %s %d bytes: %v", dst, op, n, err)
						}
					}
				}
				if _, err := ag.do(15*time.Second, "udp", dst); err != nil {
					t.Errorf("-U %s: %v", dst, err)
				}
			}
			// Resets mid-transfer, both ways, on the namespace's side.
			for i, a := range []string{"127.0.0.1", "[::1]"} {
				dst := fmt.Sprintf("%s:%d", a, p)
				if _, err := ag.do(10*time.Second, "streamreset", dst, strconv.Itoa(i)); err != nil {
					t.Errorf("-T %s: %v", dst, err)
					continue
				}
				reset := time.Now()
				err := nstest.WaitFor(2*time.Second, func() error {
					_, err := os.Stat(filepath.Join(hostDir, fmt.Sprintf("stream-%d", i)))
					return err
				})
				if err != nil {
					t.Errorf("-T %s: the namespace client reset: the host server still streaming %v later, want it to see the reset within 2s", dst, time.Since(reset).Round(time.Millisecond))
				}
				got, err := ag.do(10*time.Second, "expectreset", dst, strconv.Itoa(1<<20))
				how, ms, _ := strings.Cut(got, " ")
				if took, _ := strconv.Atoi(ms); err != nil || how != "reset" || took > 2000 {
					t.Errorf("-T %s: the host server reset after 1 MiB: the namespace client saw %q after %s ms (%v); want a reset within 2s", dst, how, ms, err)
				}
				if _, err := ag.do(10*time.Second, "put", dst, "2048", "9"); err != nil {
					t.Errorf("-T %s: a new connection after the resets: %v", dst, err)
				}
			}
			ag.proc.Signal(syscall.SIGTERM)

			// -T auto: a host listener opened while gopasta runs.
			ag = e.startAgent(t, "--config-net", "-t", "none", "-u", "none", "-T", "auto", "-U", "none")
			const q = 18202
			time.Sleep(1200 * time.Millisecond) // let a scan or two go by with nothing there
			l, err := e.h.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", q))
			if err != nil {
				t.Fatal(err)
			}
			go serveTCP(l, "")
			opened := time.Now()
			if _, err := ag.do(10*time.Second, "waitput", fmt.Sprintf("127.0.0.1:%d", q), "5000"); err != nil {
				t.Fatalf("-T auto: namespace 127.0.0.1:%d: %v", q, err)
			}
			if d := time.Since(opened); d > 2500*time.Millisecond {
				t.Errorf("-T auto: the namespace reached the new host listener %v after it opened, want about 2s at most", d)
			}
			if _, err := ag.do(30*time.Second, "get", fmt.Sprintf("127.0.0.1:%d", q), strconv.Itoa(10<<20), "77"); err != nil {
				t.Errorf("-T auto: namespace get 10 MiB: %v", err)
			}
			l.Close()
			closed := time.Now()
			if _, err := ag.do(10*time.Second, "waitrefused", fmt.Sprintf("127.0.0.1:%d", q), "5000"); err != nil {
				t.Errorf("-T auto: namespace 127.0.0.1:%d after the host listener closed: %v", q, err)
			} else if d := time.Since(closed); d > 2500*time.Millisecond {
				t.Errorf("-T auto: the namespace's listener lived %v after the host's closed, want about 2s at most", d)
			}
		})
	}
}
