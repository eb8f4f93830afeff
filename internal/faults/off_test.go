//go:build !faultinject

package faults

import "testing"

// TestOff: without the build tag nothing is ever injected, whatever the
// environment says.
func TestOff(t *testing.T) {
	t.Setenv(Env, "every=1")
	Start()
	for s := range NumSites {
		if err := At(s); err != nil {
			t.Errorf("At(%v): got %v, want nil in a build without faultinject", s, err)
		}
	}
	if r := Report(); r != "" {
		t.Errorf("Report: got %q, want empty", r)
	}
}
