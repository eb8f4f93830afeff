package ns

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// Spawn re-executes /proc/self/exe, which in tests is the test binary: turn
// it into the init here, before the testing package parses flags. An init
// function rather than TestMain leaves TestMain free for the package.
func init() {
	if IsInitStub() {
		InitStubMain()
	}
}

const envNobodyTest = "GOPASTA_NS_TEST_AS_NOBODY"

// asNobody makes the calling test run as uid/gid 65534. In the normal (root)
// run it re-executes the test binary for just this test with those
// credentials, reports the result and returns false: the caller returns
// too. In that re-run it returns true and the caller does its checks.
func asNobody(t *testing.T) bool {
	t.Helper()
	if os.Getenv(envNobodyTest) == t.Name() {
		if uid := hostUID(t); uid != 65534 {
			t.Fatalf("re-run as nobody: host uid %d, want 65534", uid)
		}
		return true
	}
	if os.Getuid() != 0 {
		t.Skip("switching to uid 65534 needs root")
	}
	bin := nstest.SelfBinary(t) // one uid 65534 can execute

	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run="+strings.Join(parts, "/"), "-test.v", "-test.count=1", "-test.timeout=80s")
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), envNobodyTest+"="+t.Name(), "TMPDIR=/tmp", "HOME=/tmp")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid 65534:\n%s", out)
	switch {
	case err != nil:
		t.Fatalf("re-run as uid 65534 failed: %v", err)
	case strings.Contains(string(out), "--- SKIP"):
		t.Skip("skipped as uid 65534 (see log)")
	case !strings.Contains(string(out), "--- PASS"):
		t.Fatalf("re-run as uid 65534 ran no test")
	}
	return false
}

// inOwnUserNS makes the calling test run in a user namespace of its own
// through ReexecInUserNS, like an unprivileged gopasta does: it returns true
// in that copy and false (after checking the copy passed) in the caller.
func inOwnUserNS(t *testing.T) bool {
	t.Helper()
	if InReexecUserNS() {
		return true
	}
	status, err := ReexecInUserNS()
	if err != nil {
		t.Fatalf("ReexecInUserNS: %v", err)
	}
	if status != 0 {
		t.Fatalf("test copy in its own user namespace: exit status %d, want 0", status)
	}
	return false
}

// hostUID is our uid as the initial user namespace sees it.
func hostUID(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		t.Fatalf("uid_map %q", b)
	}
	inside, _ := strconv.Atoi(f[0])
	outside, _ := strconv.Atoi(f[1])
	return os.Getuid() - inside + outside
}

func TestWithoutStubEnv(t *testing.T) {
	in := []string{"A=1", envInit + "=1", envHostname + "=x", "GOPASTA_INITX=2", "B=" + envInit + "=1"}
	got := strings.Join(withoutStubEnv(in), " ")
	want := "A=1 GOPASTA_INITX=2 B=" + envInit + "=1"
	if got != want {
		t.Errorf("withoutStubEnv: got %q, want %q", got, want)
	}
}

func TestTerminates(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		want bool
	}{
		{syscall.SIGTERM, true}, {syscall.SIGINT, true}, {syscall.SIGHUP, true},
		{syscall.SIGCHLD, false}, {syscall.SIGWINCH, false}, {syscall.SIGTSTP, false},
		{0, false}, {65, false},
	} {
		if got := terminates(tc.sig); got != tc.want {
			t.Errorf("terminates(%d): got %v, want %v", tc.sig, got, tc.want)
		}
	}
}
