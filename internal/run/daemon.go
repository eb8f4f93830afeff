package run

// Background mode: the re-executed copy in a new session that reports
// readiness to the foreground copy, which then exits.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/ns"
)

// envDaemon carries the descriptor a background copy reports readiness on.
// Go cannot fork, so "going to the background" means re-executing ourselves
// in a new session and letting the foreground copy exit once that copy is
// ready, which is what podman and rootlesskit wait for.
const envDaemon = "GOPASTA_DAEMON_FD"

// background is the daemon side's handle on the readiness pipe, and
// /dev/null, opened at start: ready runs once the sandbox has taken the
// file system away.
type background struct{ w, null *os.File }

// ready tells the foreground copy that set-up succeeded, then detaches from
// its standard streams: podman reads our stderr until EOF, so holding it open
// would hang the caller.
func (b *background) ready() {
	b.w.Write([]byte("ok\n"))
	b.w.Close()
	if b.null != nil {
		for fd := 0; fd <= 2; fd++ {
			unix.Dup3(int(b.null.Fd()), fd, 0)
		}
		b.null.Close()
	}
}

// daemonFD returns the readiness pipe's descriptor when we are the
// background copy, for CloseInherited to keep.
func daemonFD() []int {
	if fd, err := strconv.Atoi(os.Getenv(envDaemon)); err == nil && fd > 2 {
		return []int{fd}
	}
	return nil
}

// daemonize either returns the background handle (we are the background
// copy), or starts the background copy and waits for its verdict (relay is
// true and status is what the foreground process should exit with).
// tapFD (--fd's TAP, or -1) goes to the background copy too.
func daemonize(tapFD int) (bg *background, relay bool, status int, err error) {
	if s := os.Getenv(envDaemon); s != "" {
		os.Unsetenv(envDaemon)
		fd, err := strconv.Atoi(s)
		if err != nil {
			return nil, false, 1, fmt.Errorf("bad %s: %q", envDaemon, s)
		}
		unix.CloseOnExec(fd)
		null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		return &background{w: os.NewFile(uintptr(fd), "ready"), null: null}, false, 0, nil
	}

	r, w, err := os.Pipe()
	if err != nil {
		return nil, true, 1, err
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, true, 1, err
	}
	defer null.Close()
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	// The environment lost the user-namespace marker when this copy
	// started (ns hides it from children): give it back, or the background
	// copy would take --runas ids for its namespace's own.
	cmd.Env = slices.Concat(os.Environ(), ns.ReexecEnv(), []string{envDaemon + "=3"})
	cmd.ExtraFiles = []*os.File{w}
	if tapFD >= 0 {
		// fd 4 in the copy; not closed here, the file only lends it.
		cmd.ExtraFiles = append(cmd.ExtraFiles, os.NewFile(uintptr(tapFD), "tap"))
		cmd.Env = append(cmd.Env, envTapFD+"=4")
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, true, 1, fmt.Errorf("starting the background process: %w", err)
	}
	w.Close()

	buf := make([]byte, 3)
	if n, _ := io.ReadFull(r, buf); n == 3 && string(buf) == "ok\n" {
		// Ready: leave it running, do not wait.
		cmd.Process.Release()
		return nil, true, 0, nil
	}
	// The background copy failed before it was ready; it has printed why.
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if st := ee.ExitCode(); st > 0 {
			return nil, true, st, nil
		}
	}
	return nil, true, 1, nil
}
