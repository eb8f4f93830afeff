package fwd

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/sock"
)

// Socket operations the TCP translator needs beyond sysOps' datagram set.
// They are raw system calls (internal/sock's raw.go says why) into storage
// owned by kernelSys, so none of them allocates (x/sys/unix's wrappers take
// the address of locals, which then escape to the heap).

// skMemInfo indexes SO_MEMINFO's u32 array (include/uapi/linux/sock_diag.h).
const (
	skMemInfoSndbuf     = 3
	skMemInfoWmemQueued = 5
	skMemInfoVars       = 9
)

func (k *kernelSys) recvmsgIov(fd int, iov []unix.Iovec, flags int) (int, error) {
	k.msg = unix.Msghdr{Iov: &iov[0]}
	k.msg.SetIovlen(len(iov))
	n, _, errno := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&k.msg)), uintptr(flags|unix.MSG_DONTWAIT))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func (k *kernelSys) sendmsgIov(fd int, iov []unix.Iovec) (int, error) {
	k.msg = unix.Msghdr{Iov: &iov[0]}
	k.msg.SetIovlen(len(iov))
	n, _, errno := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&k.msg)), unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// discard removes n bytes from the head of fd's receive queue without
// copying them (MSG_TRUNC on a TCP socket, Linux 2.6.x and later).
func (k *kernelSys) discard(fd int, n int) (int, error) {
	r, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), 0, uintptr(n), unix.MSG_TRUNC|unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

func (k *kernelSys) getsockoptInt(fd, level, opt int) (int, error) {
	k.optLen = 4
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&k.optVal)), uintptr(unsafe.Pointer(&k.optLen)), 0)
	if errno != 0 {
		return 0, errno
	}
	return int(k.optVal), nil
}

// sendSpace returns how many more bytes fd's send buffer accepts: the
// kernel's own test (sk_stream_memory_free) compares the queued memory,
// overhead included, with the buffer size, which SO_MEMINFO reports in one
// call (Linux 4.12).
func (k *kernelSys) sendSpace(fd int) (int, error) {
	k.optLen = uint32(len(k.memInfo) * 4)
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&k.memInfo[0])), uintptr(unsafe.Pointer(&k.optLen)), 0)
	if errno != 0 {
		return 0, errno
	}
	free := int(k.memInfo[skMemInfoSndbuf]) - int(k.memInfo[skMemInfoWmemQueued])
	return max(free, 0), nil
}

// wantSpace polls fd for writability once, without waiting: a TCP socket
// found unwritable is marked SOCK_NOSPACE, and the kernel then signals
// EPOLLOUT when its send buffer drains (tcp_poll, sk_stream_write_space).
func (k *kernelSys) wantSpace(fd int) {
	k.pollFd = unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
	unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&k.pollFd)), 1,
		uintptr(unsafe.Pointer(&zeroTimespec)), 0, 0, 0)
}

var zeroTimespec unix.Timespec

func (k *kernelSys) shutdown(fd, how int) error { return sock.Shutdown(fd, how) }

// abort makes the coming close send a reset rather than a FIN.
func (k *kernelSys) abort(fd int) error {
	k.linger = unix.Linger{Onoff: 1, Linger: 0}
	_, _, errno := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER,
		uintptr(unsafe.Pointer(&k.linger)), unsafe.Sizeof(k.linger), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
