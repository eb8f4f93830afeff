package run

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNameAfterArgv0: a copy the kernel named "exe" takes its argv[0]'s
// name; any other name stays.
func TestNameAfterArgv0(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := func() string {
		b, err := os.ReadFile("/proc/thread-self/comm")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	orig := self()
	defer nameAfterArgv0(writeComm(t, "exe"), []string{orig})
	tests := []struct {
		comm, argv0, want string
	}{
		{"exe", "/usr/local/bin/gopasta", "gopasta"},
		{"exe", "gopasta-init", "gopasta-init"},
		{"exe", "/opt/a-very-long-binary-name", "a-very-long-bin"}, // the kernel's 15 bytes
		{"gopasta", "/usr/bin/other", "a-very-long-bin"},           // not "exe": unchanged
		{"exe", "/proc/self/exe", "a-very-long-bin"},               // argv[0] says nothing better
	}
	for _, tc := range tests {
		nameAfterArgv0(writeComm(t, tc.comm), []string{tc.argv0})
		if got := self(); got != tc.want {
			t.Errorf("comm %q, argv[0] %q: got name %q, want %q", tc.comm, tc.argv0, got, tc.want)
		}
	}
}

func writeComm(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "comm")
	if err := os.WriteFile(p, []byte(name+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
