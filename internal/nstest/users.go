package nstest

// The identities tests run as (root, uid 65534), and skips for missing
// privileges or kernel features.

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// User is an identity a test runs commands as.
type User struct {
	// Name is short and safe for subtest names: "root" or "nobody".
	Name string
	// UID and GID are the real and effective ids the command gets.
	UID, GID int
}

// Root reports whether u is uid 0.
func (u User) Root() bool { return u.UID == 0 }

// Nobody is the unprivileged identity. 65534 exists on every Debian system
// and owns nothing, which is what rootless use looks like.
var Nobody = User{Name: "nobody", UID: 65534, GID: 65534}

// RootUser is uid 0.
var RootUser = User{Name: "root", UID: 0, GID: 0}

// Current is the identity the test binary runs as.
func Current() User {
	if os.Geteuid() == 0 {
		return RootUser
	}
	return User{Name: "self", UID: os.Geteuid(), GID: os.Getegid()}
}

// Users lists the identities every integration test runs as, one subtest
// each: gopasta must behave the same with and without privileges.
func Users() []User { return []User{RootUser, Nobody} }

// wrap returns argv prefixed so that it runs as u. Root needs no wrapper;
// for others setpriv drops every id and the supplementary groups, so the
// command cannot lean on root's group memberships either.
func (u User) wrap(argv []string) []string {
	if u.Root() || u.UID == os.Geteuid() {
		return argv
	}
	return append([]string{"setpriv",
		"--reuid", itoa(u.UID), "--regid", itoa(u.GID), "--clear-groups", "--"}, argv...)
}

// env is a minimal, predictable environment: tests must not depend on the
// caller's variables (HOME of root is unreadable for nobody, SHELL varies).
// The seccomp report mode's variables are passed on (seccomp.go), so that
// every gopasta the tests start, and every copy it re-executes, reports.
func (u User) env() []string {
	home := "/root"
	if !u.Root() {
		home = "/"
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		"SHELL=/bin/sh",
		"LANG=C",
	}
	for _, k := range seccompVars {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// RequireRoot skips the test unless it runs as root: creating the host
// namespace fixture and switching identities need it.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (creates network namespaces and switches to uid 65534); run `make test` as root")
	}
}

// RequireTun skips the test unless u can open /dev/net/tun for reading and
// writing. Root always can if the node exists; others need mode 0666, which
// CI sets (`chmod 0666 /dev/net/tun`) and distributions usually ship.
func RequireTun(t testing.TB, u User) {
	t.Helper()
	fi, err := os.Stat("/dev/net/tun")
	if err != nil {
		t.Skipf("skipping: /dev/net/tun missing (modprobe tun): %v", err)
	}
	if u.Root() {
		return
	}
	if fi.Mode().Perm()&0o006 != 0o006 {
		t.Skipf("skipping: /dev/net/tun is %v, not usable by uid %d; run `chmod 0666 /dev/net/tun`", fi.Mode().Perm(), u.UID)
	}
}

// RequireUserNS skips the test unless u may create a user namespace (and a
// network namespace inside it), which every rootless mode depends on.
func RequireUserNS(t testing.TB, u User) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	argv := u.wrap([]string{"unshare", "-Urn", "true"})
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = u.env()
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("skipping: uid %d cannot create user+net namespaces (`unshare -Urn true`: %v, %s); check user.max_user_namespaces and AppArmor/sysctl userns restrictions", u.UID, err, out)
	}
}

// Argv is argv prefixed so that it runs as u (nothing for root; setpriv
// for anyone else), for a command line that starts as root and switches
// to u partway, after a step only root may take.
func (u User) Argv(argv ...string) []string { return u.wrap(argv) }

func itoa(i int) string { return strconv.Itoa(i) }

// Command returns argv as a command run as u in the caller's namespaces,
// prepared like Host.Command (own process group, minimal environment).
func Command(ctx context.Context, u User, argv ...string) *exec.Cmd {
	full := u.wrap(argv)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	prepare(cmd, u)
	return cmd
}

// Run runs argv as u in the caller's namespaces, bounded by DefaultTimeout.
// Identities other than the current one need root.
func Run(t testing.TB, u User, argv ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	p, err := start(ctx, Command(ctx, u, argv...))
	if err != nil {
		t.Fatalf("starting %q: %v", argv, err)
	}
	t.Cleanup(p.kill)
	return p.wait()
}
