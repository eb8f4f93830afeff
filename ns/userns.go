package ns

// Joining a network namespace needs CAP_SYS_ADMIN in our own user namespace:
// the check, and the re-execution through nsenter into the owner's.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// HaveSysAdmin reports whether this process holds CAP_SYS_ADMIN in its own
// user namespace. setns(CLONE_NEWNET) needs it there as well as over the
// target namespace (netns_install() in net/core/net_namespace.c), so without
// it no thread of ours can join a network namespace, whoever owns it.
func HaveSysAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_ADMIN) != 0
}

// ErrNoNsenter means joining another user namespace needs util-linux's
// nsenter and it is not installed.
var ErrNoNsenter = errors.New("nsenter (util-linux) not found")

// findNsenter looks for nsenter on PATH, then where distributions install
// it: a runtime hook may run with no PATH at all.
func findNsenter() (string, error) {
	if p, err := exec.LookPath("nsenter"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/nsenter", "/bin/nsenter", "/usr/sbin/nsenter", "/sbin/nsenter"} {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNoNsenter
}

// ExecInUserNS replaces this process with gopasta run again inside the user
// namespace at path, as root there, with the same arguments. It returns only
// on failure.
//
// A Go process cannot join an existing user namespace itself: setns(2) with
// CLONE_NEWUSER refuses multithreaded callers, and the Go runtime starts
// threads before main. util-linux's nsenter is single-threaded C; it joins
// and then executes us, so the copy starts inside the namespace with every
// capability there, and its threads can join the network namespace. The pid
// stays the same (exec, not fork), which keeps callers that wait for it
// happy.
func ExecInUserNS(path string) error {
	if inReexecUserNS {
		return errors.New("ns: already re-executed in a user namespace")
	}
	nsenter, err := findNsenter()
	if err != nil {
		return fmt.Errorf("joining user namespace %s: %w", path, ErrNoNsenter)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("joining user namespace %s: %w", path, err)
	}
	// --preserve-credentials: our uid already maps to root there in every
	// rootless layout (unshare -Ur, podman, rootlesskit), and setgroups(2),
	// which nsenter would otherwise call, is denied in such namespaces.
	argv := append([]string{nsenter, "--user=" + path, "--preserve-credentials", "--", self}, os.Args[1:]...)
	env := append(withoutStubEnv(os.Environ()), envUserNS+"="+initProtocol)
	err = syscall.Exec(nsenter, argv, env)
	return fmt.Errorf("joining user namespace %s: exec %s: %w", path, nsenter, err)
}
