package e2e

// Attach mode: gopasta joins namespaces that exist already (by PID, by
// /proc path, by name), configures them, and quits once they are gone.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// quitWithin is how fast gopasta must notice its namespace is gone (pasta
// polls /proc paths once a second and watches /run/netns with inotify).
const quitWithin = 2 * time.Second

// linksOfPID lists the interfaces in pid's network namespace.
func linksOfPID(e *env, pid int) func() ([]nstest.Link, error) {
	return func() ([]nstest.Link, error) {
		r := e.h.Run(e.u, nsenterArgs(pid, "ip", "-j", "addr")...)
		if r.Code != 0 {
			return nil, fmt.Errorf("nsenter ip addr: %s", r)
		}
		return nstest.ParseLinks(r.Stdout)
	}
}

// linksOfNetNS lists the interfaces of a named netns (root only).
func linksOfNetNS(t *testing.T, name string) func() ([]nstest.Link, error) {
	return func() ([]nstest.Link, error) {
		r := nstest.Run(t, nstest.RootUser, "ip", "-n", name, "-j", "addr")
		if r.Code != 0 {
			return nil, fmt.Errorf("ip -n %s addr: %s", name, r)
		}
		return nstest.ParseLinks(r.Stdout)
	}
}

// waitConfigured polls until the namespace's eth0 carries the host's
// addresses, which --config-net copies. It gives up early when gopasta
// (foreground, may be nil) exits first.
func waitConfigured(links func() ([]nstest.Link, error), fg *nstest.Proc) error {
	return nstest.WaitFor(10*time.Second, func() error {
		if fg != nil {
			select {
			case <-fg.Done():
				r, _ := fg.Wait(0)
				return nstest.Stop(fmt.Errorf("gopasta exited before configuring the namespace: %s", r))
			default:
			}
		}
		ls, err := links()
		if err != nil {
			return err
		}
		l, ok := nstest.FindLink(ls, nstest.HostIfName)
		if !ok {
			return fmt.Errorf("links: got %v, want %s", nstest.Names(ls), nstest.HostIfName)
		}
		got := l.GlobalAddrs()
		for _, want := range []string{"192.0.2.1/24", "2001:db8::1/64"} {
			if !slices.Contains(got, want) {
				return fmt.Errorf("%s addresses: got %v, want %s among them", l.IfName, got, want)
			}
		}
		if l.MTU != 65520 {
			return fmt.Errorf("%s MTU: got %d, want 65520", l.IfName, l.MTU)
		}
		return nil
	})
}

// TestAttach joins existing namespaces by PID, by /proc path and
// by name, in the foreground and as a daemon, and checks that gopasta
// configures them and quits (or, with --no-netns-quit, stays) once they go.
func TestAttach(t *testing.T) {
	type target int
	const (
		byPID target = iota
		byProcPath
		byName
	)
	tests := []struct {
		name       string
		target     target
		foreground bool
		noQuit     bool
		// userns adds --userns /proc/PID/ns/user (byProcPath).
		userns bool
		// inUserNS runs gopasta inside the sleeper's user namespace, as
		// podman does (its pasta runs in the rootless user namespace).
		inUserNS bool
		// rootOnly: ip netns add needs root, and --netns alone implies
		// --netns-only, which an unprivileged caller outside the owning
		// user namespace cannot use (the kernel wants CAP_SYS_ADMIN in
		// the caller's own user namespace too).
		rootOnly bool
	}{
		{name: "pid-foreground", target: byPID, foreground: true},
		{name: "pid-daemon", target: byPID},
		{name: "netns-procpath-daemon", target: byProcPath, rootOnly: true},
		{name: "netns-userns-procpath-daemon", target: byProcPath, userns: true},
		{name: "netns-podman-style", target: byProcPath, inUserNS: true},
		{name: "netns-name-daemon", target: byName, rootOnly: true},
		{name: "no-netns-quit", target: byPID, noQuit: true},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					if tc.rootOnly && !u.Root() {
						t.Skip("skipping: needs root (ip netns add, or --netns-only outside the owning user namespace); rootless forms: netns-userns-procpath, netns-podman-style")
					}
					e := newEnv(t, u, hostSetup{})
					args := []string{"--config-net"}
					launcher := []string{e.bin}
					var links func() ([]nstest.Link, error)
					var remove func() // makes the namespace go away
					switch tc.target {
					case byPID, byProcPath:
						sleeper := e.startSleeper(t)
						pid := sleeper.PID()
						if tc.target == byPID {
							args = append(args, strconv.Itoa(pid))
						} else {
							args = append(args, "--netns", fmt.Sprintf("/proc/%d/ns/net", pid))
						}
						if tc.userns {
							args = append(args, "--userns", fmt.Sprintf("/proc/%d/ns/user", pid))
						}
						if tc.inUserNS {
							launcher = []string{"nsenter", "-t", strconv.Itoa(pid), "-U", "--preserve-credentials", "--", e.bin}
						}
						links = linksOfPID(e, pid)
						remove = func() {
							_ = sleeper.Signal(syscall.SIGKILL)
							if _, ok := sleeper.Wait(5 * time.Second); !ok {
								t.Fatalf("sleeper %d: got still running 5s after SIGKILL, want dead", pid)
							}
						}
					case byName:
						name := nstest.UniqueName("gptest")
						if r := nstest.Run(t, nstest.RootUser, "ip", "netns", "add", name); r.Code != 0 {
							t.Fatalf("ip netns add %s: %s", name, r)
						}
						t.Cleanup(func() { nstest.Run(t, nstest.RootUser, "ip", "netns", "del", name) })
						args = append(args, "--netns", name)
						links = linksOfNetNS(t, name)
						remove = func() {
							if r := nstest.Run(t, nstest.RootUser, "ip", "netns", "del", name); r.Code != 0 {
								t.Fatalf("ip netns del %s: %s", name, r)
							}
						}
					}
					if tc.noQuit {
						args = append([]string{"--no-netns-quit"}, args...)
					}

					var gpPID int
					var fg *nstest.Proc
					if tc.foreground {
						fg = e.h.Start(u, slices.Concat(launcher, []string{"-f"}, args)...)
						gpPID = fg.PID()
					} else {
						pidFile := filepath.Join(nstest.TempDir(t), "gopasta.pid")
						args = append([]string{"-P", pidFile}, args...)
						start := time.Now()
						r := e.runArgv(t, slices.Concat(launcher, args)...)
						if r.Code != 0 {
							t.Fatalf("gopasta %q (going to the background): got exit %d, want 0\n%s", args, r.Code, r)
						}
						if r.PipesHeld {
							t.Errorf("gopasta %q: got the daemon holding stdout/stderr open after the parent exited, want them closed (podman's CombinedOutput would hang)", args)
						}
						t.Logf("foreground part exited after %v", time.Since(start))
						var err error
						gpPID, err = nstest.ReadPIDFile(pidFile)
						if err != nil {
							t.Fatalf("after the foreground exited: %v", err)
						}
						nstest.KillOnCleanup(t, gpPID)
						if !nstest.PIDAlive(gpPID) {
							t.Fatalf("daemon pid %d from %s: got not running, want alive", gpPID, pidFile)
						}
						// Re-executed through /proc/self/exe, it would be
						// "exe" to pgrep and top without a name of its own.
						if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", gpPID)); err != nil || strings.TrimSpace(string(comm)) != procName(e.bin) {
							t.Errorf("daemon's process name: got %q (%v), want %q", comm, err, procName(e.bin))
						}
					}

					if err := waitConfigured(links, fg); err != nil {
						t.Fatalf("namespace not configured: %v", err)
					}

					remove()
					gone := time.Now()
					if tc.noQuit {
						time.Sleep(quitWithin + 500*time.Millisecond)
						if !nstest.PIDAlive(gpPID) {
							t.Errorf("with --no-netns-quit: got gopasta (pid %d) gone after its namespace went, want it still running", gpPID)
						}
						return
					}
					if fg != nil {
						r, ok := fg.Wait(5 * time.Second)
						if !ok {
							t.Fatalf("gopasta -f: got still running 5s after the namespace went, want exit within %v", quitWithin)
						}
						checkNoPanic(t, r)
					} else if _, err := nstest.WaitGone(gpPID, 5*time.Second); err != nil {
						t.Fatalf("daemon: %v after the namespace went, want exit within %v", err, quitWithin)
					}
					if took := time.Since(gone); took > quitWithin {
						t.Errorf("quit after the namespace went: got %v, want within %v", took, quitWithin)
					}
				})
			}
		})
	}
}

// procName is the name the kernel gives a process that runs bin: the first
// 15 bytes of its file name.
func procName(bin string) string {
	n := filepath.Base(bin)
	return n[:min(len(n), 15)]
}
