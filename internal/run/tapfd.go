package run

// --fd: the TAP device the caller opened in the target namespace and
// passed to us as a descriptor, carried through our own re-executions.

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/config"
)

// envTapFD carries --fd's descriptor to a copy of gopasta run again (in
// the background, or in a user namespace through nsenter), at the number
// the copy finds it at, which is ours, not the caller's: the copy's
// command line still names the caller's.
const envTapFD = "GOPASTA_TAP_FD"

// takeTapFD returns --fd's descriptor, moved to a number of our choosing
// above the standard streams and made close-on-exec, or -1 without --fd.
// A standard stream that carried it (pasta takes --fd 0) is pointed at
// /dev/null: nothing else may read or write the TAP through it, and
// background mode replaces the streams anyway. The caller's number is
// closed, so the descriptor cannot leak into the spawned or exec'd.
func takeTapFD(cfg *config.Config) (int, error) {
	if v, ok := os.LookupEnv(envTapFD); ok {
		os.Unsetenv(envTapFD)
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return -1, fmt.Errorf("bad %s: %q", envTapFD, v)
		}
		unix.CloseOnExec(fd)
		return fd, nil
	}
	if !cfg.TapFDSet {
		return -1, nil
	}
	fd, err := unix.FcntlInt(uintptr(cfg.TapFD), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return -1, fmt.Errorf("--fd %d: not an open descriptor", cfg.TapFD)
	}
	if cfg.TapFD > 2 {
		unix.Close(cfg.TapFD)
		return fd, nil
	}
	null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Dup3(null, cfg.TapFD, 0)
		unix.Close(null)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("--fd %d: moving it off a standard stream: %w", cfg.TapFD, err)
	}
	return fd, nil
}

// passTapFD prepares fd (from takeTapFD; -1: nothing to do) to cross an
// exec into a copy of gopasta at the same number: not close-on-exec, and
// named in the environment.
func passTapFD(fd int) error {
	if fd < 0 {
		return nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("--fd: %w", err)
	}
	return os.Setenv(envTapFD, strconv.Itoa(fd))
}
