package nstest

// Waits for descriptors and what they bring, bounded.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// WaitReadable waits up to d for fd to be readable (poll(2), again after
// a signal for the time left; with d of 0 or less, one look). It returns
// nil once fd is readable, an error matching os.ErrDeadlineExceeded
// (errors.Is) if d passed first, a pause that a caller polling on its own
// deadline may ignore, or poll's error.
func WaitReadable(fd int, d time.Duration) error {
	deadline := time.Now().Add(d)
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		ms := 0
		if left := time.Until(deadline); left > 0 {
			ms = int(left.Milliseconds()) + 1
		}
		n, err := unix.Poll(pfd, ms)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return err
		case n > 0:
			return nil
		case time.Until(deadline) <= 0:
			return fmt.Errorf("descriptor %d not readable within %v: %w", fd, d, os.ErrDeadlineExceeded)
		}
	}
}

// ReadDatagrams reads the datagrams socket fd holds: it waits up to first
// for one, then up to next for each one after it, and returns what it read
// once a wait passes with nothing.
func ReadDatagrams(tb testing.TB, fd int, first, next time.Duration) [][]byte {
	tb.Helper()
	var out [][]byte
	buf := make([]byte, 65536)
	for wait := first; ; wait = next {
		if err := WaitReadable(fd, wait); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				tb.Fatalf("waiting for datagrams: %v", err)
			}
			return out
		}
		n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			tb.Fatalf("reading datagrams: %v", os.NewSyscallError("recvfrom", err))
		}
		out = append(out, append([]byte(nil), buf[:n]...))
	}
}

// ReadFlow reads the datagrams want from c, in that order, waiting up to
// 5 s for them in all, and fails tb unless one source sent them all (a
// flow's socket); it returns that source.
func ReadFlow(tb testing.TB, c *net.UDPConn, want ...string) netip.AddrPort {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65536)
	var from netip.AddrPort
	for i, w := range want {
		n, addr, err := c.ReadFromUDPAddrPort(buf)
		if err != nil || string(buf[:n]) != w {
			tb.Fatalf("datagram %d: got %q, %v; want %q", i, buf[:n], err, w)
		}
		if i > 0 && addr != from {
			tb.Fatalf("datagram %d: from %v, want %v (the flow's socket)", i, addr, from)
		}
		from = addr
	}
	return from
}
