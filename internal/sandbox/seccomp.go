package sandbox

// The seccomp filter and its supervisor.
//
// The filter (allowlist.go) is built with go-seccomp-bpf and installed with
// SECCOMP_FILTER_FLAG_TSYNC, so every thread of the process gets it at once,
// no_new_privs included, and every thread created later inherits it. Its
// default action is one of three:
//
//   - kill: SECCOMP_RET_KILL_PROCESS. The process dies of SIGSYS at the
//     first call outside the list, as pasta does. This is the normal mode.
//   - report (--debug): SECCOMP_RET_USER_NOTIF. The offending thread stops
//     in the kernel and a supervisor thread of ours receives the call's
//     number (SECCOMP_IOCTL_NOTIF_RECV), writes one line naming it to the
//     log with a bare write(2), and sends the offending thread SIGSYS, which
//     the Go runtime turns into a crash with that goroutine's stack trace:
//     the missing entry and who made the call. Go cannot catch a seccomp
//     SIGSYS itself (the runtime treats it as fatal, os/signal never sees
//     it), hence the detour.
//   - log (GOPASTA_SECCOMP=log, for finding missing entries): the same
//     supervisor reports each forbidden call once and lets it (and every
//     later one) go on (SECCOMP_USER_NOTIF_FLAG_CONTINUE). This is not a
//     sandbox; docs/security.md says so.
//
// In both supervised modes, GOPASTA_SECCOMP_REPORT names a file that gets
// one line per reported call too, appended with a single write(2) each, so
// that the lines of many processes sharing it stay whole: the test suite
// runs in log mode and fails on any line there.
//
// The supervisor allocates nothing and takes no lock after start: the
// offending thread may hold any lock of the runtime. Its own calls (ioctl,
// write, tgkill, nanosleep, exit_group) are on the list, or it would wait
// for itself. It still needs a processor (a Go P) to return from its
// ioctl: should the offending call be a raw one (made without giving up
// its P) and a garbage collection's stop-the-world begin before the report,
// the process hangs instead of crashing; docs/security.md says so.
//
// A notification listener needs SECCOMP_FILTER_FLAG_TSYNC_ESRCH to be
// combined with TSYNC (Linux 5.7); older kernels get SECCOMP_RET_TRAP in
// report mode instead, which crashes with a Go stack trace and the
// registers (the call number is in rax on amd64, x8 on arm64), and cannot
// do log mode.

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// filterMode is the default action of the filter.
type filterMode int

const (
	modeKill   filterMode = iota // SIGSYS, no message (normal)
	modeReport                   // one line naming the call, then a crash with its stack
	modeLog                      // one line per forbidden call, which goes on (debugging)
)

func (m filterMode) String() string {
	switch m {
	case modeReport:
		return "report"
	case modeLog:
		return "log"
	}
	return "kill"
}

// placeholder is the default action the policy is assembled with when the
// real one is SECCOMP_RET_USER_NOTIF, which the library does not accept as
// a default: ActionTrace appears nowhere else in the program and is
// replaced after assembly.
const placeholder = seccomp.ActionTrace

// retUserNotif is SECCOMP_RET_USER_NOTIF.
const retUserNotif = 0x7fc00000

// assemble builds the BPF program for p with default action def.
func assemble(p *filterParams, def uint32) ([]unix.SockFilter, error) {
	lib := seccomp.Action(def)
	if def == retUserNotif {
		lib = placeholder
	}
	pol := policy(p, lib)
	insts, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp policy: %w", err)
	}
	if def == retUserNotif {
		for i, in := range insts {
			if r, ok := in.(bpf.RetConstant); ok && r.Val == uint32(placeholder) {
				insts[i] = bpf.RetConstant{Val: retUserNotif}
			}
		}
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp policy: %w", err)
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return prog, nil
}

// installFilter installs the filter on every thread and returns the
// notification listener (-1 in kill mode, and where the kernel cannot
// combine a listener with TSYNC: report mode falls back to a trap then).
func installFilter(p *filterParams, mode filterMode) (listener int, effective filterMode, err error) {
	def := uint32(seccomp.ActionKillProcess)
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_TSYNC)
	if mode != modeKill {
		def = retUserNotif
		flags |= unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH
	}
	prog, err := assemble(p, def)
	if err != nil {
		return -1, mode, err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e == unix.EINVAL && mode == modeReport {
		// No TSYNC_ESRCH (Linux < 5.7): a trap still names the call, in
		// the crash's registers.
		return installTrap(p)
	}
	if e != 0 {
		return -1, mode, &Error{Step: "seccomp", Err: e}
	}
	if mode == modeKill {
		return -1, mode, nil
	}
	return int(r), mode, nil
}

func installTrap(p *filterParams) (int, filterMode, error) {
	prog, err := assemble(p, uint32(seccomp.ActionTrap))
	if err != nil {
		return -1, modeReport, err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return -1, modeReport, &Error{Step: "seccomp", Err: e}
	}
	return -1, modeReport, nil
}

// seccompNotif is struct seccomp_notif (80 bytes), and seccompNotifResp
// struct seccomp_notif_resp.
type seccompNotif struct {
	id    uint64
	pid   uint32
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

type seccompNotifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// supervisor handles notifications from the filter.
type supervisor struct {
	fd     int // the listener
	out    int // where lines go (stderr or the log file)
	report int // SeccompReportEnv's file, -1 for none
	pid    int // ours, for tgkill
	mode   filterMode
	names  []string // system call names by number, "" when unknown
	who    []byte   // " (gopasta's command line)", for the report file's lines
	seen   [1024]bool
}

// newSupervisor prepares everything the supervisor needs before the filter
// goes on: after that it must not allocate.
func newSupervisor(out, pid int, mode filterMode) *supervisor {
	s := &supervisor{fd: -1, out: out, report: -1, pid: pid, mode: mode}
	who := " (" + strings.Join(os.Args, " ")
	if len(who) > 200 {
		who = who[:197] + "..."
	}
	s.who = []byte(who + ")")
	if info, err := arch.GetInfo(""); err == nil {
		max := 0
		for nr := range info.SyscallNumbers {
			max = maxInt(max, nr)
		}
		s.names = make([]string, max+1)
		for nr, name := range info.SyscallNumbers {
			if nr >= 0 {
				s.names[nr] = name
			}
		}
	}
	return s
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// run receives notifications until the process ends. It runs on a thread
// of its own, which it never gives back.
func (s *supervisor) run() {
	runtime.LockOSThread()
	var req seccompNotif
	var line [192]byte
	var rline [384]byte
	for {
		req = seccompNotif{}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req)))
		if e == unix.EINTR || e == unix.ENOENT {
			continue // interrupted, or the caller died before we got it
		}
		if e != 0 {
			return
		}
		n := s.format(line[:], &req)
		if s.mode == modeLog {
			first := true
			if req.nr >= 0 && int(req.nr) < len(s.seen) {
				first = !s.seen[req.nr]
				s.seen[req.nr] = true
			}
			if first {
				unix.Write(s.out, line[:n])
				s.writeReport(rline[:], &req)
			}
			resp := seccompNotifResp{id: req.id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
			unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
			continue
		}
		unix.Write(s.out, line[:n])
		s.writeReport(rline[:], &req)
		// Crash on the offending thread: the Go runtime prints its
		// goroutine's stack. Should that not end us, exit anyway.
		unix.Tgkill(s.pid, int(req.pid), unix.SIGSYS)
		ts := unix.Timespec{Sec: 2}
		unix.Nanosleep(&ts, nil)
		unix.RawSyscall(unix.SYS_EXIT_GROUP, exitViolation, 0, 0)
	}
}

// exitViolation is the exit status when a report-mode violation did not
// end the process by itself: 128 + SIGSYS, as a shell reports a kill.
const exitViolation = 128 + 31

// name returns the name of req's system call, "unknown" if it has none.
func (s *supervisor) name(req *seccompNotif) string {
	if req.nr >= 0 && int(req.nr) < len(s.names) && s.names[req.nr] != "" {
		return s.names[req.nr]
	}
	return "unknown"
}

// writeReport appends req's line to the report file, if there is one,
// formatted in b.
func (s *supervisor) writeReport(b []byte, req *seccompNotif) {
	if s.report >= 0 {
		unix.Write(s.report, b[:s.formatReport(b, req)])
	}
}

// formatReport writes the report file's line, "name (N) pid P tid T
// (command line)", into b, without allocating, and returns its length.
func (s *supervisor) formatReport(b []byte, req *seccompNotif) int {
	n := copy(b, s.name(req))
	n += copy(b[n:], " (")
	n += len(strconv.AppendInt(b[n:n], int64(req.nr), 10))
	n += copy(b[n:], ") pid ")
	n += len(strconv.AppendInt(b[n:n], int64(s.pid), 10))
	n += copy(b[n:], " tid ")
	n += len(strconv.AppendUint(b[n:n], uint64(req.pid), 10))
	n += copy(b[n:len(b)-1], s.who)
	b[n] = '\n'
	return n + 1
}

// format writes "gopasta: error: seccomp: system call N (name) by thread T
// is not allowed" into b, without allocating, and returns its length.
func (s *supervisor) format(b []byte, req *seccompNotif) int {
	n := copy(b, "gopasta: error: seccomp: system call ")
	n += len(strconv.AppendInt(b[n:n], int64(req.nr), 10))
	n += copy(b[n:], " (")
	n += copy(b[n:], s.name(req))
	n += copy(b[n:], ") by thread ")
	n += len(strconv.AppendUint(b[n:n], uint64(req.pid), 10))
	if s.mode == modeLog {
		n += copy(b[n:], " is not in the allowlist (GOPASTA_SECCOMP=log: allowed)\n")
	} else {
		n += copy(b[n:], " is not allowed: exiting\n")
	}
	return n
}
