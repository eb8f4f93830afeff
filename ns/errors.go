package ns

// The errors of this package: sentinels, and EnterError with a hint in plain
// words.

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// Sentinel errors callers can test with errors.Is.
var (
	// ErrNotNetNS: the file exists but is not a network namespace.
	ErrNotNetNS = errors.New("not a network namespace")
	// ErrThreadClosed: Do was called on a Thread after Close.
	ErrThreadClosed = errors.New("namespace thread closed")
	// ErrNoProcess: the PID given for attaching does not exist (or is a zombie).
	ErrNoProcess = errors.New("no such process")
	// ErrReleased: Release was called twice.
	ErrReleased = errors.New("child already released")
)

// An EnterError reports why a network namespace could not be opened, checked
// or joined. Op is "open", "check" or "setns".
type EnterError struct {
	Path string
	Op   string
	Err  error
}

func (e *EnterError) Error() string {
	msg := fmt.Sprintf("network namespace %s: %s: %v", e.Path, e.Op, e.Err)
	if h := e.Hint(); h != "" {
		msg += " (" + h + ")"
	}
	return msg
}

func (e *EnterError) Unwrap() error { return e.Err }

// Hint says in plain words what the failure usually means and what to do,
// or "" when there is nothing useful to add.
func (e *EnterError) Hint() string {
	switch {
	case errors.Is(e.Err, ErrNotNetNS):
		return "expected /proc/PID/ns/net or a bind mount of one such as /run/netns/NAME"
	case errors.Is(e.Err, fs.ErrNotExist):
		if e.Op == "setns" {
			return "the namespace is gone"
		}
		return "no such namespace"
	case e.Op == "setns" && (errors.Is(e.Err, unix.EPERM) || errors.Is(e.Err, unix.EACCES)):
		// The kernel wants CAP_SYS_ADMIN over the target's user namespace
		// AND in the caller's own one, so owning the namespace is not
		// enough from the initial user namespace.
		return "gopasta must run as root, or inside the user namespace that owns the network namespace (as its owner)"
	case errors.Is(e.Err, unix.EACCES) || errors.Is(e.Err, unix.EPERM):
		return "no permission to open the namespace file; gopasta must run as the user owning the process (or root)"
	case e.Op == "setns" && errors.Is(e.Err, unix.EINVAL):
		return "the kernel refused to join this namespace"
	}
	return ""
}
