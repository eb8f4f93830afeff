package ns

// The spawned namespaces' init: it sets the namespaces up, runs the command
// as its child, forwards signals, reaps orphans and exits with the command's
// status.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// stubSignals are the signals whose Go default would end the init (and with
// it the whole PID namespace) or dump a trace. The init catches them and
// drops them: the terminal delivers keyboard signals to the command
// directly (same process group), and gopasta forwards its own signals
// through the control pipe, so forwarding these too would duplicate them.
// Catching (rather than ignoring) keeps them at SIG_DFL for the command.
var stubSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1,
	unix.SIGUSR2, unix.SIGALRM, unix.SIGPIPE, unix.SIGABRT, unix.SIGTRAP,
	unix.SIGSTKFLT, unix.SIGPWR, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM,
	unix.SIGPROF, unix.SIGIO, unix.SIGSYS, unix.SIGILL, unix.SIGBUS,
	unix.SIGFPE, unix.SIGSEGV,
}

func runInit(argv []string) int {
	sigs := make(chan os.Signal, 16)
	for _, s := range stubSignals {
		// A signal ignored by whoever started gopasta (nohup, "cmd &")
		// stays ignored, for the command too.
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
	go func() {
		for range sigs {
		}
	}()

	hostname := os.Getenv(envHostname)
	login := os.Getenv(envLogin) == initProtocol
	os.Unsetenv(envInit)
	os.Unsetenv(envHostname)
	os.Unsetenv(envLogin)
	unix.CloseOnExec(ctlFd)
	ctl := os.NewFile(ctlFd, "gopasta-control")

	for _, err := range setupInit(hostname) {
		fmt.Fprintf(os.Stderr, "gopasta: warning: %v\n", err)
	}

	// Wait for the go-ahead. EOF means gopasta is gone: nothing to run.
	var b [1]byte
	for {
		if _, err := io.ReadFull(ctl, b[:]); err != nil {
			return 1
		}
		if b[0] == ctlGo {
			break
		}
		if sig := syscall.Signal(b[0]); terminates(sig) {
			return 128 + int(sig)
		}
	}

	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "gopasta: cannot run command: empty command")
		return 127
	}
	proc, code, err := startCommand(argv, login)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gopasta: cannot run %s: %v\n", argv[0], err)
		return code
	}
	go forwardSignals(ctl, proc)
	return reap(proc.Pid)
}

// setupInit prepares the namespaces. Failures are not fatal: the command
// still gets its own network, and the caller prints them as warnings.
func setupInit(hostname string) []error {
	var errs []error
	// Keep our mounts, the /proc one in particular, from propagating back
	// into the host's mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		errs = append(errs, fmt.Errorf("cannot make mounts private: %w", err))
	} else if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		// Fails where /proc is partly masked (containers): the kernel then
		// refuses a fresh, fully visible proc. ps shows host processes.
		errs = append(errs, fmt.Errorf("cannot mount /proc for the new PID namespace: %w", err))
	}
	if hostname != "" {
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			errs = append(errs, fmt.Errorf("cannot set hostname: %w", err))
		}
	}
	// Allow ping sockets to every group. The values are gids as seen in our
	// user namespace, and both ends must be mapped there: the widest range
	// the kernel takes fits when every id is mapped (a namespace spawned by
	// root), "0 0" is the whole range when only gid 0 is.
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0); err != nil {
		if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 0"), 0); err != nil {
			errs = append(errs, fmt.Errorf("cannot enable ping sockets: %w", err))
		}
	}
	return errs
}

// startCommand runs argv as our child, reporting failures with the exit
// codes a shell uses: 127 when the program is not found, 126 when it cannot
// be executed. A login shell has "-" before its argv[0].
func startCommand(argv []string, login bool) (*os.Process, int, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil && !errors.Is(err, exec.ErrDot) {
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = ee.Err
		}
		err = unwrapPathError(err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return nil, 127, err
		}
		return nil, 126, err
	}
	if login {
		argv = append([]string{"-" + argv[0]}, argv[1:]...)
	}
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		err = unwrapPathError(err)
		if errors.Is(err, fs.ErrNotExist) {
			// The file exists (LookPath found it): its interpreter does not.
			return nil, 126, fmt.Errorf("bad interpreter: %w", err)
		}
		return nil, 126, err
	}
	return proc, 0, nil
}

// forwardSignals delivers the signal numbers gopasta writes to the control
// pipe. EOF means gopasta is gone; Pdeathsig ends us then anyway.
func forwardSignals(ctl io.Reader, proc *os.Process) {
	var b [1]byte
	for {
		if _, err := ctl.Read(b[:]); err != nil {
			return
		}
		if b[0] > 0 && b[0] <= 64 {
			// Through the process's pidfd: safe even after it was reaped.
			proc.Signal(syscall.Signal(b[0]))
		}
	}
}

// reap waits for every child, as an init must so orphans do not stay
// zombies, and returns once the command itself has ended. The kernel then
// kills whatever else is left in the PID namespace.
func reap(cmdPid int) int {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "gopasta: init: wait: %v\n", err)
			return 1
		}
		if pid != cmdPid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// terminates reports whether sig's default action ends a process.
func terminates(sig syscall.Signal) bool {
	switch sig {
	case unix.SIGCHLD, unix.SIGCONT, unix.SIGURG, unix.SIGWINCH,
		unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
		return false
	}
	return sig > 0 && sig <= 64
}
