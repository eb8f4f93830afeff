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

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	buildOut  string
)

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
	buildOnce.Do(build)
	if buildErr != nil {
		t.Fatalf("go build %s: %v\n%s", ModulePath, buildErr, buildOut)
	}
	return buildPath
}

const buildDirPrefix = "gopasta-nstest-bin-"

func build() {
	sweepStale()
	dir, err := os.MkdirTemp("", buildDirPrefix)
	if err != nil {
		buildErr = err
		return
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		buildErr = err
		return
	}
	goTool := filepath.Join(runtimeGOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(dir, "gopasta")
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, ModulePath)
	// Without cgo, as `make build`: gopasta refuses to run otherwise (its
	// sandbox needs syscall.AllThreadsSyscall).
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	buildOut = string(b)
	if err != nil {
		buildErr = err
		return
	}
	buildPath = out
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
