// Package vmtest supports tests that need kernel features the CI host may
// lack (vhost-net above all): run-vm-tests.sh boots a throwaway QEMU guest
// and runs the package's static test binary inside it as root, with
// VMTEST_GUEST=1 in the environment. Outside the guest such tests skip.
//
// It also runs a test body in isolation: again, in a child process of the
// test binary, either as root in a fresh network namespace or as an
// unprivileged user inside a user+network namespace of its own, the way
// gopasta runs under podman or rootlesskit.
package vmtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// GuestEnv is set to 1 by the guest's /init.
	GuestEnv = "VMTEST_GUEST"
	// UnprivilegedUID is the uid (and gid) of the unprivileged user; the
	// guest's /etc/passwd calls it "tester".
	UnprivilegedUID = 1000

	isolatedEnv = "VMTEST_ISOLATED" // name of the test the child runs isolated
	stageEnv    = "VMTEST_STAGE"    // internal step of the unprivileged re-exec
	stageHop    = "userns-hop"
)

// InGuest reports whether the test runs inside the vmtest guest.
func InGuest() bool { return os.Getenv(GuestEnv) == "1" }

// RequireDevice skips the test when the device node at path is missing;
// inside the guest, where the harness guarantees it, that is a failure.
func RequireDevice(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if InGuest() {
			t.Fatalf("%s is missing inside the vmtest guest: %v", path, err)
		}
		t.Skipf("needs %s (run it in the VM: internal/vmtest/run-vm-tests.sh): %v", path, err)
	}
}

// Mode selects how Isolated runs the test body.
type Mode int

const (
	// NetNS runs the body as root in a fresh network namespace.
	NetNS Mode = iota
	// Unprivileged runs the body as UnprivilegedUID in a new user namespace
	// that uid created (mapping itself to 0) and a network namespace it owns.
	// The package's TestMain must call Main.
	Unprivileged
)

func (m Mode) String() string {
	if m == Unprivileged {
		return "unprivileged user+net namespace"
	}
	return "network namespace"
}

// Isolated re-runs the calling test in a child process set up as mode says.
// It returns true in that child, where the caller goes on with the test
// body, and false in the parent, which should return at once: the child's
// outcome (pass, fail, skip) has been reported on t. Both modes need root
// in the parent; without it the test skips.
func Isolated(t *testing.T, mode Mode) bool {
	t.Helper()
	if os.Getenv(isolatedEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skipf("running a test in a %v needs root", mode)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	args := []string{"-test.run=" + strings.Join(parts, "/"), "-test.v", "-test.count=1"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout(t))
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), isolatedEnv+"="+t.Name())
	cmd.Dir = "/"
	switch mode {
	case NetNS:
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	case Unprivileged:
		cmd.Env = append(cmd.Env, stageEnv+"="+stageHop)
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: UnprivilegedUID, Gid: UnprivilegedUID, Groups: []uint32{}},
			Pdeathsig:  syscall.SIGKILL,
		}
	default:
		t.Fatalf("vmtest: unknown isolation mode %d", mode)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	t.Logf("isolated run (%v):\n%s", mode, strings.TrimRight(out.String(), "\n"))
	switch {
	case ctx.Err() != nil:
		t.Fatalf("isolated run timed out after %v", childTimeout(t))
	case runErr != nil:
		t.Fatalf("isolated run failed: %v", runErr)
	case bytes.Contains(out.Bytes(), []byte("--- SKIP: "+t.Name())):
		t.Skip("skipped in the isolated run")
	case !bytes.Contains(out.Bytes(), []byte("--- PASS: "+t.Name())):
		t.Fatal("isolated run did not report the test as passed")
	}
	return false
}

func childTimeout(t *testing.T) time.Duration {
	if d, ok := t.Deadline(); ok {
		return time.Until(d) - time.Second
	}
	return 5 * time.Minute
}

// Main is TestMain for packages that use Isolated with Unprivileged: it
// performs the intermediate step that runs as the unprivileged uid and
// creates the user and network namespaces, then runs the tests normally.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit: it returns the status to exit with.
func Run(m *testing.M) int {
	if os.Getenv(stageEnv) == stageHop {
		return hop()
	}
	return m.Run()
}

// hop runs as UnprivilegedUID in the initial namespaces: it creates the user
// namespace itself, as rootless tools do, so the kernel sees an unprivileged
// owner, and maps only its own uid and gid (to 0).
func hop() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		return 1
	}
	if os.Getuid() == 0 || os.Geteuid() == 0 {
		fmt.Fprintln(os.Stderr, "vmtest: the unprivileged step still runs as root")
		return 1
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, stageEnv+"=") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "vmtest: uid %d: child in a new user+net namespace: %v\n", os.Getuid(), err)
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
			return ee.ExitCode()
		}
		return 1
	}
	return 0
}
