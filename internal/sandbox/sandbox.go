// Package sandbox confines gopasta once its set-up is done, before the
// first frame from the namespace is read: the process that carries the
// traffic keeps no more than it needs to carry it.
//
// # Theory of operation
//
// Set-up needs privileges and files: joining namespaces, creating the TAP
// through /dev/net/tun, opening /dev/vhost-net, binding forwarded ports, reading
// /etc/resolv.conf, opening the log, pcap and pid files. Running needs
// neither: every descriptor is open, namespace-side sockets are created by
// a thread that joined the namespace during set-up and never leaves it, and
// everything else is an ordinary socket, pipe or eventfd. Apply is called
// between the two and, in this order:
//
//  1. Loads what the Go runtime and the standard library would otherwise
//     read from files lazily (the local time zone of the log's timestamps,
//     the "nobody" user), and opens the directories that later operations
//     are confined to (the control socket's, for its removal at exit).
//  2. Makes an empty, deleted directory and, after Landlock (fsroot.go),
//     chroots into it: no path names a host file any more.
//  3. Empties the bounding and ambient capability sets, switches identity
//     (identity.go: --runas, else nobody for root of the initial user
//     namespace, else unchanged), sets the effective and permitted sets to
//     what is kept (CAP_NET_BIND_SERVICE in a user namespace of our own,
//     nothing in the initial one) and the inheritable set to nothing, sets
//     no_new_privs and non-dumpable, on every thread (caps.go), and reads
//     it all back.
//  4. Installs the seccomp allowlist on every thread (seccomp.go,
//     allowlist.go).
//
// Any failure is an error: gopasta never serves unconfined. The exceptions
// are what the kernel or the caller lack and the rest makes up for:
// Landlock is used where the kernel has it, and the bounding set is only
// emptied with CAP_SETPCAP (it matters across execve(2), which the filter
// forbids and no_new_privs neuters). The empty root, the identity, the
// capabilities and seccomp are required.
//
// docs/security.md compares the result with pasta, mode by mode.
package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SeccompEnv, set to "log", makes forbidden system calls a log line each
// and lets them go on, to find what the allowlist misses. It is for
// debugging and tests only (docs/security.md) and leaves the process
// unfiltered.
const SeccompEnv = "GOPASTA_SECCOMP"

// SeccompReportEnv names a file that, with SeccompEnv=log (or --debug),
// gets one line per forbidden system call as well, appended: the test
// suite runs every gopasta it starts with both and fails on any line
// (internal/nstest). The file is opened before the sandbox goes on.
const SeccompReportEnv = "GOPASTA_SECCOMP_REPORT"

// Error is a step of confinement that failed.
type Error struct {
	Step string
	Err  error
}

func (e *Error) Error() string { return "sandbox: " + e.Step + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ErrCgo means the binary was linked with cgo, which keeps the runtime from
// changing every thread's privileges.
var ErrCgo = errors.New("this gopasta was built with cgo, so it cannot drop privileges on all of its threads: rebuild it with CGO_ENABLED=0 (as `make build` does)")

// Check reports whether this process can be confined at all. gopasta calls
// it first thing, so that a binary that cannot be confined fails before
// doing anything.
func Check() error {
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_GETPID, 0, 0, 0); e == unix.ENOTSUP {
		return ErrCgo
	} else if e != 0 {
		return &Error{Step: "per-thread system calls", Err: e}
	}
	return nil
}

// CheckRunAs reports early, before any set-up, whether --runas can be
// applied later: rootless, only the user's own ids are there to become.
func CheckRunAs(runAs *RunAs, runAsInParent bool) error {
	if runAs == nil {
		return nil
	}
	_, err := chooseIdentity(runAs, runAsInParent)
	return err
}

// Options describe the run being confined.
type Options struct {
	// RunAs is --runas; nil for the default identity.
	RunAs *RunAs
	// RunAsInParent: RunAs names ids of the parent user namespace (we are
	// the copy gopasta re-executed in a user namespace of its own).
	RunAsInParent bool
	// Dirs are directories gopasta still works in by name at run time,
	// through descriptors opened before: the namespace watcher's, the
	// control socket's.
	Dirs []Dir
	// Debug makes a forbidden system call a log line naming it, on LogFd,
	// and a crash with its stack trace, instead of a silent SIGSYS.
	Debug bool
	// LogFd receives the supervisor's lines (2 for stderr).
	LogFd int
	// Logger gets a summary line at debug level.
	Logger *slog.Logger
}

// Dir is a directory in which files are looked up or removed by name at
// run time, through a descriptor opened before Apply: fstatat(2) and
// unlinkat(2) are allowed relative to it and nothing else.
type Dir struct {
	Fd     int
	Path   string // where it is, for Landlock's rule when Remove
	Stat   bool   // fstatat(2) of a name in it
	Remove bool   // unlinkat(2) of a name in it (Landlock: removing files beneath it)
}

// Sandbox is the confinement in force.
type Sandbox struct {
	Report Report
}

// Report says what Apply achieved beyond what it always does (an empty
// root, no_new_privs, empty ambient and inheritable sets).
type Report struct {
	UID, GID    int
	Caps        uint64 // effective = permitted
	Bounding    bool   // bounding set emptied (false without CAP_SETPCAP)
	Landlock    int    // ABI used, 0 none
	Seccomp     string // kill, report or log
	SyscallsLen int    // allowlist entries for this architecture
}

func (r Report) String() string {
	return fmt.Sprintf("uid=%d gid=%d caps=%#x bounding-cleared=%t no-new-privs=true root=empty landlock=%s seccomp=%s (%d calls)",
		r.UID, r.GID, r.Caps, r.Bounding, landlockString(r.Landlock), r.Seccomp, r.SyscallsLen)
}

func landlockString(abi int) string {
	if abi == 0 {
		return "unavailable"
	}
	return "v" + strconv.Itoa(abi)
}

// Apply confines the process (see the package comment). On error the
// process is partly confined and must exit.
func Apply(o Options) (*Sandbox, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	mode := modeKill
	if o.Debug {
		mode = modeReport
	}
	switch v := os.Getenv(SeccompEnv); v {
	case "":
	case "log":
		mode = modeLog
	default:
		return nil, &Error{Step: SeccompEnv, Err: fmt.Errorf("unknown value %q (only \"log\" is known)", v)}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	// 1. What would be read from files later.
	_ = time.Local.String() // loads the zone now: the log's timestamps
	id, err := chooseIdentity(o.RunAs, o.RunAsInParent)
	if err != nil {
		return nil, err
	}
	last := lastCap()
	sb := &Sandbox{}
	dirs := o.Dirs
	var removeIn []string
	for _, d := range dirs {
		if d.Remove {
			removeIn = append(removeIn, d.Path)
		}
	}
	var sup *supervisor
	if mode != modeKill {
		sup = newSupervisor(o.LogFd, os.Getpid(), mode)
		if path := os.Getenv(SeccompReportEnv); path != "" {
			fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return nil, &Error{Step: SeccompReportEnv, Err: &os.PathError{Op: "open", Path: path, Err: err}}
			}
			sup.report = fd
		}
	}

	// 2. The file system.
	root, err := emptyDir()
	if err != nil {
		return nil, err
	}
	abi, err := restrictFiles(removeIn)
	if err == nil {
		err = chrootInto(root)
	}
	// Closed now, not at return: once the filter is on, which is what
	// an observer takes for "confined", no descriptor names the
	// directory any more.
	root.Close()
	if err != nil {
		return nil, err
	}

	// 3. Identity, capabilities, no_new_privs.
	bounding, err := dropBounding(last)
	if err != nil {
		return nil, err
	}
	if err := clearAmbient(); err != nil {
		return nil, err
	}
	if err := become(id); err != nil {
		return nil, err
	}
	var keep capMask
	if id.uid == 0 && !id.initial {
		// Root of a user namespace of our own: binding ports below 1024
		// in the namespaces it owns (auto forwarding into the spawned
		// namespace). Nothing on the host.
		keep = 1 << unix.CAP_NET_BIND_SERVICE
	}
	if err := setCaps(keep); err != nil {
		return nil, err
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, &Error{Step: "making the process non-dumpable", Err: err}
	}
	if err := setNoNewPrivs(); err != nil {
		return nil, err
	}
	if err := verifyThread(keep, last, bounding); err != nil {
		return nil, err
	}

	// 4. seccomp, last: it forbids most of the above.
	p := &filterParams{pid: os.Getpid()}
	for _, d := range dirs {
		if d.Stat {
			p.statDirs = append(p.statDirs, d.Fd)
		}
		if d.Remove {
			p.unlinkDirs = append(p.unlinkDirs, d.Fd)
		}
	}
	lfd, eff, err := installFilter(p, mode)
	if err != nil {
		return nil, err
	}
	if lfd >= 0 && sup != nil {
		sup.fd = lfd
		go sup.run()
	}

	sb.Report = Report{
		UID: id.uid, GID: id.gid, Caps: uint64(keep), Bounding: bounding,
		Landlock: abi, Seccomp: eff.String(), SyscallsLen: len(forArch(runtime.GOARCH)),
	}
	log.Debug("sandbox: " + sb.Report.String())
	if eff == modeLog {
		msg := "sandbox: " + SeccompEnv + "=log: forbidden system calls are logged and allowed; this is for debugging only"
		if sup.report >= 0 {
			// A harness collects the report (the test suite): the
			// warning would only be noise in the output it checks.
			log.Debug(msg)
		} else {
			log.Warn(msg)
		}
	}
	return sb, nil
}

// CloseInherited closes every descriptor above 2 that this process
// inherited, except those in keep. Inherited descriptors are told apart by
// FD_CLOEXEC: Go opens everything close-on-exec, so a descriptor without
// it came from whoever executed us (and leaked through execve). Call it
// first thing in main.
func CloseInherited(keep ...int) {
	fds := openFds()
	for _, fd := range fds {
		if fd <= 2 || contains(keep, fd) {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		unix.Close(fd)
	}
}

// openFds lists our descriptors: /proc/self/fd, else a scan up to the
// descriptor limit (at most 65536).
func openFds() []int {
	var fds []int
	if d, err := os.Open("/proc/self/fd"); err == nil {
		names, err := d.Readdirnames(-1)
		dfd := int(d.Fd())
		if err == nil {
			for _, n := range names {
				if fd, err := strconv.Atoi(n); err == nil && fd != dfd {
					fds = append(fds, fd)
				}
			}
			d.Close()
			return fds
		}
		d.Close()
	}
	limit := 1024
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur > 0 {
		limit = int(min(rl.Cur, 65536))
	}
	for fd := 3; fd < limit; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
