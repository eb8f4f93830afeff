package nstest

import (
	"os"
	"testing"
)

// TestCongestionNotReno: in a namespace of the test's own whose default is
// reno, the helper sets another algorithm and returns it.
func TestCongestionNotReno(t *testing.T) {
	defer EnterNetns(t)()
	if err := os.WriteFile(procCongestion, []byte("reno"), 0); err != nil {
		t.Skipf("cannot set this namespace's default: %v", err)
	}
	got := CongestionNotReno(t)
	if got == "reno" || got == "" {
		t.Fatalf("CongestionNotReno: got %q, want an algorithm other than reno", got)
	}
	if now := readTrimmed(t, procCongestion); now != got {
		t.Errorf("the namespace's default: got %q, want %q", now, got)
	}
}
