package ns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// addNamedNetNS creates /run/netns/<unique> with ip-netns(8) and deletes it
// in cleanup.
func addNamedNetNS(t *testing.T) (name string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("ip netns add needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip(8) not installed")
	}
	name = fmt.Sprintf("gopasta-ns-%d-%d", os.Getpid(), rand.IntN(1e6))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", name).Run()
		os.Remove(filepath.Join(NetNSDir, name))
	})
	return name
}

// expectFire checks that ch stays open now and closes within 2 s of act.
func expectFire(t *testing.T, ch <-chan struct{}, act func()) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("watch fired before the namespace went away")
	case <-time.After(200 * time.Millisecond):
	}
	start := time.Now()
	act()
	select {
	case <-ch:
		t.Logf("fired after %v", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("watch did not fire within 2s")
	}
}

func TestWatchNamedNetNS(t *testing.T) {
	for _, tc := range []struct {
		name string
		gone func(t *testing.T, name string)
	}{
		{"ip netns del", func(t *testing.T, name string) {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				t.Fatalf("ip netns del: %v: %s", err, out)
			}
		}},
		// Unmounted but the mount point stays: only the poll of (dev, ino)
		// can see this one.
		{"umount only", func(t *testing.T, name string) {
			if err := syscall.Unmount(filepath.Join(NetNSDir, name), syscall.MNT_DETACH); err != nil {
				t.Fatalf("umount: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := addNamedNetNS(t)
			path, err := ResolveNetNS(name)
			if err != nil {
				t.Fatalf("ResolveNetNS(%q): %v", name, err)
			}
			w, err := WatchNetNS(context.Background(), path)
			if err != nil {
				t.Fatalf("WatchNetNS: %v", err)
			}
			expectFire(t, w.Gone(), func() { tc.gone(t, name) })
		})
	}
}

func TestWatchProcessNetNS(t *testing.T) {
	for _, tc := range []struct {
		name string
		reap bool
	}{{"reaped", true}, {"zombie", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			netns, _, err := ProcessNetNS(cmd.Process.Pid)
			if err != nil {
				t.Fatalf("ProcessNetNS: %v", err)
			}
			w, err := WatchNetNS(context.Background(), netns)
			if err != nil {
				t.Fatalf("WatchNetNS: %v", err)
			}
			expectFire(t, w.Gone(), func() {
				cmd.Process.Kill()
				if tc.reap {
					cmd.Wait()
				}
			})
		})
	}
	t.Run("poll only", func(t *testing.T) {
		// Without a pidfd (old kernels) the once-a-second poll must do.
		usePidfd = false
		t.Cleanup(func() { usePidfd = true })
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := strconv.Itoa(cmd.Process.Pid)
		w, err := WatchNetNS(context.Background(), "/proc/"+pid+"/task/"+pid+"/ns/net")
		if err != nil {
			t.Fatalf("WatchNetNS: %v", err)
		}
		expectFire(t, w.Gone(), func() { cmd.Process.Kill(); cmd.Wait() })
	})
}

func TestWatchCancel(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithCancel(context.Background())
	w, err := WatchNetNS(ctx, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case <-w.Gone():
		t.Error("watch fired after its context was cancelled")
	case <-time.After(1500 * time.Millisecond):
	}
}

func TestWatchErrors(t *testing.T) {
	regular := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(regular, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		is   error
	}{
		{"/nonexistent/gopasta", os.ErrNotExist},
		{regular, ErrNotNetNS},
		{"/proc/self/ns/pid", ErrNotNetNS},
		{"/proc/999999999/ns/net", os.ErrNotExist},
	} {
		if _, err := WatchNetNS(context.Background(), tc.path); !errors.Is(err, tc.is) {
			t.Errorf("WatchNetNS(%q): got %v, want %v", tc.path, err, tc.is)
		}
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("1234 (sleep) S 1 1234 1234 0 -1 4194304 94 0 0 0 0 0 0 0 20 0 1 0 5512345 2441216 128 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"))
	f.Add([]byte("1 (a) b) c) Z 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 42"))
	f.Add([]byte("("))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseProcStat(b)
		if err == nil && st.state == 0 {
			t.Errorf("parsed %q without a state", b)
		}
	})
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		in      string
		state   byte
		start   uint64
		wantErr bool
	}{
		{"1234 (sleep) S 1 1234 1234 0 -1 4194304 94 0 0 0 0 0 0 0 20 0 1 0 5512345 2441216 128", 'S', 5512345, false},
		{"7 (we ird) (x) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99 20", 'Z', 99, false},
		{"7 (short) S 1 2", 0, 0, true},
		{"no parens", 0, 0, true},
		{")\x00 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0", 0, 0, true},
		{"7 (x) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99", 0, 0, true},
		{"7 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 notanumber", 0, 0, true},
	} {
		st, err := parseProcStat([]byte(tc.in))
		if (err != nil) != tc.wantErr {
			t.Errorf("parseProcStat(%q): error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && (st.state != tc.state || st.startTime != tc.start) {
			t.Errorf("parseProcStat(%q): got %c/%d, want %c/%d", tc.in, st.state, st.startTime, tc.state, tc.start)
		}
	}
}

// envChrootWatch makes the test binary a child that watches the namespace
// at its value, then chroots into an empty directory (as gopasta's sandbox
// does) and reports whether the watch still fires.
const envChrootWatch = "GOPASTA_NS_TEST_CHROOT_WATCH"

func init() {
	path := os.Getenv(envChrootWatch)
	if path == "" {
		return
	}
	os.Exit(chrootWatchChild(path))
}

func chrootWatchChild(path string) int {
	w, err := WatchNetNS(context.Background(), path)
	if err != nil {
		fmt.Println("watch:", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "gopasta-ns-chroot-")
	if err != nil {
		fmt.Println(err)
		return 2
	}
	if err := syscall.Chroot(dir); err != nil {
		fmt.Println("chroot:", err)
		return 2
	}
	if err := os.Chdir("/"); err != nil {
		fmt.Println("chdir:", err)
		return 2
	}
	if _, err := os.Stat(path); err == nil {
		fmt.Println("the namespace's path still resolves after chroot")
		return 2
	}
	fmt.Println("ready")
	select {
	case <-w.Gone():
		fmt.Println("gone")
		return 0
	case <-time.After(5 * time.Second):
		fmt.Println("no notice within 5s")
		return 1
	}
}

// TestWatchAfterChroot checks that a watch started before the process
// loses its view of the file system (internal/sandbox) still sees the
// namespace go: it reads only through descriptors it opened at start.
func TestWatchAfterChroot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("chroot needs root")
	}
	run := func(t *testing.T, path string, gone func()) {
		t.Helper()
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), envChrootWatch+"="+path, "TMPDIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait closes the pipe, so it runs only once the output has been
		// read to its end (the child's exit): a Wait racing the read can
		// lose the child's last line. exited is closed after its one
		// value, so Cleanup's receive also returns once the test has
		// taken that value.
		type exit struct {
			err   error
			lines []string
		}
		exited := make(chan exit, 1)
		go func() {
			defer close(exited)
			b, _ := io.ReadAll(out)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			exited <- exit{cmd.Wait(), lines}
		}()
		t.Cleanup(func() {
			cmd.Process.Kill()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Error("child not reaped within 10s of SIGKILL")
			}
		})
		// Give it time to fire wrongly before the namespace goes.
		select {
		case e := <-exited:
			t.Fatalf("child exited before the namespace went: %v, output %q", e.err, e.lines)
		case <-time.After(1500 * time.Millisecond):
		}
		gone()
		select {
		case e := <-exited:
			if e.err != nil {
				t.Fatalf("child: %v, output %q, want exit 0 after \"gone\"", e.err, e.lines)
			}
			if want := []string{"ready", "gone"}; !slices.Equal(e.lines, want) {
				t.Fatalf("child output %q, want %q", e.lines, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("child did not exit within 10s")
		}
	}
	t.Run("process", func(t *testing.T) {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		run(t, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/net", func() { cmd.Process.Kill(); cmd.Wait() })
	})
	t.Run("named", func(t *testing.T) {
		name := addNamedNetNS(t)
		run(t, filepath.Join(NetNSDir, name), func() {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				t.Fatalf("ip netns del: %v: %s", err, out)
			}
		})
	})
}
