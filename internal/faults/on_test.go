//go:build faultinject

package faults

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOn: once started, every Nth call at a site fails, with the site's
// errors in turn, and Report counts each.
func TestOn(t *testing.T) {
	every = 2
	defer func() { every = 0 }()
	if err := At(Pipe2); err != nil {
		t.Fatalf("before Start: got %v, want nil", err)
	}
	Start()
	var got []string
	for range 8 {
		if err := At(Pipe2); err != nil {
			got = append(got, errnoName(err.(unix.Errno)))
		} else {
			got = append(got, "-")
		}
	}
	if s, want := strings.Join(got, " "), "- EMFILE - ENFILE - ENOMEM - EMFILE"; s != want {
		t.Errorf("8 calls at every=2: got %q, want %q", s, want)
	}
	if r := Report(); !strings.Contains(r, "pipe2:EMFILE=") || strings.Contains(r, "pipe2:EMFILE=0") {
		t.Errorf("Report: got %q, want pipe2's EMFILE counted", r)
	}
}
