package e2e

// Port forwarding into namespaces gopasta attaches to, the way container
// tools use it: podman's and rootlesskit's exact argument lists, and live
// forwarded connections when the namespace goes away.

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestForwardPodman: podman's exact argument list against a
// netns file: host 127.0.0.1:8080 reaches the namespace's port 80, and
// gopasta quits once the netns file is removed.
func TestForwardPodman(t *testing.T) {
	e := newEnv(t, nstest.RootUser, hostSetup{peers: true})
	cname := nstest.UniqueName("fwdc")
	if out, err := exec.Command("ip", "netns", "add", cname).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			exec.Command("ip", "netns", "del", cname).Run()
		}
	})
	// The container's server (as root in its netns: port 80).
	ag := &agent{dir: nstest.TempDir(t)}
	srv := exec.Command("ip", slices.Concat([]string{"netns", "exec", cname}, agentArgv(e.self, ag.dir))...)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	nstest.KillOnCleanup(t, srv.Process.Pid)
	go srv.Wait()
	ag.waitReady(t, 10*time.Second)
	ag.must(t, 10*time.Second, "listen", "[::]:80")
	pidFile := filepath.Join(nstest.TempDir(t), "pasta.pid")
	r := e.run(t, "--config-net", "-t", "8080-8080:80-80",
		"--dns-forward", "169.254.1.1", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--quiet",
		"--map-guest-addr", "169.254.1.2", "--pid", pidFile, "--netns", "/run/netns/"+cname)
	if r.Code != 0 {
		t.Fatalf("podman arguments: got exit %d, want 0 (background)\n%s", r.Code, r)
	}
	pid, err := nstest.ReadPIDFile(pidFile)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	nstest.KillOnCleanup(t, pid)
	e.waitServing(t, nil, addrPort("127.0.0.1", 8080), 10*time.Second)
	if err := e.get(netip.Addr{}, addrPort("127.0.0.1", 8080), 1<<20, 9); err != nil {
		t.Errorf("podman: 1 MiB namespace -> host: %v", err)
	}
	srv.Process.Kill()
	if out, err := exec.Command("ip", "netns", "del", cname).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	removed = true
	if d, err := nstest.WaitGone(pid, 10*time.Second); err != nil {
		t.Errorf("gopasta (pid %d): %v after the netns file was removed", pid, err)
	} else {
		t.Logf("gopasta quit %v after the netns file was removed", d)
	}
}

// rootlesskitArgs is rootlesskit's exact argument list (--net=pasta),
// without the PID.
var rootlesskitArgs = []string{"--stderr", "--ns-ifname=tap0", "--mtu=65520", "--config-net",
	"--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3",
	"--no-map-gw", "--ipv4-only", "--tcp-ports=auto", "--udp-ports=auto"}

// TestForwardRootlesskit: rootlesskit's argument list against
// an `unshare -Urn sleep` PID: gopasta goes to the background, the
// namespace gets tap0 with 10.0.2.100/24, a server started in the
// namespace afterwards is reachable from host 127.0.0.1 through auto within
// about 2 s, and gopasta exits within 2 s of the sleeper's death.
func TestForwardRootlesskit(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			sl := e.startSleeper(t)
			d := e.attachDaemon(t, sl.PID(), rootlesskitArgs...)

			r := e.h.Run(e.u, nsenterArgs(sl.PID(), "ip", "-j", "addr", "show")...)
			ls, err := nstest.ParseLinks(r.Stdout)
			if err != nil {
				t.Fatalf("ip addr in the namespace: %v (%s)", err, r)
			}
			if l, ok := nstest.FindLink(ls, "tap0"); !ok || !l.Up() || !slices.Contains(l.GlobalAddrs(), "10.0.2.100/24") || l.MTU != 65520 {
				t.Errorf("namespace links: got %+v, want tap0 up, MTU 65520, with 10.0.2.100/24", ls)
			}

			const p = 18231
			ag := e.startAgentIn(t, sl.PID())
			ag.serve(t, p)
			listening := time.Now()
			dst := addrPort("127.0.0.1", p)
			if err := nstest.WaitFor(5*time.Second, func() error { return e.put(netip.Addr{}, dst, 100, 3) }); err != nil {
				t.Fatalf("auto: host 127.0.0.1:%d: no forwarding within 5s of the namespace listening: %v", p, err)
			}
			if d := time.Since(listening); d > 2500*time.Millisecond {
				t.Errorf("auto: forwarding took %v after the namespace listened, want about 2s at most", d)
			}
			if err := e.get(netip.Addr{}, dst, 10<<20, 31); err != nil {
				t.Errorf("auto: 10 MiB namespace -> host: %v", err)
			}
			// --udp-ports=auto: the agent's UDP socket on the same port.
			err = nstest.WaitFor(3*time.Second, func() error { return e.udpEcho(netip.Addr{}, dst) })
			if err != nil {
				t.Errorf("UDP auto: host 127.0.0.1:%d: %v", p, err)
			}

			sl.Signal(syscall.SIGKILL)
			if took, err := nstest.WaitGone(d, 2*time.Second); err != nil {
				t.Errorf("gopasta (pid %d): %v after the sleeper was killed, want gone within 2s", d, err)
			} else {
				t.Logf("gopasta exited %v after the sleeper was killed", took.Round(time.Millisecond))
			}
		})
	}
}

// TestForwardNamespaceGone: attach mode with live forwarded
// connections (TAP and splice paths); when the namespace's process dies
// gopasta exits within 2 s and the host clients see their connections end
// instead of hanging.
func TestForwardNamespaceGone(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			sl := e.startSleeper(t)
			const p = 18241
			d := e.attachDaemon(t, sl.PID(), "--config-net", "-t", strconv.Itoa(p), "-u", "none", "-T", "none", "-U", "none")
			ag := e.startAgentIn(t, sl.PID())
			ag.serve(t, p)
			e.waitServing(t, nil, addrPort("127.0.0.1", p), 10*time.Second)

			type live struct {
				name string
				end  chan string
			}
			var conns []live
			for i, path := range paths() {
				c, err := e.dial("tcp", path.local, addrPort(path.dst, p))
				if err != nil {
					t.Fatalf("%s: %v", path.name, err)
				}
				defer c.Close()
				request(c, 'S', uint64(i))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, make([]byte, 64<<10)); err != nil {
					t.Fatalf("%s: reading the stream: %v", path.name, err)
				}
				l := live{path.name, make(chan string, 1)}
				conns = append(conns, l)
				go func() {
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					_, err := io.Copy(io.Discard, c)
					l.end <- errClass(err)
				}()
			}

			sl.Signal(syscall.SIGKILL)
			killed := time.Now()
			if took, err := nstest.WaitGone(d, 2*time.Second); err != nil {
				t.Errorf("gopasta (pid %d): %v after the sleeper was killed, want gone within 2s", d, err)
			} else {
				t.Logf("gopasta exited %v after the sleeper was killed", took.Round(time.Millisecond))
			}
			for _, l := range conns {
				select {
				case how := <-l.end:
					if how != "eof" && how != "reset" {
						t.Errorf("%s: the host client's connection ended with %q, want eof or reset", l.name, how)
					}
				case <-time.After(time.Until(killed.Add(4 * time.Second))):
					t.Errorf("%s: the host client's connection still open 4s after the namespace went away", l.name)
				}
			}
		})
	}
}

// attachDaemon runs gopasta with args against pid (attach mode, to the
// background) and returns the daemon's PID.
func (e *env) attachDaemon(t *testing.T, pid int, args ...string) int {
	t.Helper()
	r := e.run(t, append(slices.Clone(args), strconv.Itoa(pid))...)
	if r.Code != 0 || r.PipesHeld {
		t.Fatalf("gopasta %q %d: got %s; want exit 0 once in the background", args, pid, r)
	}
	d, err := findDaemon(e.bin, strconv.Itoa(pid))
	if err != nil {
		t.Fatal(err)
	}
	nstest.KillOnCleanup(t, d)
	return d
}

// findDaemon finds the live process running bin whose last argument is
// last (attach mode's PID argument: unique per test).
func findDaemon(bin, last string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var found []int
	for _, de := range ents {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || strings.TrimSuffix(exe, " (deleted)") != bin {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if args[len(args)-1] == last && nstest.PIDAlive(pid) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("background gopasta for pid %s: got processes %v, want exactly one", last, found)
	}
	return found[0], nil
}
