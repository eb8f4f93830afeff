package tap_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// enterNewNetns locks the calling goroutine to its thread and moves the
// thread into a fresh network namespace; the returned function moves it
// back. If the way back fails the thread stays locked, so the runtime
// throws it away instead of reusing a thread in the wrong namespace.
// Callers defer the restore on the same goroutine.
func enterNewNetns(tb testing.TB) (restore func()) {
	tb.Helper()
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		tb.Skipf("cannot open own netns: %v", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		unix.Close(orig)
		runtime.UnlockOSThread()
		tb.Skipf("unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN: %v", err)
	}
	return func() {
		defer unix.Close(orig)
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			tb.Errorf("restore netns: %v (thread left locked)", err)
			return
		}
		runtime.UnlockOSThread()
	}
}

// run runs a fixture command from the calling (locked) thread, which the
// child inherits its network namespace from.
func run(tb testing.TB, argv ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// waitReadable polls fd for at most d.
func waitReadable(fd int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return errors.New("timed out waiting for a frame")
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
}

func isRoot() bool { return os.Geteuid() == 0 }

func lookPath(name string) (string, error) { return exec.LookPath(name) }

// copyTestBinary copies the running test binary into a fresh 0755
// directory, because go test builds it under a 0700 directory that uid
// 65534 cannot enter.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	dir, err := os.MkdirTemp("", "gopasta-tap-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := dir + "/tap.test"
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// runCmd runs argv with extra environment, bounded by d, and returns its
// combined output.
func runCmd(t *testing.T, d time.Duration, env []string, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("timed out after %v: %w", d, err)
	}
	return string(out), err
}
