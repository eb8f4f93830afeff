package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/cmdline"
)

// TestManPageUpToDate fails when man/gopasta.1 no longer matches the
// command line definition.
func TestManPageUpToDate(t *testing.T) {
	var buf bytes.Buffer
	render(&buf)
	tmp := filepath.Join(t.TempDir(), "gopasta.1")
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../gopasta.1")
	if err != nil {
		t.Fatalf("reading man/gopasta.1: %v (run go generate)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("man/gopasta.1 is stale: got %d bytes, want %d bytes; run go generate in the repository root", len(got), len(want))
	}
}

// TestManPageDeterministic: two renders are identical (no dates, no map
// iteration order).
func TestManPageDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	render(&a)
	render(&b)
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two renders differ")
	}
}

// TestManPageListsEveryOption: each option's long name appears.
func TestManPageListsEveryOption(t *testing.T) {
	var buf bytes.Buffer
	render(&buf)
	page := buf.String()
	for _, d := range cmdline.FlagDocs(cmdline.NewApp(nil)) {
		if want := `\fB\-\-` + strings.ReplaceAll(d.Long, "-", `\-`) + `\fR`; !strings.Contains(page, want) {
			t.Errorf("man page lacks --%s (looked for %q)", d.Long, want)
		}
	}
}
