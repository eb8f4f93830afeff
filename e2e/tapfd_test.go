package e2e

// --fd in pasta mode (issue 44 row 12, passt aa1cc89, 33e0fbc): the caller
// opens the TAP in the target namespace and passes its descriptor; gopasta
// carries its frames and forwards ports into that namespace, named by a
// PID or --netns as always. The caller configures the interface (pasta
// does not touch it).

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// tapExec is the peer's tapexec: it opens TAP ifname in network namespace
// netns on a thread of its own, which ends with its goroutine (the other
// threads stay in our namespace), and executes argv from one of those,
// with the descriptor, not close-on-exec, where argv says "FD".
func tapExec(netns, ifname string, argv []string) error {
	type opened struct {
		fd  int
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		fd, err := openTapIn(netns, ifname)
		ch <- opened{fd, err}
	}()
	o := <-ch
	if o.err != nil {
		return o.err
	}
	argv = slices.Clone(argv)
	for i, a := range argv {
		if a == "FD" {
			argv[i] = strconv.Itoa(o.fd)
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, os.Environ())
}

// openTapIn joins netns on the calling (locked) thread and opens TAP
// ifname there, with IFF_NO_PI, as pasta's own TAPs are; "NAME+vnet"
// opens NAME with a virtio-net header too (IFF_VNET_HDR). It is
// non-blocking, as pasta needs it (its loop reads until EAGAIN).
func openTapIn(netns, ifname string) (int, error) {
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if name, ok := strings.CutSuffix(ifname, "+vnet"); ok {
		ifname, flags = name, flags|unix.IFF_VNET_HDR
	}
	nsfd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(nsfd)
	if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("setns %s: %w", netns, err)
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(ifname)
	if err != nil {
		return -1, err
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return -1, fmt.Errorf("TUNSETIFF %s: %w", ifname, err)
	}
	return fd, nil
}

// tapFDArgv runs gopasta with args through tapexec: the TAP ifname opened
// in the network namespace of tapPID, gopasta in pid's user namespace (as
// podman runs pasta), attached with --netns to pid's network namespace.
func (e *env) tapFDArgv(pid, tapPID int, ifname string, args ...string) []string {
	return slices.Concat([]string{"nsenter", "-t", strconv.Itoa(pid), "-U", "--preserve-credentials", "--",
		e.self, peerFlag, "tapexec", fmt.Sprintf("/proc/%d/ns/net", tapPID), ifname},
		e.gopasta(slices.Concat([]string{"--fd", "FD"}, args, []string{"--netns", fmt.Sprintf("/proc/%d/ns/net", pid)})...))
}

// TestTapFD: with --fd, the namespace reaches the host through the TAP
// the caller opened, and a forwarded port reaches the namespace over it
// (from a host address) and spliced (from host loopback). The TAP is
// opened inside the namespace's user namespace, by gopasta's caller as
// podman would, with gopasta in the foreground or going to the background
// (which takes the descriptor along); or by root, who hands it to gopasta
// run as the test's user and attaching by PID (which, unprivileged, runs
// again in the PID's user namespace, descriptor and all).
func TestTapFD(t *testing.T) {
	const port = 18651
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range []struct {
				name       string
				background bool
				byRoot     bool
				// configNet: gopasta configures the TAP passed in,
				// as its own (pasta leaves it to the caller).
				configNet bool
				// vnet: the TAP has a virtio-net header, which
				// gopasta uses with offloads (pasta does not read it).
				vnet bool
			}{
				{name: "foreground"}, {name: "background", background: true}, {name: "opened-by-root", byRoot: true},
				{name: "config-net", configNet: true}, {name: "vnet-hdr", vnet: true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, u, hostSetup{peers: true})
					if (tc.configNet || tc.vnet) && !isGopasta(t, e) {
						t.Skipf("%s: gopasta's own", e.bin)
					}
					ifname := "tapfd0"
					if tc.vnet {
						ifname += "+vnet"
					}
					pid := e.startSleeper(t).PID()
					args := []string{"-t", strconv.Itoa(port), "-u", "none", "-T", "none", "-U", "none"}
					if tc.configNet {
						args = append(args, "--config-net")
					}
					var pidFile string
					if tc.background {
						pidFile = filepath.Join(nstest.TempDir(t), "gopasta.pid")
						args = append(args, "-P", pidFile)
					} else {
						args = append(args, "-f")
					}
					var argv []string
					runner := e.u
					if tc.byRoot {
						if u.Root() && !isGopasta(t, e) {
							t.Skipf("%s as root switches to nobody before it joins the namespace", e.bin)
						}
						runner = nstest.RootUser
						argv = slices.Concat([]string{e.self, peerFlag, "tapexec", fmt.Sprintf("/proc/%d/ns/net", pid), ifname},
							u.Argv(e.gopasta(slices.Concat([]string{"--fd", "FD"}, args, []string{strconv.Itoa(pid)})...)...))
					} else {
						argv = e.tapFDArgv(pid, pid, ifname, args...)
					}
					fg := e.h.Start(runner, argv...)
					if tc.background {
						r, ok := fg.Wait(30 * time.Second)
						if !ok || r.Code != 0 {
							t.Fatalf("gopasta --fd going to the background: got %s, want exit 0", r)
						}
						d, err := nstest.ReadPIDFile(pidFile)
						if err != nil {
							t.Fatal(err)
						}
						nstest.KillOnCleanup(t, d)
						fg = nil
					}
					checkTapFD(t, e, pid, fg, port, !tc.configNet)
				})
			}
		})
	}
}

// checkTapFD configures the namespace as a caller of --fd does (lo, and
// tapfd0),
// then checks traffic both ways through it. fg (nil in the background) is
// gopasta, or what runs it.
func checkTapFD(t *testing.T, e *env, pid int, fg *nstest.Proc, port int, configure bool) {
	t.Helper()
	err := nstest.WaitFor(10*time.Second, func() error {
		if fg != nil {
			select {
			case <-fg.Done():
				r, _ := fg.Wait(0)
				return nstest.Stop(fmt.Errorf("exited: %s", r))
			default:
			}
		}
		ls, err := linksOfPID(e, pid)()
		if err != nil {
			return err
		}
		l, ok := nstest.FindLink(ls, "tapfd0")
		if !ok {
			return fmt.Errorf("links: got %v, want tapfd0", nstest.Names(ls))
		}
		if !configure && !slices.Contains(l.GlobalAddrs(), nstest.HostAddr4+"/24") {
			return fmt.Errorf("tapfd0: got addresses %v, want %s/24 (--config-net)", l.GlobalAddrs(), nstest.HostAddr4)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("gopasta --fd: %v", err)
	}
	if !configure {
		checkTapFDTraffic(t, e, pid, fg, port)
		return
	}
	// All of it: pasta sets nothing up in the namespace with --fd, not
	// even lo (gopasta brings lo up).
	for _, c := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", nstest.HostAddr4 + "/24", "dev", "tapfd0"},
		{"ip", "link", "set", "tapfd0", "up"},
		{"ip", "route", "add", "default", "via", nstest.HostGW4, "dev", "tapfd0"},
	} {
		if r := e.h.Run(e.u, nsenterArgs(pid, c...)...); r.Code != 0 {
			t.Fatalf("%q in the namespace: %s", c, r)
		}
	}
	checkTapFDTraffic(t, e, pid, fg, port)
}

// checkTapFDTraffic checks traffic both ways through the namespace's
// tapfd0, configured.
func checkTapFDTraffic(t *testing.T, e *env, pid int, fg *nstest.Proc, port int) {
	t.Helper()
	ag := e.startAgentIn(t, pid)
	ag.serve(t, port)

	// Namespace to host, over the TAP.
	hostPort := e.serveTCP(t, ":0", "")
	if _, err := ag.do(15*time.Second, "put", netip.AddrPortFrom(netip.MustParseAddr(peer4), uint16(hostPort)).String(), "65536", "7"); err != nil {
		t.Errorf("namespace to host through the TAP passed in: %v", err)
	}
	// Host to namespace: over the TAP, and spliced.
	for _, p := range []path{{"tap4", netip.MustParseAddr(peer4), ns4}, {"splice4", netip.Addr{}, "127.0.0.1"}} {
		err := nstest.WaitFor(10*time.Second, func() error {
			return e.put(p.local, addrPort(p.dst, port), 65536, 8)
		})
		if err != nil {
			t.Errorf("%s: host to the namespace's forwarded port %d: %v", p.name, port, err)
		}
	}
	if fg != nil {
		if r, ok := fg.Wait(0); ok {
			t.Errorf("gopasta --fd: got exit, want it still running: %s", r)
		}
	}
}

// TestTapFDErrors: --fd's error paths, each one line and exit status 1:
// not a number, not an open descriptor, and for gopasta, which checks
// more than pasta does: not a TAP, with a command, a TAP in another
// namespace than the target.
func TestTapFDErrors(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			pid := e.startSleeper(t).PID()
			netns := fmt.Sprintf("/proc/%d/ns/net", pid)
			gp := isGopasta(t, e)
			inUserNS := func(args ...string) []string {
				return slices.Concat([]string{"nsenter", "-t", strconv.Itoa(pid), "-U", "--preserve-credentials", "--"}, e.gopasta(args...))
			}
			// A second network namespace of the same user namespace,
			// where the TAP of the last case is opened.
			otherProc := e.h.Start(e.u, "nsenter", "-t", strconv.Itoa(pid), "-U", "--preserve-credentials", "--", "unshare", "-n", "sleep", "300")
			if err := nstest.WaitFor(5*time.Second, func() error {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", otherProc.PID()))
				if got := strings.TrimSpace(string(b)); err != nil || got != "sleep" {
					return fmt.Errorf("comm %q (%v), want sleep", got, err)
				}
				return nil
			}); err != nil {
				t.Fatalf("second network namespace: %v", err)
			}
			other := otherProc.PID()
			for _, tc := range []struct {
				name        string
				argv        []string
				want        string // in gopasta's line
				gopastaOnly bool
			}{
				{name: "not-a-number", argv: inUserNS("--fd", "abc", "-f", "--netns", netns), want: `invalid --fd value "abc"`},
				{name: "not-open", argv: inUserNS("--fd", "99", "-f", "--netns", netns), want: "--fd 99: not an open descriptor"},
				{name: "not-a-tap", argv: inUserNS("--fd", "0", "-f", "--netns", netns), want: "--fd 0: not a TAP device", gopastaOnly: true},
				{name: "command", argv: e.gopasta("--fd", "3", "--", "true"), want: "--fd needs a PID or --netns", gopastaOnly: true},
				{name: "other-namespace", argv: e.tapFDArgv(pid, other, "tapfd1", "-f"), want: "in another network namespace", gopastaOnly: true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					if tc.gopastaOnly && !gp {
						t.Skipf("%s: not refused by %s", tc.name, e.bin)
					}
					r := e.runArgv(t, tc.argv...)
					lines := errorLines(r.Stderr)
					if r.Code == 0 || len(lines) != 1 {
						t.Fatalf("%q: got exit %d, stderr %q; want a failure in one line", tc.argv, r.Code, r.Stderr)
					}
					if gp && (r.Code != 1 || !strings.Contains(lines[0], tc.want)) {
						t.Errorf("%q: got exit %d, %q; want 1 and a line saying %q", tc.argv, r.Code, lines[0], tc.want)
					}
				})
			}
		})
	}
}
