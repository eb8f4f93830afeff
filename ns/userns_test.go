package ns

import (
	"os"
	"testing"
)

// TestFindNsenterWithoutPath: a runtime hook may run with an empty PATH;
// nsenter is still found where distributions install it.
func TestFindNsenterWithoutPath(t *testing.T) {
	if _, err := os.Stat("/usr/bin/nsenter"); err != nil {
		t.Skip("no /usr/bin/nsenter on this machine")
	}
	t.Setenv("PATH", "")
	got, err := findNsenter()
	if err != nil || got != "/usr/bin/nsenter" {
		t.Errorf("findNsenter with PATH empty: got %q, %v; want /usr/bin/nsenter", got, err)
	}
}
