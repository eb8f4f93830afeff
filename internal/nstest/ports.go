package nstest

// Ports and socket addresses in the calling thread's network namespace.

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// FreePort returns a TCP port of addr ("127.0.0.1:0", "[::1]:0") that
// nothing listens on: one the kernel gave a listener it then closed. It
// skips tb where it cannot listen there (no IPv6 loopback).
func FreePort(tb testing.TB, addr string) uint16 {
	tb.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Skipf("cannot listen on %s: %v", addr, err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// LocalAddr is the address and port socket fd is bound to (getsockname).
func LocalAddr(tb testing.TB, fd int) netip.AddrPort {
	tb.Helper()
	sa, err := unix.Getsockname(fd)
	if err != nil {
		tb.Fatalf("getsockname: %v", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	}
	tb.Fatalf("getsockname: %T is not an IP socket address", sa)
	return netip.AddrPort{}
}
