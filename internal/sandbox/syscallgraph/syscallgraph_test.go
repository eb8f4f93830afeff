package syscallgraph

import (
	"slices"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
)

// TestAnalyze derives testdata/prog, whose calls before and after its
// point are known.
func TestAnalyze(t *testing.T) {
	if raceDetector {
		t.Skip("skipped under the race detector (several times slower): the plain run does it")
	}
	cfg := Config{
		Dir: ".", Pattern: "./testdata/prog", GOARCH: "amd64",
		Point:    "github.com/gopasta/gopasta/internal/sandbox/syscallgraph/testdata/prog.confine",
		Sync:     []Entry{{Func: "(*github.com/gopasta/gopasta/internal/sandbox/syscallgraph/testdata/prog.thread).Do"}},
		NoReturn: []string{"syscall.Exit"},
	}
	prog, err := Load(cfg.Dir, cfg.Pattern, cfg.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	r, err := prog.Analyze(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for nr := range r.Calls {
		got = append(got, arch.X86_64.SyscallNumbers[nr])
	}
	slices.Sort(got)
	for _, want := range []string{"getppid", "sync", "getgid", "fsync", "getpgid", "fdatasync"} {
		if !slices.Contains(got, want) {
			t.Errorf("%s is made after the point, but not derived (got %v)", want, got)
		}
	}
	for _, not := range []string{"prctl", "mkdirat", "fchdir", "getuid", "chroot"} {
		if slices.Contains(got, not) {
			t.Errorf("%s is made before the point (or never), but derived (got %v)", not, got)
		}
	}
	if len(r.Stale) != 0 || len(r.Unresolved) != 0 {
		t.Errorf("stale %q, unresolved %q: want none", r.Stale, r.Unresolved)
	}

	// Without Sync, a function value given to thread.Do is taken as run
	// by thread.loop, which runs after the point: getgid and mkdirat both.
	noSync := cfg
	noSync.Sync = nil
	r, err = prog.Analyze(noSync)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for nr := range r.Calls {
		got = append(got, arch.X86_64.SyscallNumbers[nr])
	}
	for _, want := range []string{"getgid", "mkdirat"} {
		if !slices.Contains(got, want) {
			t.Errorf("without Sync: %s is not derived (got %v)", want, got)
		}
	}

	// Entries that match nothing are reported.
	cfg.Cut = []Entry{{Caller: "github.com/gopasta/gopasta/internal/sandbox/syscallgraph/testdata/prog.main", Func: "golang.org/x/sys/unix.Setuid"}}
	cfg.NotFrame = []Entry{{Func: "github.com/gopasta/gopasta/internal/sandbox/syscallgraph/testdata/prog.ticker"}}
	r, err = prog.Analyze(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(r.Stale, "\n"); !strings.Contains(s, "unix.Setuid") || !strings.Contains(s, "prog.ticker") {
		t.Errorf("stale entries: got %q, want the Cut and the NotFrame entry", r.Stale)
	}
}
