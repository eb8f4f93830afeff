package e2e

// The sandbox (internal/sandbox, docs/security.md), seen from outside: the
// process that carries the traffic is read through /proc/PID/status and
// /proc/PID/root in every mode, as root and as uid 65534, compared with
// pasta's row of the table in docs/security.md (or better), and then
// carries traffic both ways on every path.

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// servingUID is the uid gopasta started by uid carries traffic as: root
// of the initial user namespace drops to nobody (internal/sandbox), anyone
// else stays who they are.
func servingUID(uid int) int {
	if uid == 0 {
		return 65534
	}
	return uid
}

// confinement is what /proc/PID/status and /proc/PID/root must show.
type confinement struct {
	uid, gid string // "65534\t65534\t65534\t65534"
	capEff   string // CapEff = CapPrm
}

// wantConfinement is the row gopasta achieves for u: root drops to nobody
// with no capability at all; an unprivileged user is root of a user
// namespace that maps only itself, seen from here as that user, and keeps
// CAP_NET_BIND_SERVICE there. pasta's row: 65534, 0x200400, 1, 2.
func wantConfinement(u nstest.User) confinement {
	id := strconv.Itoa(servingUID(u.UID))
	ids := strings.Repeat(id+"\t", 3) + id
	c := confinement{uid: ids, gid: ids, capEff: "0000000000000000"}
	if !u.Root() {
		c.capEff = "0000000000000400"
	}
	return c
}

// procStatus reads the fields of /proc/PID/status.
func procStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// checkConfined compares pid's status and root with want, once the
// seccomp filter is on (the pid file is written just before).
func checkConfined(t *testing.T, pid int, want confinement) {
	t.Helper()
	var st map[string]string
	err := nstest.WaitFor(5*time.Second, func() (err error) {
		if st, err = procStatus(pid); err != nil {
			return nstest.Stop(err)
		}
		if st["Seccomp"] != "2" {
			return fmt.Errorf("Seccomp %q, want 2", st["Seccomp"])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("gopasta pid %d: not confined within 5s: %v", pid, err)
	}
	// Filters this test process already runs under (a confined CI
	// runner) are inherited: gopasta adds exactly one.
	own, err := procStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	base, _ := strconv.Atoi(own["Seccomp_filters"])
	for _, f := range []struct{ field, want string }{
		{"Uid", want.uid}, {"Gid", want.gid}, {"Groups", ""},
		{"CapEff", want.capEff}, {"CapPrm", want.capEff},
		{"CapInh", "0000000000000000"}, {"CapBnd", "0000000000000000"}, {"CapAmb", "0000000000000000"},
		{"NoNewPrivs", "1"}, {"Seccomp", "2"}, {"Seccomp_filters", strconv.Itoa(base + 1)},
	} {
		if got := st[f.field]; got != f.want {
			t.Errorf("gopasta pid %d: /proc status %s: got %q, want %q", pid, f.field, got, f.want)
		}
	}
	root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil || !strings.HasSuffix(root, " (deleted)") {
		t.Errorf("gopasta pid %d: /proc root: got %q (%v), want a deleted directory", pid, root, err)
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/", pid)); len(ents) != 0 || err != nil && !os.IsNotExist(err) {
		t.Errorf("gopasta pid %d: /proc root lists %d entries (%v), want none", pid, len(ents), err)
	}
}

// staticPort is a port free for TCP and UDP in the host namespace and
// below the ephemeral range, where UDP auto forwarding follows bound ports
// (it leaves ephemeral ones, clients' sockets, alone).
func (e *env) staticPort(t *testing.T) int {
	t.Helper()
	for p := 20000 + os.Getpid()%5000; p < 32000; p += 97 {
		l, err := e.h.Listen("tcp", fmt.Sprintf("[::]:%d", p))
		if err != nil {
			continue
		}
		u, err := e.h.ListenPacket("udp", fmt.Sprintf("[::]:%d", p))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		return p
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

// nsInit finds the process of the spawned namespace whose parent is pid
// (the namespace's init), to enter its namespaces.
func nsInit(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			return strconv.Atoi(f[0])
		}
	}
	return 0, fmt.Errorf("no child of %d", pid)
}

// TestSandbox: in each mode, as root and as uid 65534, the process that
// carries the traffic is confined as docs/security.md says, and carries
// TCP over the TAP and spliced, UDP, ping and DNS both ways, picks up a new
// listener of the namespace (-t auto), writes --pcap and --stats, and
// exits cleanly (no SIGSYS), leaving its pid file with its PID in place.
func TestSandbox(t *testing.T) {
	type mode struct {
		name       string
		attach     bool
		foreground bool
		netns      bool // --netns /proc/PID/ns/net --userns /proc/PID/ns/user
		named      bool // --netns NAME (root only: ip netns add)
		// ofNobody: the namespace belongs to uid 65534 (root only):
		// root attaching to it keeps working once it is nobody itself.
		ofNobody bool
		// inUserNS: gopasta runs inside the namespace's user namespace,
		// as podman runs pasta: root there, whoever it is outside, it
		// stays who it is (as pasta) and keeps CAP_NET_BIND_SERVICE.
		inUserNS bool
		// oneCPU: GOMAXPROCS=1, as for a process confined to one CPU:
		// the loops park in the runtime's poller and the splice loop
		// holds its processor (internal/epoll), under the filter.
		oneCPU bool
	}
	modes := []mode{
		{name: "spawn"},
		{name: "pid-foreground", attach: true, foreground: true},
		{name: "pid-background", attach: true},
		{name: "netns-userns-background", attach: true, netns: true},
		{name: "netns-name-foreground", attach: true, foreground: true, named: true},
		{name: "pid-of-nobody-background", attach: true, ofNobody: true},
		{name: "podman-style-background", attach: true, netns: true, inUserNS: true},
		{name: "pid-background-one-cpu", attach: true, oneCPU: true},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, m := range modes {
				t.Run(m.name, func(t *testing.T) {
					if (m.named || m.ofNobody) && !u.Root() {
						t.Skip("skipping: a root-only form (ip netns add; root attaching to another user's namespace)")
					}
					e := newEnv(t, u, hostSetup{ping: true, peers: true})
					// The filter as users get it, whatever the run's
					// mode: a forbidden call kills (the rest of the
					// suite may run with GOPASTA_SECCOMP=log).
					e.gopastaEnv = []string{nstest.SeccompEnv + "="}
					if m.oneCPU {
						e.gopastaEnv = append(e.gopastaEnv, "GOMAXPROCS=1")
					}
					e.h.SetResolvConf("nameserver 127.0.0.1\n")
					startResolver(t, e.h, "127.0.0.1")
					hostPort := e.serveTCP(t, "127.0.0.1:0", nstest.TempDir(t))
					udpPort := e.serveUDP(t, "127.0.0.1:0")
					dir := nstest.TempDir(t)
					pidFile, logFile, pcap := filepath.Join(dir, "gopasta.pid"), filepath.Join(dir, "gopasta.log"), filepath.Join(dir, "gopasta.pcap")
					args := []string{"--config-net", "-P", pidFile, "-l", logFile, "--pcap", pcap, "--stats", "1", "-t", "auto", "-u", "auto"}

					var a *agent
					var fg *nstest.Proc
					var nsPID int     // a process in the namespace, for nsenter
					var remove func() // ends an attached namespace
					if !m.attach {
						a = e.startAgent(t, args...)
					} else {
						var target []string
						if m.named {
							name := nstest.UniqueName("gpsbx")
							if r := nstest.Run(t, nstest.RootUser, "ip", "netns", "add", name); r.Code != 0 {
								t.Fatalf("ip netns add %s: %s", name, r)
							}
							t.Cleanup(func() { nstest.Run(t, nstest.RootUser, "ip", "netns", "del", name) })
							// An agent in the named namespace: sh and the
							// peer, run by ip netns exec as root.
							adir := nstest.TempDir(t)
							a = &agent{dir: adir}
							a.proc = e.h.Start(nstest.RootUser, slices.Concat([]string{"ip", "netns", "exec", name}, agentArgv(e.self, adir))...)
							t.Cleanup(a.exit)
							a.waitReady(t, 10*time.Second)
							target = []string{"--netns", name}
							remove = func() {
								if r := nstest.Run(t, nstest.RootUser, "ip", "netns", "del", name); r.Code != 0 {
									t.Fatalf("ip netns del %s: %s", name, r)
								}
							}
							nsPID = a.proc.PID()
						} else {
							var sl *nstest.Proc
							if m.ofNobody {
								sl = (&env{h: e.h, u: nstest.Nobody}).startSleeper(t)
							} else {
								sl = e.startSleeper(t)
							}
							nsPID = sl.PID()
							target = []string{strconv.Itoa(nsPID)}
							if m.netns {
								target = []string{"--netns", fmt.Sprintf("/proc/%d/ns/net", nsPID), "--userns", fmt.Sprintf("/proc/%d/ns/user", nsPID)}
							}
							if m.inUserNS {
								target = []string{"--netns", fmt.Sprintf("/proc/%d/ns/net", nsPID)}
							}
							remove = func() {
								_ = sl.Signal(syscall.SIGKILL)
								if _, ok := sl.Wait(5 * time.Second); !ok {
									t.Fatalf("sleeper %d: still running 5s after SIGKILL", nsPID)
								}
							}
						}
						if m.foreground {
							fg = e.start(t, slices.Concat([]string{"-f"}, args, target)...)
						} else if m.inUserNS {
							launcher := []string{"nsenter", "-t", strconv.Itoa(nsPID), "-U", "--preserve-credentials", "--"}
							r := e.runArgv(t, slices.Concat(launcher, e.gopasta(slices.Concat(args, target)...))...)
							mustSucceed(t, "gopasta going to the background", r)
						} else {
							r := e.run(t, slices.Concat(args, target)...)
							mustSucceed(t, "gopasta going to the background", r)
						}
						if a == nil {
							a = e.startAgentIn(t, nsPID)
						}
					}
					var gpPID int
					err := nstest.WaitFor(10*time.Second, func() (err error) {
						gpPID, err = nstest.ReadPIDFile(pidFile)
						return err
					})
					if err != nil {
						t.Fatalf("pid file: %v", err)
					}
					nstest.KillOnCleanup(t, gpPID)
					if !m.attach {
						if nsPID, err = nsInit(gpPID); err != nil {
							t.Fatalf("the spawned namespace's init: %v", err)
						}
					}

					want := wantConfinement(u)
					if m.inUserNS {
						id := strconv.Itoa(u.UID)
						want = confinement{uid: strings.Repeat(id+"\t", 3) + id, gid: strings.Repeat(id+"\t", 3) + id, capEff: "0000000000000400"}
					}
					checkConfined(t, gpPID, want)

					// The namespace's new listener is picked up (-t/-u
					// auto) and reached over the TAP and spliced.
					port := e.staticPort(t)
					a.serve(t, port)
					reachableWithin(t, e, "auto", port, 5*time.Second, paths()...)
					for _, p := range paths() {
						if err := e.get(p.local, addrPort(p.dst, port), 1<<20, 3); err != nil {
							t.Errorf("%s: download from the namespace: %v", p.name, err)
						}
					}
					if m.oneCPU {
						environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", gpPID))
						if err != nil || !slices.Contains(strings.Split(string(environ), "\x00"), "GOMAXPROCS=1") {
							t.Fatalf("gopasta's environment: got %q (%v), want GOMAXPROCS=1 in it", environ, err)
						}
						// More spliced connections into the namespace than
						// its socket pool holds, so that it refills while
						// the splice loop holds and parks.
						for _, p := range paths()[2:] {
							for i := range 40 {
								if err := e.get(p.local, addrPort(p.dst, port), 4096, uint64(100+i)); err != nil {
									t.Fatalf("%s: connection %d: %v", p.name, i, err)
								}
							}
						}
					}
					if err := nstest.WaitFor(5*time.Second, func() error { return e.udpEcho(netip.MustParseAddr(peer4), addrPort(ns4, port)) }); err != nil {
						t.Errorf("UDP echo into the namespace over the TAP: %v", err)
					}
					// The namespace to the host: TCP both ways, UDP, DNS
					// through the gateway to the host's loopback resolver.
					gw := "192.0.2.254"
					for _, c := range []string{
						fmt.Sprintf("put %s:%d 1048576 5", gw, hostPort),
						fmt.Sprintf("get %s:%d 1048576 6", gw, hostPort),
						fmt.Sprintf("udp %s:%d", gw, udpPort),
						dnsCmd(gw + ":53"),
					} {
						if _, err := a.do(20*time.Second, strings.Fields(c)...); err != nil {
							t.Errorf("namespace: %s: %v", c, err)
						}
					}
					// ping, by busybox in the namespace, as its owner.
					owner := u
					if m.ofNobody {
						owner = nstest.Nobody
					}
					r := e.h.Run(owner, nsenterArgs(nsPID, "busybox", "ping", "-A", "-c", "2", "-W", "3", gw)...)
					if m.named {
						r = e.h.Run(nstest.RootUser, "nsenter", "-t", strconv.Itoa(nsPID), "-n", "busybox", "ping", "-A", "-c", "2", "-W", "3", gw)
					}
					if !strings.Contains(r.Stdout, "2 packets received") {
						t.Errorf("ping %s from the namespace: got %s, want 2 packets received", gw, r)
					}

					// Still confined after all that, and still alive.
					checkConfined(t, gpPID, want)

					// End it: the command exits, or the namespace goes.
					if !m.attach {
						a.exit()
						r, ok := a.proc.Wait(10 * time.Second)
						if !ok || r.Code != 0 || r.Signaled {
							t.Errorf("gopasta after its command exited 0: got %s, want exit 0", r)
						}
					} else {
						remove()
						if fg != nil {
							r, ok := fg.Wait(5 * time.Second)
							if !ok || r.Code != 0 || r.Signaled {
								t.Errorf("gopasta -f after the namespace went: got %s, want exit 0", r)
							}
						} else if _, err := nstest.WaitGone(gpPID, 5*time.Second); err != nil {
							t.Errorf("gopasta in the background after the namespace went: %v", err)
						}
					}
					// The pid file outlives gopasta, as pasta's does: podman
					// reads it after the run to tell which process it was.
					if got, err := nstest.ReadPIDFile(pidFile); err != nil || got != gpPID {
						t.Errorf("pid file after exit: got %d (%v), want it kept with %d", got, err, gpPID)
					}

					log, _ := os.ReadFile(logFile)
					if n := strings.Count(string(log), "gopasta: stats frames_in="); n == 0 {
						t.Errorf("log %s: got no --stats line, want one a second:\n%s", logFile, log)
					}
					if strings.Contains(string(log), "seccomp") || strings.Contains(string(log), "SIGSYS") {
						t.Errorf("log %s: got a seccomp report, want none:\n%s", logFile, log)
					}
					b, err := os.ReadFile(pcap)
					if err != nil {
						t.Fatalf("--pcap: %v", err)
					}
					if frames, err := readPcap(b); err != nil || len(frames) < 20 {
						t.Errorf("--pcap: got %d frames (%v), want the traffic's", len(frames), err)
					}
				})
			}
		})
	}
}

// forbiddenEnv, with asMainEnv, makes this test binary a gopasta that
// opens "/" every 10 ms on a goroutine of its own (forbiddenCalls):
// harmless before its sandbox, a call outside the allowlist after it.
const forbiddenEnv = "GOPASTA_E2E_FORBIDDEN"

func forbiddenCalls() {
	for {
		if fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSeccompReport: the report mode's plumbing. A gopasta making a call
// outside its allowlist after its sandbox went on (forbiddenEnv), started
// through nstest as root and as uid 65534 (which re-executes itself in a
// user namespace of its own), with GOPASTA_SECCOMP=log and a report file
// of the test's own in the test's environment, keeps running, exits with
// its command, and leaves one line naming the call in the report file.
func TestSeccompReport(t *testing.T) {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Skip(err)
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			report := filepath.Join(nstest.TempDir(t), "report")
			if err := os.WriteFile(report, nil, 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(report, 0o666); err != nil {
				t.Fatal(err)
			}
			// As the suite's report mode passes them: from this
			// process's environment, through nstest's commands.
			t.Setenv(nstest.SeccompEnv, "log")
			t.Setenv(nstest.SeccompReportEnv, report)
			e.bin = e.self
			e.gopastaEnv = []string{asMainEnv + "=1", forbiddenEnv + "=1"}
			r := e.run(t, "--config-net", "--", "sleep", "0.5")
			if r.Code != 0 || !strings.Contains(r.Stderr, "(openat) by thread") {
				t.Errorf("gopasta making a forbidden call in log mode: got %s, want exit 0 and the call on stderr", r)
			}
			b, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("report file: %s", b)
			lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			want := fmt.Sprintf("openat (%d) pid ", info.SyscallNames["openat"])
			if len(lines) != 1 || !strings.HasPrefix(lines[0], want) || !strings.Contains(lines[0], " tid ") ||
				!strings.HasSuffix(lines[0], " --config-net -- sleep 0.5)") {
				t.Errorf("report file: got %q, want one line %q...", b, want)
			}
		})
	}
}

// TestSandboxRunAs: --runas picks the identity root drops to; gopasta's
// own user namespace translates the caller's ids; bad values are one
// error line and exit 1.
func TestSandboxRunAs(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			runAs, want := "4321:4322", confinement{uid: "4321\t4321\t4321\t4321", gid: "4322\t4322\t4322\t4322", capEff: "0000000000000000"}
			if !u.Root() {
				// Rootless: the user itself is the only id there is.
				runAs, want = strconv.Itoa(u.UID)+":"+strconv.Itoa(u.GID), wantConfinement(u)
			}
			pidFile := filepath.Join(nstest.TempDir(t), "gopasta.pid")
			a := e.startAgent(t, "--config-net", "-P", pidFile, "--runas", runAs)
			pid, err := nstest.ReadPIDFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			checkConfined(t, pid, want)
			port := e.staticPort(t)
			a.serve(t, port)
			reachableWithin(t, e, "auto", port, 5*time.Second, pathNamed("splice4"))
			a.exit()
			if r, ok := a.proc.Wait(10 * time.Second); !ok || r.Code != 0 {
				t.Errorf("gopasta --runas %s: got %s, want exit 0", runAs, r)
			}

			for _, bad := range []struct{ value, want string }{
				{"gopasta-e2e-no-such-user", `no such user "gopasta-e2e-no-such-user"`},
				{"0:x-gopasta-e2e-no-such-group", `no such group "x-gopasta-e2e-no-such-group"`},
				{"70000000000", "user ids are 0 to 4294967294"},
			} {
				r := e.run(t, "--runas", bad.value, "--", "true")
				lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
				if r.Code != 1 || len(lines) != 1 || !strings.Contains(lines[0], bad.want) {
					t.Errorf("--runas %s: got exit %d, stderr %q; want exit 1 and one line with %q", bad.value, r.Code, r.Stderr, bad.want)
				}
			}
			if !u.Root() {
				// Ids other than the user's own are not there to become.
				r := e.run(t, "--runas", "4321", "--", "true")
				lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
				if r.Code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "not mapped") {
					t.Errorf("rootless --runas 4321: got exit %d, stderr %q; want exit 1 and one line saying it is not mapped", r.Code, r.Stderr)
				}
			}
		})
	}
}

// TestSandboxRunAsDaemon: rootless, attaching by PID re-executes gopasta
// in the target's user namespace, whose ids --runas names from outside;
// the copy that goes to the background must translate them too (it once
// took them as ids of the target's namespace and failed to confine).
func TestSandboxRunAsDaemon(t *testing.T) {
	for _, u := range nstest.Users() {
		if u.Root() {
			continue // root joins without a user namespace of the target's
		}
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			sleeper := e.startSleeper(t)
			pidFile := filepath.Join(nstest.TempDir(t), "gopasta.pid")
			runAs := strconv.Itoa(u.UID) + ":" + strconv.Itoa(u.GID)
			r := e.run(t, "--config-net", "-P", pidFile, "--runas", runAs, strconv.Itoa(sleeper.PID()))
			if r.Code != 0 {
				t.Fatalf("gopasta --runas %s PID (to the background): got exit %d, want 0\n%s", runAs, r.Code, r)
			}
			pid, err := nstest.ReadPIDFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			nstest.KillOnCleanup(t, pid)
			checkConfined(t, pid, wantConfinement(u))
			_ = sleeper.Signal(syscall.SIGKILL)
			if _, err := nstest.WaitGone(pid, 5*time.Second); err != nil {
				t.Errorf("daemon: %v after the namespace went, want it gone", err)
			}
		})
	}
}

// TestSandboxInheritedFds: a descriptor leaked by whoever started gopasta
// is closed before anything runs (the traffic-carrying process holds no
// descriptor to a file of the host but its log, pcap and pid directory).
func TestSandboxInheritedFds(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			// What gopasta holds as users run it: in the seccomp
			// report mode it holds the report file too.
			e.gopastaEnv = []string{nstest.SeccompEnv + "="}
			dir := nstest.TempDir(t)
			pidFile := filepath.Join(dir, "gopasta.pid")
			leaked := filepath.Join(dir, "leaked")
			if err := os.WriteFile(leaked, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			script := "exec 7<" + leaked + "; exec " + shellJoin(e.gopasta("--config-net", "-P", pidFile, "--", "sleep", "30"))
			p := e.h.Start(u, "sh", "-c", script)
			t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
			var pid int
			if err := nstest.WaitFor(10*time.Second, func() (err error) { pid, err = nstest.ReadPIDFile(pidFile); return err }); err != nil {
				t.Fatalf("pid file: %v", err)
			}
			nstest.KillOnCleanup(t, pid)
			checkConfined(t, pid, wantConfinement(u))
			fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, fd := range fds {
				target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
				if target == leaked {
					t.Errorf("gopasta pid %d: fd %s is the leaked %s, want it closed", pid, fd.Name(), leaked)
				}
				// Left open on purpose: /proc tables and sysctls read at
				// run time (auto forwarding, the namespace watch).
				if strings.HasPrefix(target, "/") && !strings.HasPrefix(target, "/dev/") && !strings.HasPrefix(target, "/proc/") && !strings.HasPrefix(target, dir) {
					t.Errorf("gopasta pid %d: fd %s names host file %s, want none", pid, fd.Name(), target)
				}
			}
		})
	}
}

// TestSandboxSignals: signals gopasta receives reach the command through
// the namespace's init once gopasta is confined, including a root command
// under a gopasta that dropped to nobody (kill(2) is refused there; the
// control pipe is not), and gopasta exits with the command's status.
func TestSandboxSignals(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, sig := range []struct {
				sig  syscall.Signal
				name string
				want int
			}{{syscall.SIGINT, "INT", 42}, {syscall.SIGTERM, "TERM", 43}, {syscall.SIGHUP, "HUP", 44}, {syscall.SIGQUIT, "QUIT", 45}} {
				t.Run(sig.name, func(t *testing.T) {
					e := newEnv(t, u, hostSetup{})
					dir := nstest.TempDir(t)
					pidFile, ready := filepath.Join(dir, "gopasta.pid"), filepath.Join(dir, "ready")
					script := fmt.Sprintf("trap 'exit %d' %s; touch %s; while :; do sleep 0.1; done", sig.want, sig.name, ready)
					p := e.start(t, "--config-net", "-P", pidFile, "--", "sh", "-c", script)
					t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
					var pid int
					err := nstest.WaitFor(10*time.Second, func() (err error) {
						if _, err = os.Stat(ready); err != nil {
							return err
						}
						pid, err = nstest.ReadPIDFile(pidFile)
						return err
					})
					if err != nil {
						t.Fatalf("command not running: %v", err)
					}
					checkConfined(t, pid, wantConfinement(u))
					// To the process we started: rootless, that forwards
					// to the confined copy, which forwards to the init.
					if err := p.Signal(sig.sig); err != nil {
						t.Fatal(err)
					}
					r, ok := p.Wait(10 * time.Second)
					if !ok || r.Code != sig.want || r.Signaled {
						t.Errorf("gopasta after SIG%s: got %s, want exit %d", sig.name, r, sig.want)
					}
				})
			}
		})
	}
}

// TestSandboxLogRotation: --log-size makes room in the log in place
// (pread64, pwrite64 and ftruncate on the descriptor opened before the
// sandbox, O_APPEND off and on with fcntl) while gopasta is confined;
// the lines come from control socket updates, each of which lists its
// rules, and the socket is removed at exit through its directory.
func TestSandboxLogRotation(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			c := newCtl(t, e)
			dir := nstest.TempDir(t)
			pidFile, logFile := filepath.Join(dir, "gopasta.pid"), filepath.Join(dir, "gopasta.log")
			a := e.startAgent(t, "--config-net", "-P", pidFile, "-l", logFile, "--log-size", "40960", "-c", c.sock, "-t", "none", "-u", "none")
			pid, err := nstest.ReadPIDFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			checkConfined(t, pid, wantConfinement(u))
			// 100 rules (every other port) are a hundred log lines.
			var ports []string
			for p := 20001; p < 20200; p += 2 {
				ports = append(ports, strconv.Itoa(p))
			}
			spec := strings.Join(ports, ",")
			err = nstest.WaitFor(30*time.Second, func() error {
				c.must(t, "-t", spec)
				c.must(t, "-t", "none")
				b, _ := os.ReadFile(logFile)
				if !strings.Contains(string(b), "older lines dropped") {
					return fmt.Errorf("no rotation yet (%d bytes)", len(b))
				}
				return nil
			})
			if err != nil {
				t.Errorf("log %s: %v", logFile, err)
			}
			if fi, err := os.Stat(logFile); err != nil || fi.Size() > 40960 {
				t.Errorf("log %s: got %v bytes (%v), want at most 40960", logFile, fi.Size(), err)
			}
			checkConfined(t, pid, wantConfinement(u))
			a.exit()
			if r, ok := a.proc.Wait(10 * time.Second); !ok || r.Code != 0 || r.Signaled {
				t.Errorf("gopasta: got %s, want exit 0", r)
			}
			if _, err := os.Lstat(c.sock); !os.IsNotExist(err) {
				t.Errorf("control socket after exit: got %v, want it removed", err)
			}
		})
	}
}

// TestVhostSandbox (in the vmtest guest, which has /dev/vhost-net): with
// --vhost=on the process that carries the traffic is confined as in
// TestSandbox while 10 MiB go each way through vhost-net.
func TestVhostSandbox(t *testing.T) {
	forGuestUsers(t, func(t *testing.T, u guestUser, h *guestHost) {
		pidFile := filepath.Join(nstest.TempDir(t), "gopasta.pid")
		cmds := putGet(h.tcp.Addr().String())
		// The command lingers after the transfers so that the
		// process can be read while it still runs.
		script := shellJoin(selfPeer(t, cmds...)) + "; sleep 2"
		done := make(chan guestRun, 1)
		go func() {
			done <- guestGopasta(t, u, []string{"--vhost=on", "--config-net", "-P", pidFile}, []string{"sh", "-c", script})
		}()
		var pid int
		err := nstest.WaitFor(60*time.Second, func() (err error) { pid, err = nstest.ReadPIDFile(pidFile); return err })
		if err != nil {
			t.Fatalf("pid file: %v", err)
		}
		want := wantConfinement(nstest.User{UID: u.uid, GID: u.uid})
		checkConfined(t, pid, want)
		r := <-done
		if !r.done(cmds...) {
			t.Fatalf("got %v, want 10 MiB each way verified", r)
		}
		if strings.Contains(r.stderr, "seccomp") {
			t.Errorf("a seccomp report: %s", r.stderr)
		}
	})
}
