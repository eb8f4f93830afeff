package nstest

// Waits for descriptors, bounded.

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// WaitReadable waits up to d for fd to be readable (poll(2), again after
// a signal for the time left). It returns nil once fd is readable, an
// error matching os.ErrDeadlineExceeded (errors.Is) if d passed first, a
// pause that a caller polling on its own deadline may ignore, or poll's
// error.
func WaitReadable(fd int, d time.Duration) error {
	deadline := time.Now().Add(d)
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("descriptor %d not readable within %v: %w", fd, d, os.ErrDeadlineExceeded)
		}
		n, err := unix.Poll(pfd, int(left.Milliseconds())+1)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return err
		case n > 0:
			return nil
		}
	}
}
