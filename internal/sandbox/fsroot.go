package sandbox

import (
	"errors"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// The file system, in two layers.
//
// An empty root. pasta moves into a mount namespace of its own whose root is
// an empty tmpfs (pivot_root). A Go process cannot: unshare(CLONE_NEWNS)
// refuses a process whose threads share their file system context, and Go's
// threads all do (CLONE_FS). The same sharing makes chroot(2) act on the
// whole process at once, so gopasta makes a directory, opens it, removes
// it, changes into it and chroots to ".": the root of every thread is then a
// deleted, empty directory in which nothing can be created (the kernel
// refuses new entries in a dead directory), and ".." at the root stays
// there. No path names a host file any more. It needs CAP_SYS_CHROOT in our
// user namespace, which gopasta holds at that point in every mode.
//
// Landlock, where the kernel has it (Linux 5.13+), with every file system
// right it knows handled and none granted: even a descriptor to a
// directory outside the root, were one left open, opens nothing through
// openat(2). Descriptors opened before keep working (the log, pcap, TAP,
// vhost-net), including ftruncate(2) of the log, since Landlock checks
// truncation and device ioctls when a file is opened. The one exception:
// the control socket's directory keeps the right to remove files, for the
// socket's removal at exit. Landlock 6+ also scopes signals and
// abstract Unix sockets to our own domain: we cannot signal or connect to
// anything outside it.

// emptyDir makes, opens and removes a directory, returning a descriptor of
// the deleted, empty directory.
func emptyDir() (*os.File, error) {
	var errs []error
	for _, parent := range candidateParents() {
		dir, err := os.MkdirTemp(parent, "gopasta-root-")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f, err := os.Open(dir)
		if rerr := os.Remove(dir); rerr != nil && err == nil {
			f.Close()
			err = rerr
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return f, nil
	}
	return nil, &Error{Step: "making an empty root", Err: errors.Join(errs...)}
}

// candidateParents are where the empty root may be made: $TMPDIR, /tmp,
// /dev/shm, $XDG_RUNTIME_DIR.
func candidateParents() []string {
	out := []string{os.TempDir()}
	for _, d := range []string{"/tmp", "/dev/shm", os.Getenv("XDG_RUNTIME_DIR")} {
		if d != "" && d != out[0] {
			out = append(out, d)
		}
	}
	return out
}

// chrootInto makes the deleted directory dir the root and working directory
// of every thread.
func chrootInto(dir *os.File) error {
	if err := unix.Fchdir(int(dir.Fd())); err != nil {
		return &Error{Step: "entering the empty root", Err: err}
	}
	if err := unix.Chroot("."); err != nil {
		return &Error{Step: "chroot to the empty root", Err: err}
	}
	return nil
}

// landlockABI returns the kernel's Landlock ABI version, 0 without it.
func landlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// restrictFiles enforces Landlock on every thread: no file system right at
// all, except removing files beneath the directories removeIn; signals and
// abstract sockets scoped to our domain. It does what the kernel supports
// and reports the ABI it used (0: none).
func restrictFiles(removeIn []string) (int, error) {
	abi := landlockABI()
	if abi <= 0 {
		return 0, nil
	}
	cfg := landlock.V11
	cfg.HandledAccessNet = 0 // ports are gopasta's business
	var rules []landlock.Rule
	if len(removeIn) > 0 {
		rules = append(rules, landlock.PathAccess(landlock.AccessFSSet(llsys.AccessFSRemoveFile), removeIn...))
	}
	if err := cfg.BestEffort().Restrict(rules...); err != nil {
		return abi, &Error{Step: "Landlock", Err: err}
	}
	return abi, nil
}
