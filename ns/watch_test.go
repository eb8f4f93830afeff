package ns

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
			ch, err := WatchNetNS(context.Background(), path)
			if err != nil {
				t.Fatalf("WatchNetNS: %v", err)
			}
			expectFire(t, ch, func() { tc.gone(t, name) })
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
			ch, err := WatchNetNS(context.Background(), netns)
			if err != nil {
				t.Fatalf("WatchNetNS: %v", err)
			}
			expectFire(t, ch, func() {
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
		ch, err := WatchNetNS(context.Background(), "/proc/"+pid+"/task/"+pid+"/ns/net")
		if err != nil {
			t.Fatalf("WatchNetNS: %v", err)
		}
		expectFire(t, ch, func() { cmd.Process.Kill(); cmd.Wait() })
	})
}

func TestWatchCancel(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := WatchNetNS(ctx, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case <-ch:
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
