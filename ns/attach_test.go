package ns

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestResolveNetNS(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for ip netns add")
	}
	name := addNamedNetNS(t)
	got, err := ResolveNetNS(name)
	if want := filepath.Join(NetNSDir, name); err != nil || got != want {
		t.Errorf("ResolveNetNS(%q): got %q, %v, want %q", name, got, err, want)
	}
	got, err = ResolveNetNS(filepath.Join(NetNSDir, name))
	if err != nil || got != filepath.Join(NetNSDir, name) {
		t.Errorf("ResolveNetNS(path): got %q, %v", got, err)
	}
	// Relative paths become absolute.
	t.Chdir(NetNSDir)
	got, err = ResolveNetNS("./" + name)
	if err != nil || got != filepath.Join(NetNSDir, name) {
		t.Errorf("ResolveNetNS(./name): got %q, %v", got, err)
	}
}

func TestResolveNetNSErrors(t *testing.T) {
	for _, tc := range []struct {
		arg string
		is  error
	}{
		{"gopasta-no-such-netns-" + strconv.Itoa(os.Getpid()), os.ErrNotExist},
		{"/proc/self/ns/uts", ErrNotNetNS},
		{".", ErrNotNetNS},
		{"..", ErrNotNetNS},
	} {
		_, err := ResolveNetNS(tc.arg)
		var ee *EnterError
		if !errors.Is(err, tc.is) || !errors.As(err, &ee) {
			t.Errorf("ResolveNetNS(%q): got %v, want *EnterError wrapping %v", tc.arg, err, tc.is)
		}
	}
	if _, err := ResolveNetNS(""); err == nil {
		t.Error(`ResolveNetNS(""): got no error`)
	}
}

func TestProcessNetNS(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	netns, userns, err := ProcessNetNS(pid)
	p := "/proc/" + strconv.Itoa(pid)
	if err != nil || netns != p+"/ns/net" || userns != p+"/ns/user" {
		t.Errorf("ProcessNetNS(%d): got %q, %q, %v", pid, netns, userns, err)
	}
	for _, bad := range []int{0, -1, 1 << 30} {
		if _, _, err := ProcessNetNS(bad); err == nil {
			t.Errorf("ProcessNetNS(%d): got no error", bad)
		}
	}
	if _, _, err := ProcessNetNS(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Errorf("ProcessNetNS(nonexistent): got %v, want ErrNoProcess", err)
	}
	// A zombie has no namespaces left.
	cmd.Process.Kill()
	for i := 0; i < 200; i++ {
		if st, err := readProcStat(p + "/stat"); err == nil && st.state == 'Z' {
			break
		}
		exec.Command("sleep", "0.01").Run()
	}
	if _, _, err := ProcessNetNS(pid); !errors.Is(err, ErrNoProcess) {
		t.Errorf("ProcessNetNS(zombie): got %v, want ErrNoProcess", err)
	}
}
