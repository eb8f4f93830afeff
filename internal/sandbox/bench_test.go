package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkFilter measures what the seccomp filter costs the calls the
// engine and the splice loop make per packet, each in a child process
// (the test binary again) with and without the filter: ns/op is the
// child's own measure of one operation, not the child's start-up.
//
// Operations: sendmsg+recvmsg of one 64-byte UDP datagram over loopback;
// splice of 64 bytes from one pipe to another and back (2 calls);
// epoll_pwait returning a ready eventfd; read of an empty eventfd (EAGAIN);
// fcntl(F_GETFL), an allowed call whose arguments the filter inspects.
func BenchmarkFilter(b *testing.B) {
	for _, op := range benchOps {
		for _, filtered := range []bool{false, true} {
			name := op + "/plain"
			if filtered {
				name = op + "/filtered"
			}
			b.Run(name, func(b *testing.B) {
				f := "0"
				if filtered {
					f = "1"
				}
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), childEnv+"=bench:"+op+":"+f+":"+strconv.Itoa(b.N))
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("child: %v: %s", err, out)
				}
				ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
				if err != nil {
					b.Fatalf("child output %q: %v", out, err)
				}
				b.ReportMetric(float64(ns)/float64(b.N), "ns/op")
			})
		}
	}
}

var benchOps = []string{"sendmsg+recvmsg", "splice", "epoll_pwait", "read", "fcntl"}

// benchChild sets up op, installs the filter if asked, runs op n times
// and prints the nanoseconds it took.
func benchChild(arg string) int {
	parts := strings.Split(arg, ":")
	if len(parts) != 3 {
		return 98
	}
	op, filtered := parts[0], parts[1] == "1"
	n, _ := strconv.Atoi(parts[2])
	runtime.LockOSThread()
	run, err := benchSetup(op)
	if err != nil {
		fmt.Println(err)
		return 97
	}
	if filtered {
		if _, _, err := installFilter(&filterParams{pid: os.Getpid()}, modeKill); err != nil {
			fmt.Println(err)
			return 96
		}
	}
	run(1) // warm up
	start := time.Now()
	if err := run(n); err != nil {
		fmt.Println(err)
		return 95
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
}

// benchSetup opens what op needs and returns its loop.
func benchSetup(op string) (func(n int) error, error) {
	var buf [64]byte
	errno := func(e unix.Errno) error {
		if e != 0 {
			return e
		}
		return nil
	}
	switch op {
	case "sendmsg+recvmsg":
		a, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return nil, err
		}
		c, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return nil, err
		}
		lo := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
		if err := unix.Bind(c, lo); err != nil {
			return nil, err
		}
		sa, err := unix.Getsockname(c)
		if err != nil {
			return nil, err
		}
		if err := unix.Connect(a, sa); err != nil {
			return nil, err
		}
		iov := unix.Iovec{Base: &buf[0]}
		iov.SetLen(len(buf))
		msg := unix.Msghdr{Iov: &iov, Iovlen: 1}
		return func(n int) error {
			for i := 0; i < n; i++ {
				if _, _, e := unix.Syscall(unix.SYS_SENDMSG, uintptr(a), uintptr(unsafe.Pointer(&msg)), 0); e != 0 {
					return e
				}
				if _, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(c), uintptr(unsafe.Pointer(&msg)), 0); e != 0 {
					return e
				}
			}
			return nil
		}, nil
	case "splice":
		var p, q [2]int
		if err := unix.Pipe2(p[:], 0); err != nil {
			return nil, err
		}
		if err := unix.Pipe2(q[:], 0); err != nil {
			return nil, err
		}
		if _, err := unix.Write(p[1], buf[:]); err != nil {
			return nil, err
		}
		return func(n int) error {
			for i := 0; i < n; i++ {
				if _, _, e := unix.Syscall6(unix.SYS_SPLICE, uintptr(p[0]), 0, uintptr(q[1]), 0, 64, 0); e != 0 {
					return e
				}
				if _, _, e := unix.Syscall6(unix.SYS_SPLICE, uintptr(q[0]), 0, uintptr(p[1]), 0, 64, 0); e != 0 {
					return e
				}
			}
			return nil
		}, nil
	case "epoll_pwait":
		ep, err := unix.EpollCreate1(0)
		if err != nil {
			return nil, err
		}
		ev, err := unix.Eventfd(1, 0)
		if err != nil {
			return nil, err
		}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, ev, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(ev)}); err != nil {
			return nil, err
		}
		var evs [4]unix.EpollEvent
		return func(n int) error {
			for i := 0; i < n; i++ {
				if _, _, e := unix.Syscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&evs[0])), 4, 0, 0, 0); e != 0 {
					return e
				}
			}
			return nil
		}, nil
	case "read":
		ev, err := unix.Eventfd(0, unix.EFD_NONBLOCK)
		if err != nil {
			return nil, err
		}
		return func(n int) error {
			for i := 0; i < n; i++ {
				if _, _, e := unix.Syscall(unix.SYS_READ, uintptr(ev), uintptr(unsafe.Pointer(&buf[0])), 8); e != unix.EAGAIN {
					return errno(e)
				}
			}
			return nil
		}, nil
	case "fcntl":
		ev, err := unix.Eventfd(0, 0)
		if err != nil {
			return nil, err
		}
		return func(n int) error {
			for i := 0; i < n; i++ {
				if _, _, e := unix.Syscall(unix.SYS_FCNTL, uintptr(ev), unix.F_GETFL, 0); e != 0 {
					return e
				}
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("unknown op %q", op)
}
