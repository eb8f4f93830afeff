package nstest

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHostNSFixture(t *testing.T) {
	for _, u := range Users() {
		t.Run(u.Name, func(t *testing.T) {
			h := HostNS(t)
			r := h.Run(u, "id", "-u")
			if got, want := strings.TrimSpace(r.Stdout), strconv.Itoa(u.UID); r.Code != 0 || got != want {
				t.Fatalf("id -u in host ns: got %q (%s), want %q", got, r, want)
			}
			r = h.Run(u, "ip", "-j", "addr")
			links, err := ParseLinks(r.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			eth, ok := FindLink(links, HostIfName)
			if !ok {
				t.Fatalf("links: got %v, want one named %s", Names(links), HostIfName)
			}
			got := eth.GlobalAddrs()
			for _, want := range []string{"192.0.2.1/24", "2001:db8::1/64"} {
				if !slices.Contains(got, want) {
					t.Errorf("%s addresses: got %v, want %s among them", HostIfName, got, want)
				}
			}
			if lo, _ := FindLink(links, "lo"); !lo.Up() {
				t.Errorf("lo flags: got %v, want UP", lo.Flags)
			}
			for _, fam := range []struct{ flag, gw string }{{"-4", HostGW4}, {"-6", HostGW6}} {
				r := h.Run(u, "ip", "-j", fam.flag, "route")
				rs, err := ParseRoutes(r.Stdout)
				if err != nil {
					t.Fatal(err)
				}
				d, ok := DefaultRoute(rs)
				if !ok || d.Gateway != fam.gw || d.Dev != HostIfName {
					t.Errorf("ip %s route default: got %+v, want via %s dev %s", fam.flag, d, fam.gw, HostIfName)
				}
			}
		})
	}
}

func TestHostNSCleanupKillsProcesses(t *testing.T) {
	var pid int
	t.Run("inner", func(t *testing.T) {
		h := HostNS(t)
		p := h.Start(Nobody, "sleep", "300")
		pid = p.PID()
		if !PIDAlive(pid) {
			t.Fatalf("sleep pid %d: got dead, want alive", pid)
		}
	})
	if pid == 0 {
		return // skipped
	}
	if _, err := WaitGone(pid, 5*time.Second); err != nil {
		t.Errorf("after cleanup: %v, want it killed", err)
	}
}

func TestRunTimeoutAndExitCodes(t *testing.T) {
	h := HostNS(t)
	tests := []struct {
		argv     []string
		wantCode int
		wantSig  bool
	}{
		{[]string{"true"}, 0, false},
		{[]string{"sh", "-c", "exit 7"}, 7, false},
		{[]string{"sh", "-c", "kill -TERM $$"}, 143, true},
	}
	for _, tc := range tests {
		r := h.Run(RootUser, tc.argv...)
		if r.Code != tc.wantCode || r.Signaled != tc.wantSig {
			t.Errorf("%q: got code %d signaled %v, want %d %v", tc.argv, r.Code, r.Signaled, tc.wantCode, tc.wantSig)
		}
	}
	// A daemon holding stdout must not hang Run.
	start := time.Now()
	r := h.Run(RootUser, "sh", "-c", "sleep 30 & exit 0")
	if !r.PipesHeld || time.Since(start) > 10*time.Second {
		t.Errorf("backgrounded child holding stdout: got pipesheld=%v after %v, want true within 10s", r.PipesHeld, time.Since(start))
	}
}

func TestReadPIDFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		content string
		want    int
		wantErr bool
	}{
		{"123\n", 123, false},
		{"42", 42, false},
		{"", 0, true},
		{"-5\n", 0, true},
		{"abc\n", 0, true},
	}
	for i, tc := range tests {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPIDFile(p)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ReadPIDFile(%q): got %d, %v, want %d, error %v", tc.content, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestPIDAlive(t *testing.T) {
	if got := PIDAlive(os.Getpid()); !got {
		t.Errorf("PIDAlive(self): got false, want true")
	}
	if got := PIDAlive(1 << 23); got {
		t.Errorf("PIDAlive(2^23): got true, want false")
	}
}

func TestParse(t *testing.T) {
	links, err := ParseLinks(`[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP"],"mtu":65536,"addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host"}]},{"ifindex":2,"ifname":"eth0","flags":["BROADCAST"],"mtu":1500,"addr_info":[{"family":"inet6","local":"2001:db8::1","prefixlen":64,"scope":"global"}]}]`)
	if err != nil {
		t.Fatal(err)
	}
	lo, _ := FindLink(links, "lo")
	eth, _ := FindLink(links, "eth0")
	if !lo.Up() || eth.Up() || eth.MTU != 1500 {
		t.Errorf("got lo up %v eth0 up %v mtu %d, want true false 1500", lo.Up(), eth.Up(), eth.MTU)
	}
	if got := eth.GlobalAddrs(); !slices.Equal(got, []string{"2001:db8::1/64"}) {
		t.Errorf("GlobalAddrs: got %v, want [2001:db8::1/64]", got)
	}
	if _, err := ParseLinks("not json"); err == nil {
		t.Errorf("ParseLinks(garbage): got nil error, want one")
	}
	rs, err := ParseRoutes(`[{"dst":"default","gateway":"192.0.2.254","dev":"eth0","flags":["onlink"]}]`)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := DefaultRoute(rs); !ok || d.Gateway != "192.0.2.254" {
		t.Errorf("DefaultRoute: got %+v %v, want via 192.0.2.254", d, ok)
	}
}

// TestSeccompReport: report mode makes a report file every uid can append
// to, passes it on to commands, and fails a run whose gopasta wrote to it.
func TestSeccompReport(t *testing.T) {
	t.Setenv(SeccompEnv, "")
	t.Setenv(SeccompReportEnv, "")
	if r, err := StartSeccompReport(); r != nil || err != nil {
		t.Fatalf("not in report mode: got %v, %v, want nothing", r, err)
	}

	// A fresh file, named in the environment and passed on.
	t.Setenv(SeccompEnv, "log")
	r, err := StartSeccompReport()
	if err != nil || r == nil {
		t.Fatalf("report mode: got %v, %v, want a report", r, err)
	}
	defer r.Close()
	if got := os.Getenv(SeccompReportEnv); got != r.Path {
		t.Errorf("%s: got %q, want %q", SeccompReportEnv, got, r.Path)
	}
	for _, p := range []struct {
		path string
		perm os.FileMode
	}{{r.Path, 0o666}, {filepath.Dir(r.Path), 0o755}} {
		if fi, err := os.Stat(p.path); err != nil || fi.Mode().Perm() != p.perm {
			t.Errorf("%s: got %v (%v), want mode %v", p.path, fi.Mode().Perm(), err, p.perm)
		}
	}
	env := Nobody.env()
	for _, want := range []string{SeccompEnv + "=log", SeccompReportEnv + "=" + r.Path} {
		if !slices.Contains(env, want) {
			t.Errorf("commands' environment %q: want %q in it", env, want)
		}
	}
	if lines, err := r.Lines(); len(lines) != 0 || err != nil {
		t.Errorf("a new report: got %q, %v, want no line", lines, err)
	}

	// A given file: only lines appended during the run count, and a
	// passing run with one fails.
	given := filepath.Join(TempDir(t), "report")
	if err := os.WriteFile(given, []byte("earlier (1) pid 1 tid 1 (gopasta)\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(SeccompReportEnv, given)
	line := "openat (257) pid 2 tid 3 (gopasta --config-net)"
	var out strings.Builder
	code := seccompReportMain(func() int {
		f, err := os.OpenFile(given, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || fi.Mode().Perm() != 0o666 {
			t.Errorf("%s during the run: got mode %v (%v), want 0666", given, fi.Mode().Perm(), err)
		}
		f.WriteString(line + "\n")
		return 0
	}, &out)
	if code != 1 || !strings.Contains(out.String(), "\n    "+line+"\n") || strings.Contains(out.String(), "earlier") {
		t.Errorf("a passing run with a report line: got status %d, output %q; want 1 and the line (only)", code, out.String())
	}
	if code := seccompReportMain(func() int { return 0 }, &out); code != 0 {
		t.Errorf("a passing run with no new report line: got status %d, want 0", code)
	}
	if code := seccompReportMain(func() int { return 2 }, &out); code != 2 {
		t.Errorf("a failing run: got status %d, want 2", code)
	}
}
