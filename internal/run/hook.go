package run

// The OCI hook (--oci-hook): gopasta as a container runtime's createRuntime
// or prestart hook.
//
// Theory of operation. The runtime (runc, crun; podman through its hooks.d
// directory) starts the hook once the container's namespaces exist, writes
// the container's state to its standard input, and waits for it to exit
// before it goes on; a non-zero exit aborts the container's start and shows
// the hook's standard error. So the hook:
//
//  1. reads and validates the state (internal/ocihook), and checks that the
//     container's process exists and has a network namespace of its own
//     (attaching to our own, the host's, would put a TAP on the host);
//  2. turns its own options, the words of the container's io.gopasta.args
//     annotation and the container's PID into the command line it stands
//     for, `gopasta [OPTION]... PID` (cmdline.HookAttach), validated like
//     any other;
//  3. becomes that attach run, from the same process: os.Args is replaced
//     by that command line, because both re-executions of attach mode
//     repeat os.Args (joining the container's user namespace through
//     nsenter when we lack CAP_SYS_ADMIN, as an unprivileged runc's hooks
//     do; going to the background), and the state they could not read
//     again is already consumed. The attach run sets up, goes to the
//     background once the namespace is configured and its ports are
//     listening, and the hook exits 0; the background copy quits when the
//     container's process ends.
//
// Every mistake is found in step 1 or 2, before anything is started, and is
// one line on standard error with exit status 1 (cmdline.Main).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/cmdline"
	"github.com/gopasta/gopasta/internal/ocihook"
	"github.com/gopasta/gopasta/ns"
)

// hookStateTimeout bounds the wait for the state on standard input. A
// runtime writes it at once; only a person running the hook by hand on a
// terminal makes us wait.
const hookStateTimeout = 10 * time.Second

// runHook is --oci-hook: it validates the hook's input and becomes the
// attach run it stands for.
func runHook(stdin io.Reader) (int, error) {
	st, err := ocihook.ReadState(stdin, hookStateTimeout)
	if err != nil {
		return 1, err
	}
	if err := checkHookTarget(st.PID); err != nil {
		return 1, err
	}
	source := "annotation " + ocihook.ArgsAnnotation
	words, err := ocihook.SplitArgs(st.Annotations[ocihook.ArgsAnnotation])
	if err != nil {
		return 1, &cmdline.ExtraArgsError{Source: source, Err: err}
	}
	argv, cfg, err := cmdline.HookAttach(os.Args[1:], words, source, st.PID)
	if err != nil {
		return 1, err
	}
	os.Args = append([]string{os.Args[0]}, argv...)
	return Run(cfg)
}

// A HookTargetError says why the state's pid cannot be served.
type HookTargetError struct {
	PID    int
	Reason string
	Err    error
}

func (e *HookTargetError) Error() string {
	return fmt.Sprintf("container process %d: %s", e.PID, e.Reason)
}

func (e *HookTargetError) Unwrap() error { return e.Err }

// checkHookTarget wants pid alive, with a network namespace that we can
// open and that is not our own.
func checkHookTarget(pid int) error {
	netns, _, err := ns.ProcessNetNS(pid)
	if errors.Is(err, ns.ErrNoProcess) {
		return &HookTargetError{PID: pid, Reason: "no such process (the container is gone)", Err: err}
	}
	if err != nil {
		return &HookTargetError{PID: pid, Reason: err.Error(), Err: err}
	}
	same, err := sameFile("/proc/self/ns/net", netns)
	if err != nil {
		return &HookTargetError{PID: pid, Reason: err.Error(), Err: err}
	}
	if same {
		return &HookTargetError{PID: pid, Reason: "shares the network namespace the hook runs in (the host's): " +
			"give the container one of its own (podman run --network none; a \"network\" entry in config.json's linux.namespaces)"}
	}
	return nil
}

// sameFile says whether paths a and b name the same file (device and
// inode), which for namespace files means the same namespace.
func sameFile(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, fmt.Errorf("stat %s: %w", a, err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, fmt.Errorf("stat %s: %w", b, err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino, nil
}
