package e2e

// The OCI hook (gopasta --oci-hook), driven directly: the runtime's side is
// played by the test (a state on standard input), the container by a
// sleeper in namespaces of its own. Also the helpers the runtime tests
// (oci_podman_test.go, oci_runc_test.go, rootlesskit_test.go) share: tools
// that must be installed in CI, a user with subordinate id ranges, the
// busybox root file system, and finding gopasta's processes.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/ocihook"
)

// ciEnv, set to 1 by .ci/run, says every program these tests drive is
// installed: a missing one fails the test instead of skipping it.
const ciEnv = "GOPASTA_CI"

// requireTool returns the absolute path of program name, looked up on PATH
// and in /usr/local/bin (where .ci/run installs rootlesskit), or skips the
// test with why (fails it in CI).
func requireTool(t *testing.T, name, why string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if _, err2 := os.Stat("/usr/local/bin/" + name); err2 == nil {
			return "/usr/local/bin/" + name
		}
		missing(t, fmt.Sprintf("%s not installed (%s): %v", name, why, err))
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// missing skips the test for want of something .ci/run installs, or fails
// it in CI.
func missing(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv(ciEnv) == "1" {
		t.Fatalf("%s=1 and %s; .ci/run installs it", ciEnv, msg)
	}
	t.Skipf("skipping: %s; `bash .ci/run` shows how to install it", msg)
}

// hookState is the OCI state a runtime hands the hook for pid, with
// annotation io.gopasta.args = args unless args is nil.
func hookState(pid int, args *string) string {
	st := map[string]any{
		"ociVersion": "1.0.2", "id": "e2e-" + strconv.Itoa(pid), "status": "creating",
		"pid": pid, "bundle": "/nonexistent/bundle",
	}
	if args != nil {
		st["annotations"] = map[string]string{ocihook.ArgsAnnotation: *args}
	}
	b, _ := json.Marshal(st)
	return string(b)
}

func ptr(s string) *string { return &s }

// runHook runs `gopasta --oci-hook hookArgs...` as e.u inside the host
// namespace with stdin on its standard input, as a runtime does.
func (e *env) runHook(t *testing.T, stdin string, hookArgs ...string) (nstest.Result, time.Duration) {
	t.Helper()
	f := filepath.Join(nstest.TempDir(t), "state.json")
	if err := os.WriteFile(f, []byte(stdin), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := slices.Concat([]string{"sh", "-c", `exec "$0" "$@" <` + f}, e.gopasta(append([]string{"--oci-hook"}, hookArgs...)...))
	start := time.Now()
	r := e.runArgv(t, argv...)
	return r, time.Since(start)
}

// TestOCIHookDirect: the hook, as root and as uid 65534, configures the
// namespace of the state's pid, forwards the annotation's port, logs to the
// annotation's -l file, returns once it is ready, and quits with the
// container's process; a prestart-time state (status created) works too.
func TestOCIHookDirect(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, status := range []string{"creating", "created"} {
				t.Run(status, func(t *testing.T) {
					e := newEnv(t, u, hostSetup{})
					sleeper := e.startSleeper(t)
					pid := sleeper.PID()
					dir := nstest.TempDir(t)
					log, pidFile := filepath.Join(dir, "hook.log"), filepath.Join(dir, "gopasta.pid")
					const port = 18090
					args := fmt.Sprintf("-t %d -l %s -P %s", port, log, pidFile)
					state := strings.Replace(hookState(pid, &args), `"creating"`, strconv.Quote(status), 1)
					r, took := e.runHook(t, state, "--config-net")
					mustSucceed(t, "gopasta --oci-hook", r)
					if r.Stdout != "" || r.Stderr != "" || r.PipesHeld {
						t.Errorf("hook: got stdout %q stderr %q pipes held %v, want nothing printed (there is -l) and the pipes closed", r.Stdout, r.Stderr, r.PipesHeld)
					}
					t.Logf("the hook returned after %v", took)
					gp, err := nstest.ReadPIDFile(pidFile)
					if err != nil {
						t.Fatalf("gopasta's pid file after the hook returned: %v", err)
					}
					nstest.KillOnCleanup(t, gp)
					// Ready when the hook returned: no waiting here.
					ls, err := linksOfPID(e, pid)()
					if err != nil {
						t.Fatal(err)
					}
					if l, ok := nstest.FindLink(ls, nstest.HostIfName); !ok || !l.Up() || !slices.Contains(l.GlobalAddrs(), fmt.Sprintf("%s/%d", nstest.HostAddr4, nstest.HostPrefix4)) {
						t.Fatalf("container's interfaces when the hook returned: got %+v, want %s up with %s/%d", ls, nstest.HostIfName, nstest.HostAddr4, nstest.HostPrefix4)
					}
					a := e.startAgentIn(t, pid)
					a.serve(t, port)
					if err := e.put(netip.Addr{}, addrPort("127.0.0.1", port), 100000, 7); err != nil {
						t.Errorf("host -> the annotation's forwarded port %d: %v", port, err)
					}
					b, err := os.ReadFile(log)
					if err != nil || !strings.Contains(string(b), "namespace interface") {
						t.Errorf("-l %s from the annotation: got %q (%v), want gopasta's log", log, b, err)
					}
					a.exit()
					sleeper.Signal(syscall.SIGKILL)
					if _, err := nstest.WaitGone(gp, 5*time.Second); err != nil {
						t.Errorf("gopasta (pid %d) after the container's process ended: %v, want it gone within %v", gp, err, quitWithin)
					}
				})
			}
		})
	}
}

// TestOCIHookBadInput: each kind of bad input is one line on stderr naming
// the problem, exit status 1, nothing on stdout, nothing left running and
// nothing done to the container's namespace.
func TestOCIHookBadInput(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			target := e.startSleeper(t).PID()
			gone := exec.Command("true")
			if err := gone.Run(); err != nil {
				t.Fatal(err)
			}
			host := e.h.Start(u, "sleep", "300") // in the host namespace itself
			marker := filepath.Join(nstest.TempDir(t), "must-not-run")
			for _, tc := range []struct {
				name, stdin string
				hookArgs    []string
				want        string
			}{
				{"empty", "", nil, "gopasta: OCI state on standard input: empty, want the container's state as a JSON object"},
				{"malformed JSON", `{"ociVersion":"1.0.2","pid":` + strconv.Itoa(target), nil, "gopasta: OCI state on standard input: malformed JSON"},
				{"not an object", `[1]`, nil, "gopasta: OCI state on standard input: got a JSON array, want an object"},
				{"no pid", strings.Replace(hookState(target, nil), `"pid":`+strconv.Itoa(target)+",", "", 1), nil, "gopasta: OCI state on standard input: pid: missing"},
				{"pid as a string", strings.Replace(hookState(target, nil), `"pid":`+strconv.Itoa(target), `"pid":"`+strconv.Itoa(target)+`"`, 1), nil, "gopasta: OCI state on standard input: pid: got a string"},
				{"stopped", strings.Replace(hookState(target, nil), `"creating"`, `"stopped"`, 1), nil, "gopasta: OCI state on standard input: status: the container has stopped"},
				{"pid gone", hookState(gone.Process.Pid, nil), nil, fmt.Sprintf("gopasta: container process %d: no such process (the container is gone)", gone.Process.Pid)},
				{"host's namespace", hookState(host.PID(), nil), nil, fmt.Sprintf("gopasta: container process %d: shares the network namespace the hook runs in (the host's)", host.PID())},
				{"unterminated quote", hookState(target, ptr("-t '8080 -l "+marker)), nil, "gopasta: annotation io.gopasta.args: unterminated single quote (at byte 3)"},
				{"unknown option", hookState(target, ptr("-l "+marker+" --bogus")), nil, "gopasta: annotation io.gopasta.args: unknown option --bogus"},
				{"a command", hookState(target, ptr("-l "+marker+" sh -c true")), nil, `gopasta: annotation io.gopasta.args: "sh" is not an option: a command or a PID makes no sense there`},
				{"a PID", hookState(target, ptr("-l "+marker+" "+strconv.Itoa(target))), nil, `is not an option: a command or a PID makes no sense there`},
				{"netns", hookState(target, ptr("-l "+marker+" --netns /proc/1/ns/net")), nil, "gopasta: annotation io.gopasta.args: --netns makes no sense there"},
				{"foreground", hookState(target, ptr("-l "+marker+" -f")), nil, "gopasta: annotation io.gopasta.args: --foreground makes no sense there"},
				{"bad port", hookState(target, ptr("-l "+marker+" -t 70000")), nil, `gopasta: annotation io.gopasta.args: invalid --tcp-ports value "70000"`},
				{"conflict with the hook's options", hookState(target, ptr("-l "+marker+" -t 80")), []string{"--no-tcp"}, "gopasta: annotation io.gopasta.args: --tcp-ports given but --no-tcp disables TCP"},
				{"a PID on the hook's command line", hookState(target, nil), []string{strconv.Itoa(target)}, "gopasta: --oci-hook takes no PID or command"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					r, _ := e.runHook(t, tc.stdin, tc.hookArgs...)
					lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
					if r.Code != 1 || r.Stdout != "" || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) && !strings.Contains(lines[0], tc.want) {
						t.Errorf("got exit %d, stdout %q, stderr %q; want exit 1, nothing, one line with %q", r.Code, r.Stdout, r.Stderr, tc.want)
					}
					if _, err := os.Stat(marker); err == nil {
						t.Errorf("got a log file %s, want gopasta never started", marker)
					}
				})
			}
			if ps := gopastaProcs(t, u.UID, e.bin, strconv.Itoa(target)); len(ps) > 0 {
				t.Errorf("after the bad inputs: got gopasta processes %v attached to %d, want none", ps, target)
			}
			ls, err := linksOfPID(e, target)()
			if err != nil {
				t.Fatal(err)
			}
			if names := nstest.Names(ls); !slices.Equal(names, []string{"lo"}) {
				t.Errorf("the container's interfaces after the bad inputs: got %q, want only lo", names)
			}
		})
	}
}

// gopastaProc is a running gopasta process.
type gopastaProc struct {
	pid  int
	args []string
}

func (p gopastaProc) String() string { return fmt.Sprintf("%d %q", p.pid, p.args) }

// gopastaProcs lists the processes of real uid running the binary bin
// whose arguments include every one of marks.
func gopastaProcs(t *testing.T, uid int, bin string, marks ...string) []gopastaProc {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []gopastaProc
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + d.Name()
		if exe, err := os.Readlink(dir + "/exe"); err != nil || strings.TrimSuffix(exe, " (deleted)") != bin {
			continue
		}
		if procUID(dir) != servingUID(uid) {
			continue
		}
		b, err := os.ReadFile(dir + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if hasAll(args, marks) {
			out = append(out, gopastaProc{pid, args})
		}
	}
	return out
}

// hasAll says whether every one of marks is part of some argument.
func hasAll(args, marks []string) bool {
	for _, m := range marks {
		if !slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, m) }) {
			return false
		}
	}
	return true
}

// procUID is the real uid of the process at dir (/proc/PID), or -1.
func procUID(dir string) int {
	f, err := os.Open(dir + "/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "Uid:"); ok {
			if fs := strings.Fields(rest); len(fs) > 0 {
				n, _ := strconv.Atoi(fs[0])
				return n
			}
		}
	}
	return -1
}

// waitNoGopasta waits until no process gopastaProcs would list is left.
func waitNoGopasta(t *testing.T, uid int, bin string, timeout time.Duration, marks ...string) {
	t.Helper()
	var left []gopastaProc
	err := nstest.WaitFor(timeout, func() error {
		if left = gopastaProcs(t, uid, bin, marks...); len(left) > 0 {
			return fmt.Errorf("still running: %v", left)
		}
		return nil
	})
	if err != nil {
		t.Errorf("gopasta processes of uid %d: got %v %v after the container went, want none", uid, left, timeout)
	}
}

// subidUserPrefix starts the names of the users subidUser creates:
// gpe2e-PID-RANDOM, PID being the test process's.
const subidUserPrefix = "gpe2e-"

// subidUser creates a system user with subordinate uid and gid ranges, as
// rootless podman and RootlessKit need, and removes it (and everything it
// runs) when the test ends. Its range starts at 1000000 + uid*65536, apart
// from every other such user. The files useradd and usermod lock may be
// busy with another test run: each step is retried for a while. Users left
// by earlier test processes that were killed are removed on the way.
func subidUser(t *testing.T) nstest.User {
	t.Helper()
	nstest.RequireRoot(t)
	requireTool(t, "newuidmap", "uidmap: rootless podman and RootlessKit map subordinate ids with it")
	var b [3]byte
	rand.Read(b[:])
	name := fmt.Sprintf("%s%d-%s", subidUserPrefix, os.Getpid(), hex.EncodeToString(b[:]))
	retry := func(argv ...string) {
		t.Helper()
		prog := argv[0]
		if p, err := exec.LookPath(prog); err == nil {
			prog = p
		} else {
			prog = "/usr/sbin/" + prog // root's PATH has it; a test's may not
		}
		var out []byte
		err := nstest.WaitFor(30*time.Second, func() (err error) {
			out, err = exec.Command(prog, argv[1:]...).CombinedOutput()
			if _, ok := err.(*exec.ExitError); err != nil && !ok {
				return nstest.Stop(err)
			}
			return err
		})
		if err != nil {
			t.Fatalf("%q: %v: %s", argv, err, out)
		}
	}
	sweepSubidUsers(t, retry)
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		fd, err := os.OpenFile(f, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fd.Close()
	}
	retry("useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name)
	t.Cleanup(func() {
		lu, err := user.Lookup(name)
		if err == nil {
			uid, _ := strconv.Atoi(lu.Uid)
			killUser(t, uid)
		}
		retry("userdel", name)
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(name+":")) {
				t.Errorf("%s: got an entry of %s left after userdel, want none", f, name)
			}
		}
	})
	lu, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(lu.Uid)
	gid, _ := strconv.Atoi(lu.Gid)
	first := 1000000 + uid*65536
	ids := fmt.Sprintf("%d-%d", first, first+65535)
	retry("usermod", "--add-subuids", ids, "--add-subgids", ids, name)
	return nstest.User{Name: name, UID: uid, GID: gid}
}

// sweepSubidUsers removes the users subidUser made in test processes that
// are gone, and whatever still runs as them.
func sweepSubidUsers(t *testing.T, userdel func(argv ...string)) {
	t.Helper()
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		rest, ok := strings.CutPrefix(f[0], subidUserPrefix)
		if !ok || len(f) < 3 {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidStr); err != nil || nstest.PIDAlive(pid) {
			continue
		}
		if uid, err := strconv.Atoi(f[2]); err == nil {
			killUser(t, uid)
		}
		t.Logf("removing %s, left by test process %s", f[0], pidStr)
		userdel("userdel", f[0])
	}
}

// killUser SIGKILLs every process of uid until none is left (podman's
// pause process and conmon leave the test's process groups), bounded.
func killUser(t *testing.T, uid int) {
	err := nstest.WaitFor(10*time.Second, func() error {
		ents, _ := os.ReadDir("/proc")
		n := 0
		for _, d := range ents {
			pid, err := strconv.Atoi(d.Name())
			if err != nil || procUID("/proc/"+d.Name()) != uid {
				continue
			}
			syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
		if n > 0 {
			return fmt.Errorf("%d processes left", n)
		}
		return nil
	})
	if err != nil {
		t.Errorf("killing the processes of uid %d: %v", uid, err)
	}
}

// userDir makes a directory under parent owned by u, with mode perm.
func userDir(t *testing.T, u nstest.User, parent, name string, perm os.FileMode) string {
	t.Helper()
	d := filepath.Join(parent, name)
	if err := os.MkdirAll(d, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, perm); err != nil {
		t.Fatal(err)
	}
	return d
}

// busyboxRoot fills dir with a minimal root file system: busybox-static as
// /bin/busybox, the applets the containers use, empty mount points.
func busyboxRoot(t *testing.T, dir string) {
	t.Helper()
	bb := requireTool(t, "busybox", "busybox-static: the containers' userland")
	if f, err := elf.Open(bb); err == nil {
		dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
		f.Close()
		if dynamic {
			missing(t, bb+" is dynamically linked; the containers need busybox-static")
		}
	}
	for _, d := range []string{"bin", "proc", "sys", "dev", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"sh", "ip", "nc", "sleep", "cat", "echo", "printf", "true", "hostname"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
}

// containerScript is what the test containers run: print their addresses,
// ask the host's service (the transfer protocol's 'A': "who am I to you")
// through the gateway, which gopasta maps to the host's loopback, and
// through a host address, then serve token on port 80 (busybox nc: its wget
// crashes on Debian 12) and say "ready".
func containerScript(hostPort int, token string) string {
	return fmt.Sprintf(`ip -o addr show
echo "via-gateway $(printf A | nc -w 5 %[1]s %[3]d)"
echo "via-host $(printf A | nc -w 5 %[2]s %[3]d)"
nc -ll -p 80 -e echo %[4]s &
echo ready
wait`, nstest.HostGW4, peer4, hostPort, token)
}

// checkContainerOutput checks what containerScript printed up to "ready".
func checkContainerOutput(t *testing.T, out string) {
	t.Helper()
	if !strings.Contains(out, " "+nstest.HostAddr4+"/") {
		t.Errorf("container's addresses: got %q, want %s (the host's, copied by --config-net)", out, nstest.HostAddr4)
	}
	if !strings.Contains(out, "via-gateway 127.0.0.1\n") {
		t.Errorf("container -> %s (gateway, mapped to the host's loopback): got %q, want the host's service to see 127.0.0.1", nstest.HostGW4, out)
	}
	if !strings.Contains(out, "via-host "+nstest.HostAddr4+"\n") && !strings.Contains(out, "via-host "+peer4+"\n") {
		t.Errorf("container -> %s (a host address): got %q, want the host's service to answer", peer4, out)
	}
}

// readToken connects from the host namespace to dst and reads one line.
func (e *env) readToken(dst netip.AddrPort) (string, error) {
	c, err := e.dial("tcp", netip.Addr{}, dst)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// waitToken retries readToken until it gives want, bounded.
func (e *env) waitToken(t *testing.T, dst netip.AddrPort, want string) {
	t.Helper()
	var got string
	err := nstest.WaitFor(10*time.Second, func() (err error) {
		if got, err = e.readToken(dst); err != nil {
			return err
		}
		if got != want {
			return nstest.Stop(fmt.Errorf("got %q, want %q", got, want))
		}
		return nil
	})
	if err != nil {
		t.Errorf("host -> forwarded port %v: %v", dst, err)
	}
}

// waitOutput waits until p has printed a line "ready" or exited.
func waitOutput(t *testing.T, p *nstest.Proc, what string, timeout time.Duration) string {
	t.Helper()
	var out string
	err := nstest.WaitFor(timeout, func() error {
		out, _ = p.Output()
		if strings.Contains(out, "ready\n") {
			return nil
		}
		select {
		case <-p.Done():
			o, er := p.Output()
			return nstest.Stop(fmt.Errorf("exited early:\nstdout: %s\nstderr: %s", o, er))
		default:
		}
		return fmt.Errorf("no ready line yet")
	})
	if err != nil {
		_, er := p.Output()
		t.Fatalf("%s: %v\nstderr so far: %s", what, err, er)
	}
	return out
}

// freePort returns a TCP port nothing listens on in the host namespace now.
func (e *env) freePort(t *testing.T) int {
	t.Helper()
	l, err := e.h.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
