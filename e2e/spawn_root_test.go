package e2e

// Spawn mode started by root: the command keeps root's powers over files,
// whoever owns them; a command spawned by anyone else gets none it did not
// have.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestSpawnFileAccess: the command writes into a directory of uid 65534
// (mode 0755) and into one of root's, and reads a root-only (0600) file and
// one of uid 65534's (0600): all of it as root, only uid 65534's as uid
// 65534.
func TestSpawnFileAccess(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			dir := nstest.TempDir(t)
			theirs, roots, secret := filepath.Join(dir, "theirs"), filepath.Join(dir, "roots"), filepath.Join(dir, "secret")
			for _, d := range []string{theirs, roots} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chown(theirs, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(secret, []byte("root only\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			theirSecret := filepath.Join(dir, "their-secret")
			if err := os.WriteFile(theirSecret, []byte("65534 only\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(theirSecret, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			// Each step says whether it worked, so that one run shows all.
			script := `try() { if "$@" 2>/dev/null; then echo "$1 ok"; else echo "$1 denied"; fi; }
w1() { echo theirs >"$1/theirs/new"; }
w2() { echo roots >"$1/roots/new"; }
r1() { cat "$1/secret" >/dev/null; }
r2() { cat "$1/their-secret" >/dev/null; }
try w1 "$D"; try w2 "$D"; try r1 "$D"; try r2 "$D"`
			r := e.run(t, "--config-net", "--", "env", "D="+dir, "sh", "-c", script)
			mustSucceed(t, "the spawned command", r)
			want := "w1 ok\nw2 ok\nr1 ok\nr2 ok"
			if !u.Root() {
				want = "w1 ok\nw2 denied\nr1 denied\nr2 ok"
			}
			if got := strings.TrimSpace(r.Stdout); got != want {
				t.Errorf("as %s: got\n%s\nwant\n%s", u.Name, got, want)
			}
			// What the command wrote belongs to who ran gopasta.
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(theirs, "new"), &st); err != nil || st.Uid != uint32(u.UID) {
				t.Errorf("file the command wrote: uid %d (%v), want %d", st.Uid, err, u.UID)
			}
		})
	}
}

// TestSpawnInsideUserNS: gopasta started as root of a user namespace that
// someone else created (`unshare -Ur`, as scripts and CI jobs do) spawns
// its command: that namespace denies setgroups, which the one gopasta
// creates must then deny too.
func TestSpawnInsideUserNS(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			argv := append([]string{"unshare", "-Ur"}, e.gopasta("--config-net", "--", "sh", "-c", "id -u; cat /proc/self/setgroups")...)
			r := e.runArgv(t, argv...)
			mustSucceed(t, "gopasta inside unshare -Ur", r)
			if got, want := strings.Fields(r.Stdout), []string{"0", "deny"}; strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("the command's uid and setgroups: got %q, want %q", got, want)
			}
		})
	}
}
