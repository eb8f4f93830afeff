package sock

// System calls the event loops make per connection and per event, as raw
// calls that the Go runtime is not told of (no entersyscall). They cannot
// block (non-blocking sockets, pipes, epoll), so the runtime loses nothing
// by not knowing, and a loop that parks in the runtime's poller between
// events (package epoll) does not wake the runtime's monitor thread at the
// first call after each wake-up, as a call the runtime is told of does
// when every processor was idle: on a CPU shared with the connection's
// peers, that thread switch is a good part of what a connection costs.

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/faults"
)

// Close is close(2) on a descriptor whose close cannot block: a socket
// without a positive linger time, a pipe, an eventfd.
func Close(fd int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); e != 0 {
		return e
	}
	return nil
}

// Shutdown is shutdown(2).
func Shutdown(fd, how int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), uintptr(how), 0); e != 0 {
		return e
	}
	return nil
}

// EpollCtl is epoll_ctl(2); ev may be nil for EPOLL_CTL_DEL.
func EpollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	if _, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0); e != 0 {
		return e
	}
	return nil
}

// Connect is connect(2) of a non-blocking socket to dst, an IPv4 or IPv6
// address (an IPv4-mapped one is IPv4 only on an AF_INET socket, as the
// caller's family says: v6). EINPROGRESS is the usual answer for TCP. A
// test build may inject a failure (package faults).
func Connect(fd int, dst netip.AddrPort, v6 bool) error {
	if !v6 {
		return connect4(fd, dst.Addr().Unmap().As4(), dst.Port())
	}
	var scope uint32
	if z := dst.Addr().Zone(); z != "" {
		idx, err := zoneIndex(z)
		if err != nil {
			return err
		}
		scope = uint32(idx)
	}
	return connect6(fd, dst.Addr().As16(), dst.Port(), scope)
}

// ConnectSA is Connect to an IPv4 or IPv6 socket address, its scope
// (ZoneId) kept; other kinds go through x/sys/unix.
func ConnectSA(fd int, sa unix.Sockaddr) error {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return connect4(fd, a.Addr, uint16(a.Port))
	case *unix.SockaddrInet6:
		return connect6(fd, a.Addr, uint16(a.Port), a.ZoneId)
	}
	if err := faults.At(faults.Connect); err != nil {
		return err
	}
	return unix.Connect(fd, sa)
}

func connect4(fd int, addr [4]byte, port uint16) error {
	if err := faults.At(faults.Connect); err != nil {
		return err
	}
	sa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: addr}
	putPort(&sa.Port, port)
	if _, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa)); e != 0 {
		return e
	}
	return nil
}

func connect6(fd int, addr [16]byte, port uint16, scope uint32) error {
	if err := faults.At(faults.Connect); err != nil {
		return err
	}
	sa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: addr, Scope_id: scope}
	putPort(&sa.Port, port)
	if _, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa)); e != 0 {
		return e
	}
	return nil
}

// putPort writes port in network order into a sockaddr's port field.
func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

// Socket is socket(2), non-blocking and close-on-exec, made under the
// descriptor gate (creating). A test build may inject a failure (package
// faults).
func Socket(domain, typ, proto int) (int, error) {
	if err := faults.At(faults.Socket); err != nil {
		return -1, err
	}
	creating.RLock()
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(domain), uintptr(typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC), uintptr(proto))
	creating.RUnlock()
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// SetsockoptInt is setsockopt(2) of an int option.
func SetsockoptInt(fd, level, opt, value int) error {
	v := int32(value)
	if _, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), 4, 0); e != 0 {
		return e
	}
	return nil
}

// Read is read(2) on a descriptor that cannot block (O_NONBLOCK, or
// ready): a TAP, an eventfd, a timerfd.
func Read(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Write is write(2) on a descriptor that cannot block.
func Write(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// TimerfdSettime is timerfd_settime(2), relative, without the old value.
func TimerfdSettime(fd int, it *unix.ItimerSpec) error {
	if _, _, e := unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(fd), 0, uintptr(unsafe.Pointer(it)), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}
