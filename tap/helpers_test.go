package tap_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// run runs a fixture command from the calling (locked) thread, which the
// child inherits its network namespace from.
func run(tb testing.TB, argv ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func isRoot() bool { return os.Geteuid() == 0 }

func lookPath(name string) (string, error) { return exec.LookPath(name) }

// runCmd runs argv with extra environment, bounded by d, and returns its
// combined output.
func runCmd(t *testing.T, d time.Duration, env []string, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("timed out after %v: %w", d, err)
	}
	return string(out), err
}
