package ns

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// spawned is a Child plus its captured stdout+stderr.
type spawned struct {
	*Child
	mu  sync.Mutex
	out bytes.Buffer
	eof chan struct{}
}

func (s *spawned) output() string {
	<-s.eof
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// waitOutput waits up to 5 s for the command to print want (output waits
// for the end of it instead).
func (s *spawned) waitOutput(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		ok := strings.Contains(s.out.String(), want)
		s.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("command did not print %q within 5s", want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spawnT spawns argv with output captured and registers cleanup by PID.
func spawnT(t *testing.T, cfg SpawnConfig) *spawned {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	cfg.Stdin, cfg.Stdout, cfg.Stderr = null, w, w
	c, err := Spawn(cfg)
	w.Close()
	if err != nil {
		r.Close()
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSPC) {
			t.Skipf("user namespaces unavailable: %v", err)
		}
		t.Fatalf("Spawn(%q): %v", cfg.Command, err)
	}
	s := &spawned{Child: c, eof: make(chan struct{})}
	go func() {
		defer close(s.eof)
		defer r.Close()
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			s.mu.Lock()
			s.out.Write(buf[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		c.Signal(syscall.SIGKILL)
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Errorf("namespace init %d did not exit after SIGKILL", c.Pid)
		}
	})
	return s
}

// waitT waits for the child with a bound and returns its status.
func waitT(t *testing.T, s *spawned, d time.Duration) int {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(d):
		s.Signal(syscall.SIGKILL)
		t.Fatalf("command did not exit within %v", d)
	}
	st, err := s.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return st
}

func TestSpawnExitStatus(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		argv    []string
		want    int
		wantOut string
	}{
		{"exit7", []string{"sh", "-c", "exit 7"}, 7, ""},
		{"true", []string{"true"}, 0, ""},
		{"killed by TERM", []string{"sh", "-c", "kill -TERM $$"}, 143, ""},
		{"killed by KILL", []string{"sh", "-c", "kill -KILL $$"}, 137, ""},
		{"not found", []string{"gopasta-no-such-command-" + strconv.Itoa(os.Getpid())}, 127, "gopasta: cannot run gopasta-no-such-command-"},
		{"missing path", []string{"/nonexistent/gopasta/cmd"}, 127, "gopasta: cannot run /nonexistent/gopasta/cmd"},
		{"not executable", []string{noexec}, 126, "gopasta: cannot run " + noexec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spawnT(t, SpawnConfig{Command: tc.argv})
			if err := s.Release(); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if got := waitT(t, s, 10*time.Second); got != tc.want {
				t.Errorf("exit status: got %d, want %d (output %q)", got, tc.want, s.output())
			}
			if out := s.output(); !strings.Contains(out, tc.wantOut) {
				t.Errorf("output: got %q, want it to contain %q", out, tc.wantOut)
			}
		})
	}
}

func TestSpawnReleaseGating(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	s := spawnT(t, SpawnConfig{Command: []string{"sh", "-c", "touch " + marker}})
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("command ran before Release")
	}
	if err := s.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := s.Release(); !errors.Is(err, ErrReleased) {
		t.Errorf("second Release: got %v, want ErrReleased", err)
	}
	if got := waitT(t, s, 10*time.Second); got != 0 {
		t.Fatalf("exit status: got %d, want 0 (output %q)", got, s.output())
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("command did not run after Release: %v", err)
	}
}

// If gopasta goes away before Release, the init must quietly give up.
func TestSpawnParentGoneBeforeRelease(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	s := spawnT(t, SpawnConfig{Command: []string{"sh", "-c", "touch " + marker}})
	s.ctl.Close() // what the kernel does when gopasta dies
	if got := waitT(t, s, 10*time.Second); got != 1 {
		t.Errorf("exit status: got %d, want 1", got)
	}
	if out := s.output(); out != "" {
		t.Errorf("output: got %q, want none", out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("command ran although it was never released")
	}
}

func TestSpawnSignalBeforeRelease(t *testing.T) {
	s := spawnT(t, SpawnConfig{Command: []string{"sleep", "100"}})
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if got := waitT(t, s, 5*time.Second); got != 143 {
		t.Errorf("exit status: got %d, want 143", got)
	}
	if err := s.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit: got %v, want os.ErrProcessDone", err)
	}
}

// The hang-up tests hold under nohup too.
func init() { nstest.DefaultHangup() }

func TestSpawnSignalForwarding(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		want int
	}{
		{syscall.SIGTERM, 143},
		{syscall.SIGHUP, 129},
		{syscall.SIGUSR1, 138},
		{syscall.SIGKILL, 137},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			s := spawnT(t, SpawnConfig{Command: []string{"sh", "-c", "echo ready; exec sleep 100"}})
			if err := s.Release(); err != nil {
				t.Fatal(err)
			}
			s.waitOutput(t, "ready")
			time.Sleep(100 * time.Millisecond) // let sh exec sleep
			start := time.Now()
			if err := s.Signal(tc.sig); err != nil {
				t.Fatalf("Signal: %v", err)
			}
			if got := waitT(t, s, 3*time.Second); got != tc.want {
				t.Errorf("exit status: got %d, want %d", got, tc.want)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("exit took %v after the signal, want under 1s", d)
			}
		})
	}
}

// The init reaps orphans: a grandchild whose parent exited must not stay a
// zombie in the PID namespace.
func TestSpawnReapsOrphans(t *testing.T) {
	s := spawnT(t, SpawnConfig{Command: []string{"sh", "-c",
		`sh -c 'true & sleep 0.05 & exit 0'; sleep 0.5; for f in /proc/[0-9]*/stat; do cat $f; echo; done`}})
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	if got := waitT(t, s, 10*time.Second); got != 0 {
		t.Fatalf("exit status: got %d, want 0 (output %q)", got, s.output())
	}
	for _, line := range strings.Split(s.output(), "\n") {
		if i := strings.LastIndexByte(line, ')'); i >= 0 && strings.HasPrefix(line[i:], ") Z") {
			t.Errorf("zombie left in the namespace: %s", line)
		}
	}
}

func TestSpawnNamespaces(t *testing.T) {
	t.Run("root", func(t *testing.T) {
		if os.Getuid() != 0 && os.Getenv(envNobodyTest) == "" {
			t.Skip("needs root")
		}
		checkSpawnNamespaces(t, false)
	})
	t.Run("nobody", func(t *testing.T) {
		if asNobody(t) {
			checkSpawnNamespaces(t, false)
		}
	})
	// The rootless set-up gopasta uses: re-executed in a user namespace of
	// its own, it spawns without another one and can join the netns.
	t.Run("nobody reexec", func(t *testing.T) {
		if asNobody(t) && inOwnUserNS(t) {
			checkSpawnNamespaces(t, true)
		}
	})
}

func checkSpawnNamespaces(t *testing.T, noUserNS bool) {
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("ip(8) not installed")
	}
	hostname := fmt.Sprintf("gopasta-ns-%d", os.Getpid())
	script := `id -u; id -g; hostname; cat /proc/self/uid_map /proc/self/gid_map /proc/sys/net/ipv4/ping_group_range
echo PIDS $(ls /proc | grep -E '^[0-9]+$')
` + ip + ` -o link | cut -d: -f2 | tr -d ' ' | sed 's/^/LINK /'`
	s := spawnT(t, SpawnConfig{Command: []string{"sh", "-c", script}, Hostname: hostname, NoUserNS: noUserNS})
	if noUserNS || os.Getuid() == 0 { // else see TestEnterRootless/nobody
		th, err := Enter(s.NetNSPath())
		if err != nil {
			t.Fatalf("Enter(%s): %v", s.NetNSPath(), err)
		}
		var names []string
		if err := th.Do(func() error {
			ifs, err := net.Interfaces()
			for _, i := range ifs {
				names = append(names, i.Name)
			}
			return err
		}); err != nil {
			t.Fatalf("Do: %v", err)
		}
		th.Close()
		if strings.Join(names, ",") != "lo" {
			t.Errorf("interfaces seen by a Thread in the child's netns: got %v, want only lo", names)
		}
	}
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	if got := waitT(t, s, 10*time.Second); got != 0 {
		t.Fatalf("exit status: got %d, want 0 (output %q)", got, s.output())
	}
	lines := strings.Split(strings.TrimSpace(s.output()), "\n")
	t.Logf("inside:\n%s", s.output())
	if len(lines) < 8 {
		t.Fatalf("got %d lines of output, want at least 8: %q", len(lines), lines)
	}
	field := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	uid, gid := hostUID(t), hostUID(t)
	if !noUserNS {
		uid, gid = os.Getuid(), os.Getgid()
	}
	// Root maps every id to itself (and so allows ping to every group);
	// anyone else maps just their own ids to 0.
	uidMap, gidMap, ping := fmt.Sprintf("0 %d 1", uid), fmt.Sprintf("0 %d 1", gid), "0 0"
	if uid == 0 && gid == 0 {
		uidMap, gidMap, ping = "0 0 4294967295", "0 0 4294967295", "0 2147483647"
	}
	for i, want := range []string{"0", "0", hostname, uidMap, gidMap, ping} {
		if got := field(lines[i]); got != want {
			t.Errorf("line %d: got %q, want %q", i, got, want)
		}
	}
	var links []string
	for _, l := range lines[6:] {
		switch {
		case strings.HasPrefix(l, "PIDS "):
			pids := strings.Fields(l)[1:]
			if len(pids) == 0 || pids[0] != "1" {
				t.Errorf("pids in /proc: got %v, want the namespace's own, starting at 1", pids)
			}
			for _, p := range pids {
				if n, _ := strconv.Atoi(p); n > 50 {
					t.Errorf("pid %d visible: /proc is not the new PID namespace's (%v)", n, pids)
					break
				}
			}
		case strings.HasPrefix(l, "LINK "):
			links = append(links, strings.TrimPrefix(l, "LINK "))
		}
	}
	if strings.Join(links, ",") != "lo" {
		t.Errorf("interfaces: got %v, want only lo", links)
	}
}

func TestSpawnBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  SpawnConfig
	}{
		{"no command", SpawnConfig{}},
		{"empty argv0", SpawnConfig{Command: []string{""}}},
		{"NUL in arg", SpawnConfig{Command: []string{"sh", "a\x00b"}}},
		{"long hostname", SpawnConfig{Command: []string{"true"}, Hostname: strings.Repeat("h", 65)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := Spawn(tc.cfg); err == nil {
				c.Signal(syscall.SIGKILL)
				c.Wait()
				t.Fatal("Spawn: got no error, want one")
			}
		})
	}
}

// Signals sent to the init itself (a terminal's, or a stray kill) must
// neither end it, which would take the whole PID namespace down, nor be
// passed on a second time: only Signal forwards.
func TestSpawnInitIgnoresDirectSignals(t *testing.T) {
	s := spawnT(t, SpawnConfig{Command: []string{"sh", "-c", "trap 'echo got-$1' INT TERM HUP QUIT USR1; echo ready; sleep 1; echo survived"}})
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	s.waitOutput(t, "ready")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGPIPE} {
		if err := syscall.Kill(s.Pid, sig); err != nil {
			t.Fatalf("kill init: %v", err)
		}
	}
	if got := waitT(t, s, 10*time.Second); got != 0 {
		t.Errorf("exit status: got %d, want 0 (output %q)", got, s.output())
	}
	out := s.output()
	if !strings.Contains(out, "survived") || strings.Contains(out, "got-") {
		t.Errorf("output: got %q, want the command untouched", out)
	}
}

// TestSpawnRootKeepsFilePowers: a command spawned by root is root over
// every file, as root is outside: it writes into a directory owned by
// another user (mode 0755), reads root's and another user's 0600 files,
// sees owners as they are, and may switch users (setgroups allowed).
func TestSpawnRootKeepsFilePowers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	rootOnly := filepath.Join(dir, "root-only")
	theirSecret := filepath.Join(dir, "their-secret")
	for _, f := range []struct {
		path, text string
		uid        int
	}{{rootOnly, "root secret\n", 0}, {theirSecret, "their secret\n", 65534}} {
		if err := os.WriteFile(f.path, []byte(f.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f.path, f.uid, f.uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`set -e
echo written >%[1]s/new
chown 65534:65534 %[1]s/new
cat %[2]s %[3]s
stat -c '%%u:%%g' %[1]s
cat /proc/self/setgroups`, theirs, rootOnly, theirSecret)
	s := spawnT(t, SpawnConfig{Command: []string{"sh", "-c", script}})
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	out := s.output()
	if got := waitT(t, s, 10*time.Second); got != 0 {
		t.Fatalf("command: exit status %d, want 0; output:\n%s", got, out)
	}
	if got, want := out, "root secret\ntheir secret\n65534:65534\nallow\n"; got != want {
		t.Errorf("output: got %q, want %q", got, want)
	}
	b, err := os.ReadFile(filepath.Join(theirs, "new"))
	if err != nil || string(b) != "written\n" {
		t.Errorf("file written by the command: got %q, %v; want %q", b, err, "written\n")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(theirs, "new"), &st); err != nil || st.Uid != 65534 || st.Gid != 65534 {
		t.Errorf("owner of the command's file after chown: got %d:%d (%v), want 65534:65534", st.Uid, st.Gid, err)
	}
}

func TestParseIdentityMap(t *testing.T) {
	m := func(first, size int) syscall.SysProcIDMap {
		return syscall.SysProcIDMap{ContainerID: first, HostID: first, Size: size}
	}
	for _, tc := range []struct {
		name string
		in   string
		want []syscall.SysProcIDMap
		ok   bool
	}{
		{"host", "         0          0 4294967295\n", []syscall.SysProcIDMap{m(0, 4294967295)}, true},
		{"container", "0 100000 65536\n", []syscall.SysProcIDMap{m(0, 65536)}, true},
		{"extents", "0 1000 1\n1 100000 65536\n", []syscall.SysProcIDMap{m(0, 1), m(1, 65536)}, true},
		{"empty", "", nil, false},
		{"short line", "0 0\n", nil, false},
		{"not a number", "0 x 1\n", nil, false},
		{"negative", "-1 0 1\n", nil, false},
		{"zero count", "0 0 0\n", nil, false},
		{"past the last id", "1 1 4294967295\n", nil, false},
		{"id too big", "4294967296 0 1\n", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseIdentityMap(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("parseIdentityMap(%q): got error %v, want ok %v", tc.in, err, tc.ok)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("parseIdentityMap(%q): got %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzParseIdentityMap(f *testing.F) {
	f.Add("         0          0 4294967295\n")
	f.Add("0 1000 1\n1 100000 65536\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseIdentityMap(s)
		if err != nil {
			return
		}
		for _, e := range m {
			if e.ContainerID != e.HostID || e.Size <= 0 || e.ContainerID < 0 || e.ContainerID+e.Size > 1<<32-1 {
				t.Errorf("parseIdentityMap(%q): extent %+v, want an identity extent within 32 bits", s, e)
			}
		}
	})
}

// TestSetgroupsAllowed: root of a user namespace whose creator denied
// setgroups (unshare -Ur) must deny it in the namespace it creates too, or
// the kernel refuses the child's maps and the command never starts.
func TestSetgroupsAllowed(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content string // content "" leaves no file: a kernel before 3.19
		want          bool
	}{
		{"allow", "allow\n", true},
		{"deny", "deny\n", false},
		{"no file", "", true},
	}
	for _, tc := range tests {
		path := filepath.Join(dir, tc.name)
		if tc.content != "" {
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got := setgroupsAllowed(path); got != tc.want {
			t.Errorf("setgroups file %q: got allowed=%v, want %v", tc.content, got, tc.want)
		}
	}
}
