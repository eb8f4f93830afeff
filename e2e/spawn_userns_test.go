package e2e

// A spawned command with --netns-only or --userns (issue 44 row 12, passt
// ffa5cee): its namespaces belong to the user namespace gopasta runs in,
// or to the one given, and no new one is made.

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// userNSScript is the spawned command of these tests: the user namespace
// it runs in, then the namespace's eth0.
const userNSScript = `readlink /proc/self/ns/user; ip -br addr show ` + nstest.HostIfName

// checkSpawnedIn checks the output of a run of userNSScript: the command
// ran in user namespace want (a readlink of a ns/user file), and its
// network was configured.
func checkSpawnedIn(t *testing.T, r nstest.Result, want string) {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("got exit %d, want 0\n%s", r.Code, r)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) < 2 {
		t.Fatalf("got output %q, want the user namespace and the interface", r.Stdout)
	}
	if got := lines[len(lines)-2]; got != want {
		t.Errorf("the command's user namespace: got %s, want %s\n%s", got, want, r)
	}
	if got := lines[len(lines)-1]; !strings.Contains(got, nstest.HostAddr4+"/24") {
		t.Errorf("the command's %s: got %q, want %s/24 (--config-net)", nstest.HostIfName, got, nstest.HostAddr4)
	}
}

// TestSpawnNetNSOnly: --netns-only with a command creates no user
// namespace: the command runs in gopasta's own (inside `unshare -Ur`, as
// rootless callers run it, or the host's for root), and an unprivileged
// gopasta outside any user namespace of its own, which cannot create
// namespaces then, is refused in one line.
func TestSpawnNetNSOnly(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			t.Run("in-userns", func(t *testing.T) {
				// The first line is the user namespace unshare made.
				r := e.runArgv(t, "unshare", "-Ur", "sh", "-c", `readlink /proc/self/ns/user; exec "$@"`, "sh",
					e.bin, "--netns-only", "--config-net", "--", "sh", "-c", userNSScript)
				first, _, _ := strings.Cut(r.Stdout, "\n")
				checkSpawnedIn(t, r, first)
			})
			t.Run("own", func(t *testing.T) {
				r := e.run(t, "--netns-only", "--config-net", "--", "sh", "-c", userNSScript)
				if !u.Root() {
					if lines := errorLines(r.Stderr); r.Code != 1 || len(lines) != 1 {
						t.Errorf("unprivileged, no user namespace: got exit %d, stderr %q; want 1 and one line", r.Code, r.Stderr)
					} else if isGopasta(t, e) && !strings.Contains(lines[0], "--netns-only") {
						t.Errorf("unprivileged, no user namespace: got %q, want the line to name --netns-only", lines[0])
					}
					return
				}
				if !isGopasta(t, e) {
					t.Skipf("%s as root switches to nobody before it spawns, and cannot (pasta cannot spawn as root)", e.bin)
				}
				host, err := os.Readlink("/proc/self/ns/user")
				if err != nil {
					t.Fatal(err)
				}
				checkSpawnedIn(t, r, host)
			})
		})
	}
}

// TestSpawnUserNS: --userns with a command runs the command's namespaces
// in that user namespace (one made by `unshare -Ur`, where the caller is
// root). Its error paths: a file that is not a user namespace, one that
// does not exist, and a user namespace where the caller is not root.
func TestSpawnUserNS(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			holder := e.startSleeper(t).PID()
			userns := fmt.Sprintf("/proc/%d/ns/user", holder)
			t.Run("joined", func(t *testing.T) {
				if u.Root() && !isGopasta(t, e) {
					t.Skipf("%s as root switches to nobody before it opens --userns, and cannot", e.bin)
				}
				want, err := os.Readlink(userns)
				if err != nil {
					t.Fatal(err)
				}
				checkSpawnedIn(t, e.run(t, "--userns", userns, "--config-net", "--", "sh", "-c", userNSScript), want)
			})
			unmapped := e.startUnmappedUserNS(t)
			for _, tc := range []struct {
				name, path, want string
				// gopasta's own: pasta joins with setns(2) and holds
				// every capability there, whatever its id; gopasta
				// joins through nsenter and exec, after which an
				// unmapped id holds none.
				gopastaOnly bool
			}{
				{name: "not-a-user-namespace", path: fmt.Sprintf("/proc/%d/ns/net", holder), want: "not a user namespace"},
				{name: "missing", path: "/nonexistent/gopasta-userns", want: "no such file"},
				{name: "not-root-there", path: fmt.Sprintf("/proc/%d/ns/user", unmapped), want: "not root in that user namespace", gopastaOnly: true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					if tc.gopastaOnly && !isGopasta(t, e) {
						t.Skipf("%s: not an error for %s", tc.name, e.bin)
					}
					r := e.run(t, "--userns", tc.path, "--config-net", "--", "true")
					lines := errorLines(r.Stderr)
					if r.Code == 0 || len(lines) != 1 {
						t.Fatalf("--userns %s: got exit %d, stderr %q; want a failure in one line", tc.path, r.Code, r.Stderr)
					}
					if isGopasta(t, e) && (r.Code != 1 || !strings.Contains(lines[0], "--userns") || !strings.Contains(lines[0], tc.want)) {
						t.Errorf("--userns %s: got exit %d, %q; want 1 and a line naming --userns and saying %q", tc.path, r.Code, lines[0], tc.want)
					}
				})
			}
		})
	}
}

// errorLines are the lines of stderr, without the notes pasta may print
// first that are no error (a build without AVX2 here, root switching to
// nobody).
func errorLines(stderr string) []string {
	return slices.DeleteFunc(strings.Split(strings.TrimSpace(stderr), "\n"), func(l string) bool {
		return strings.HasPrefix(l, "Can't run AVX2 build") || strings.HasPrefix(l, "Started as root, will change to nobody")
	})
}

// startUnmappedUserNS starts a process in a user namespace of e.u's with
// no id map (`unshare -U`): e.u may join it, but is nobody there, with no
// capabilities once it executes a program.
func (e *env) startUnmappedUserNS(t *testing.T) int {
	t.Helper()
	p := e.h.Start(e.u, "unshare", "-U", "sleep", "300")
	err := nstest.WaitFor(5*time.Second, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.PID()))
		if got := strings.TrimSpace(string(b)); err != nil || got != "sleep" {
			return fmt.Errorf("comm %q (%v), want sleep", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("unshare -U sleep 300 as %s: %v", e.u.Name, err)
	}
	return p.PID()
}
