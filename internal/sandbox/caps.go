package sandbox

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Capabilities, no_new_privs and the other per-thread state. Linux keeps
// capabilities and no_new_privs per thread, and a Go process has many, so
// each change goes through syscall.AllThreadsSyscall, which runs the call on
// every thread of the runtime while the world is stopped (and kills the
// process if any thread's result differs). It refuses to work in binaries
// linked with cgo, whose C threads the runtime does not know: gopasta is
// built with CGO_ENABLED=0, and Check says so when it was not.

// allThreads runs a system call on every thread.
func allThreads(trap, a1, a2, a3 uintptr) error {
	_, _, e := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	if e != 0 {
		return e
	}
	return nil
}

// capMask is a capability set as two 32-bit halves.
type capMask uint64

func (m capMask) has(c int) bool { return m&(1<<c) != 0 }

// lastCap returns the highest capability the kernel knows.
func lastCap() int {
	last := unix.CAP_LAST_CAP
	for c := last + 1; c < 64; c++ {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil {
			break
		}
		last = c
	}
	for last > 0 {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(last), 0, 0, 0); err == nil {
			break
		}
		last--
	}
	return last
}

// dropBounding empties the bounding set of every thread (it needs
// CAP_SETPCAP, so it comes before the others go). It returns false when
// we may not: without CAP_SETPCAP, the set only matters across execve(2),
// which the filter forbids and no_new_privs neuters anyway.
func dropBounding(last int) (bool, error) {
	var eff capMask
	if s, err := capGet(); err == nil {
		eff = s.eff
	}
	if !eff.has(unix.CAP_SETPCAP) {
		return false, nil
	}
	for c := 0; c <= last; c++ {
		if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil && err != unix.EINVAL {
			return false, &Error{Step: fmt.Sprintf("dropping capability %d from the bounding set", c), Err: err}
		}
	}
	return true, nil
}

// clearAmbient empties the ambient set of every thread.
func clearAmbient() error {
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil && err != unix.EINVAL {
		return &Error{Step: "clearing ambient capabilities", Err: err}
	}
	return nil
}

// capSets are a thread's effective, permitted and inheritable sets.
type capSets struct{ eff, prm, inh capMask }

func capGet() (capSets, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]unix.CapUserData
	if err := unix.Capget(&hdr, &d[0]); err != nil {
		return capSets{}, err
	}
	join := func(lo, hi uint32) capMask { return capMask(lo) | capMask(hi)<<32 }
	return capSets{
		eff: join(d[0].Effective, d[1].Effective),
		prm: join(d[0].Permitted, d[1].Permitted),
		inh: join(d[0].Inheritable, d[1].Inheritable),
	}, nil
}

// setCaps makes keep the effective and permitted sets of every thread and
// empties the inheritable set.
func setCaps(keep capMask) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	d := [2]unix.CapUserData{
		{Effective: uint32(keep), Permitted: uint32(keep)},
		{Effective: uint32(keep >> 32), Permitted: uint32(keep >> 32)},
	}
	err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&d[0])), 0)
	if err != nil {
		return &Error{Step: "setting capabilities", Err: err}
	}
	return nil
}

// setNoNewPrivs sets no_new_privs on every thread: execve(2) can never
// grant privileges again (setuid bits, file capabilities).
func setNoNewPrivs() error {
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return &Error{Step: "setting no_new_privs", Err: err}
	}
	return nil
}

// verifyThread reads back this thread's state and compares it with what
// was asked, so that a kernel or runtime that silently did less never
// leaves us running unconfined.
func verifyThread(keep capMask, last int, bounding bool) error {
	s, err := capGet()
	if err != nil {
		return &Error{Step: "reading capabilities back", Err: err}
	}
	if s.eff != keep || s.prm != keep || s.inh != 0 {
		return &Error{Step: "checking capabilities", Err: fmt.Errorf("effective %#x permitted %#x inheritable %#x, want %#x %#x 0", uint64(s.eff), uint64(s.prm), uint64(s.inh), uint64(keep), uint64(keep))}
	}
	for c := 0; c <= last; c++ {
		if v, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0); err == nil && v != 0 {
			return &Error{Step: "checking capabilities", Err: fmt.Errorf("capability %d still ambient", c)}
		}
		if bounding {
			if v, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && v != 0 {
				return &Error{Step: "checking capabilities", Err: fmt.Errorf("capability %d still in the bounding set", c)}
			}
		}
	}
	if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || v != 1 {
		return &Error{Step: "checking no_new_privs", Err: fmt.Errorf("got %d (%v), want 1", v, err)}
	}
	return nil
}
