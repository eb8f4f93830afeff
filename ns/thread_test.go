package ns

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startSleeper runs `unshare ARGS sleep 60` and returns its PID once it sits
// in a network namespace other than ours. It is killed and reaped in cleanup.
func startSleeper(t *testing.T, unshareArgs ...string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare(1) not installed")
	}
	cmd := exec.Command("unshare", append(unshareArgs, "sleep", "60")...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start unshare: %v", err)
	}
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	self := netnsID(t, "/proc/self/ns/net")
	path := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"
	for deadline := time.Now().Add(5 * time.Second); ; {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err == nil && st.Ino != self {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			reaped = true
			if strings.Contains(stderr.String(), "Operation not permitted") {
				t.Skipf("unshare %v: %s", unshareArgs, stderr.String())
			}
			t.Fatalf("unshare %v did not enter a new netns within 5s: %s", unshareArgs, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd
}

func netnsID(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

func TestEnterRootless(t *testing.T) {
	t.Run("root", func(t *testing.T) {
		if os.Getuid() != 0 && os.Getenv(envNobodyTest) == "" {
			t.Skip("needs root")
		}
		checkEnterSleeper(t, "-Urn")
	})
	// From the initial user namespace an unprivileged user cannot join even
	// its own netns: the kernel also wants CAP_SYS_ADMIN in the caller's
	// user namespace. The error must say so.
	t.Run("nobody", func(t *testing.T) {
		if !asNobody(t) {
			return
		}
		sleeper := startSleeper(t, "-Urn")
		path := "/proc/" + strconv.Itoa(sleeper.Process.Pid) + "/ns/net"
		_, err := Enter(path)
		checkEnterError(t, err, path, "setns", "inside the user namespace that owns", syscall.EPERM)
	})
	// Re-executed in a user namespace of its own, it can.
	t.Run("nobody reexec", func(t *testing.T) {
		if asNobody(t) && inOwnUserNS(t) {
			checkEnterSleeper(t, "-n")
		}
	})
}

// checkEnterSleeper joins the netns of an `unshare ARGS sleep` process
// started by the same user, without joining its user namespace.
func checkEnterSleeper(t *testing.T, unshareArgs ...string) {
	sleeper := startSleeper(t, unshareArgs...)
	path := "/proc/" + strconv.Itoa(sleeper.Process.Pid) + "/ns/net"
	host := netnsID(t, "/proc/self/ns/net")
	want := netnsID(t, path)

	th, err := Enter(path)
	if err != nil {
		t.Fatalf("Enter(%s): %v", path, err)
	}
	defer th.Close()
	var names []string
	var inside uint64
	err = th.Do(func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		var st syscall.Stat_t
		if err := syscall.Stat("/proc/thread-self/ns/net", &st); err != nil {
			return err
		}
		inside = st.Ino
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if strings.Join(names, ",") != "lo" {
		t.Errorf("interfaces inside: got %v, want only lo", names)
	}
	if inside == host {
		t.Errorf("thread netns inode %d: still the host's", inside)
	}
	if inside != want {
		t.Errorf("thread netns inode: got %d, want %d (the sleeper's)", inside, want)
	}
	// Later calls land on the same thread, still inside.
	var again uint64
	th.Do(func() error {
		var st syscall.Stat_t
		err := syscall.Stat("/proc/thread-self/ns/net", &st)
		again = st.Ino
		return err
	})
	if again != want {
		t.Errorf("second Do: netns inode %d, want %d", again, want)
	}
	if got := netnsID(t, "/proc/self/ns/net"); got != host {
		t.Errorf("process netns changed: got %d, want %d", got, host)
	}
}

func TestEnterErrors(t *testing.T) {
	regular := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(regular, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, op, hint string
		is                   error
	}{
		{"nonexistent", "/nonexistent/gopasta/netns", "open", "no such namespace", fs.ErrNotExist},
		{"empty", "", "open", "no such namespace", fs.ErrNotExist},
		{"regular file", regular, "check", "expected /proc/PID/ns/net", ErrNotNetNS},
		{"directory", "/", "check", "expected /proc/PID/ns/net", ErrNotNetNS},
		{"pid namespace", "/proc/self/ns/pid", "check", "expected /proc/PID/ns/net", ErrNotNetNS},
		{"user namespace", "/proc/self/ns/user", "check", "expected /proc/PID/ns/net", ErrNotNetNS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th, err := Enter(tc.path)
			if err == nil {
				th.Close()
				t.Fatalf("Enter(%q): got no error", tc.path)
			}
			checkEnterError(t, err, tc.path, tc.op, tc.hint, tc.is)
		})
	}
	t.Run("pid namespace message", func(t *testing.T) {
		_, err := Enter("/proc/self/ns/pid")
		if err == nil || !strings.Contains(err.Error(), "pid namespace") {
			t.Errorf("got %v, want it to name the pid namespace", err)
		}
	})
}

func checkEnterError(t *testing.T, err error, path, op, hint string, is error) {
	t.Helper()
	var ee *EnterError
	if !errors.As(err, &ee) {
		t.Fatalf("error %v (%T): want *EnterError", err, err)
	}
	if ee.Path != path || ee.Op != op {
		t.Errorf("EnterError{Path %q, Op %q}, want {%q, %q}", ee.Path, ee.Op, path, op)
	}
	if !errors.Is(err, is) {
		t.Errorf("error %v: want errors.Is %v", err, is)
	}
	if !strings.Contains(ee.Hint(), hint) || !strings.Contains(err.Error(), hint) {
		t.Errorf("hint %q / message %q: want %q in both", ee.Hint(), err.Error(), hint)
	}
}

// As an unprivileged user, the host netns (owned by the initial user
// namespace) must be refused with the ownership hint, and another user's
// process with the permission one.
func TestEnterPermission(t *testing.T) {
	if !asNobody(t) {
		return
	}
	_, err := Enter("/proc/self/ns/net")
	checkEnterError(t, err, "/proc/self/ns/net", "setns", "must run as root", syscall.EPERM)
	_, err = Enter("/proc/1/ns/net")
	checkEnterError(t, err, "/proc/1/ns/net", "open", "no permission", syscall.EACCES)
}

func TestThreadDoClose(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	sleeper := startSleeper(t, "-n")
	th, err := Enter("/proc/" + strconv.Itoa(sleeper.Process.Pid) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	want := errors.New("from fn")
	if got := th.Do(func() error { return want }); got != want {
		t.Errorf("Do error: got %v, want %v", got, want)
	}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("panic in Do: got %v, want boom re-raised", p)
			}
		}()
		th.Do(func() error { panic("boom") })
	}()
	if err := th.Do(func() error { return nil }); err != nil {
		t.Errorf("Do after a panic: %v", err)
	}
	// Close from inside Do must not deadlock.
	done := make(chan struct{})
	go func() {
		th.Do(func() error { th.Close(); return nil })
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close inside Do deadlocked")
	}
	th.Close()
	ran := false
	if err := th.Do(func() error { ran = true; return nil }); !errors.Is(err, ErrThreadClosed) || ran {
		t.Errorf("Do after Close: got %v (ran %v), want ErrThreadClosed", err, ran)
	}
}

// Taken while package init holds the main thread, before any test ran.
var mainThreadNetNS = func() uint64 {
	var st syscall.Stat_t
	syscall.Stat("/proc/self/ns/net", &st)
	return st.Ino
}()

// The main thread must never be moved: /proc/self/ns/net follows it.
func TestThreadNeverOnMainThread(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	sleeper := startSleeper(t, "-n")
	path := "/proc/" + strconv.Itoa(sleeper.Process.Pid) + "/ns/net"
	for i := 0; i < 50; i++ {
		th, err := Enter(path)
		if err != nil {
			t.Fatal(err)
		}
		th.Do(func() error { return nil })
		th.Close()
		if got := netnsID(t, "/proc/self/ns/net"); got != mainThreadNetNS {
			t.Fatalf("round %d: main thread moved to netns %d, want %d", i, got, mainThreadNetNS)
		}
	}
}
