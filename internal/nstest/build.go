package nstest

// The gopasta binary, built once per test run, and temporary directories.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// BinEnv names an environment variable that, when set, is used as the
// gopasta binary instead of building one. Pointing it at Debian's
// /usr/bin/pasta runs the same tests against the reference implementation.
const BinEnv = "GOPASTA_BIN"

// ModulePath is the package Binary builds.
const ModulePath = "github.com/gopasta/gopasta"

// builds are the binaries built in this test process, by build tags.
var builds sync.Map // string -> *built

type built struct {
	once sync.Once
	path string
	err  error
	out  string
}

// Binary returns the path of a gopasta binary that every test identity can
// execute, building it with `go build` the first time it is called in this
// test process. The binary lives in a 0755 directory under $TMPDIR (not
// t.TempDir, whose parent is 0700 and which goes away with the first test);
// stale directories from earlier, killed runs are swept on the way.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(BinEnv); p != "" {
		return p
	}
	return BinaryWithTags(t)
}

// BinaryWithTags is Binary built with build tags (e.g. faultinject, the
// test build of package faults); it ignores GOPASTA_BIN, which names a
// binary built without them.
func BinaryWithTags(t testing.TB, tags ...string) string {
	t.Helper()
	key := strings.Join(tags, ",")
	v, _ := builds.LoadOrStore(key, &built{})
	b := v.(*built)
	b.once.Do(func() { b.path, b.out, b.err = build(tags) })
	if b.err != nil {
		t.Fatalf("go build %s (tags %q): %v\n%s", ModulePath, key, b.err, b.out)
	}
	return b.path
}

const buildDirPrefix = "gopasta-nstest-bin-"

func build(tags []string) (path, out string, err error) {
	sweepStale()
	dir, err := os.MkdirTemp("", buildDirPrefix)
	if err != nil {
		return "", "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", "", err
	}
	goTool := filepath.Join(runtimeGOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "gopasta")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, goTool, append(args, ModulePath)...)
	// Without cgo, as `make build`: gopasta refuses to run otherwise (its
	// sandbox needs syscall.AllThreadsSyscall).
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "", string(b), err
	}
	return bin, string(b), nil
}

// runtimeGOROOT finds the go tool that runs this test: `go test` puts its
// GOROOT in the environment of the test binary.
func runtimeGOROOT() string {
	if r := os.Getenv("GOROOT"); r != "" {
		return r
	}
	if p, err := exec.LookPath("go"); err == nil {
		return filepath.Dir(filepath.Dir(p))
	}
	return "/usr/local/go"
}

// sweepStale removes binaries left by earlier test runs: a run that was
// killed never cleans up, and a run's binaries outlive its tests because
// gopasta processes started in the background may still be executing
// them. An hour is three times the suite's -timeout.
func sweepStale() {
	tmp := os.TempDir()
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), buildDirPrefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
			_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
		}
	}
}

// TempDir returns a fresh directory every identity can write to (mode 0777
// under a world-traversable parent), for pid files and logs written by
// gopasta running as uid 65534. It is removed in t.Cleanup.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gopasta-nstest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}
