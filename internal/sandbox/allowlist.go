package sandbox

import (
	"runtime"
	"slices"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// The seccomp allowlist: every system call gopasta makes once its set-up is
// done, with why. Anything else ends the process (SIGSYS). Two proofs keep
// it whole (docs/security.md): TestAllowlistDerived derives from the code
// every system call that the code running after the sandbox can reach and
// compares both ways (each such call has an entry, each entry not marked
// runtime is such a call), and `make test` runs the end-to-end suite with
// GOPASTA_SECCOMP=log and a report file, failing on any call reported
// there. The Go runtime's own calls, made from assembly the derivation
// cannot see, are marked runtime; entries it needs only on rarer paths (a
// signal, a crash, a slow clock) say so.
//
// Names are the kernel's for the architecture (arch "" means both amd64 and
// arm64, whose tables differ: arm64 has only the *at and p* variants).
// TestAllowlistNames checks every name against both tables.

// rule is one allowlist entry.
type rule struct {
	name string
	arch string // "", "amd64" or "arm64"
	why  string
	// runtime: the Go runtime makes this call from its own code (mostly
	// assembly: threads, memory, signals), or the kernel does for it
	// (restart_syscall). TestAllowlistDerived cannot see those; every
	// entry without the mark must be a call it derives.
	runtime bool
	// args, when set, narrows the call to argument values: the call is
	// allowed when every condition of any one set holds. nil allows every
	// use of the call.
	args func(p *filterParams) [][]seccomp.Condition
}

// filterParams are the run's values the conditions refer to.
type filterParams struct {
	pid        int   // our process id (signals to ourselves only)
	statDirs   []int // directories in which fstatat(2) looks up names
	unlinkDirs []int // directories in which unlinkat(2) removes names
}

var allowlist = []rule{
	// Descriptors opened before the sandbox: TAP frames (plain I/O),
	// pipes, eventfds (vhost-net kicks and calls, the event loops'
	// wake-ups), timerfds, the log, the pcap file, the spawn control pipe.
	{name: "read", why: "TAP frames, eventfds, timerfds, inotify, the Go runtime's poller wake-up"},
	{name: "write", why: "TAP frames, eventfds, the log and pcap files, the system logger's socket (background mode), the spawn control pipe"},
	{name: "readv", why: "vhost-net mode: frames read from the TAP into ring buffers (RX by read, the default)"},
	{name: "pread64", why: "files opened before the sandbox, re-read from the start: /proc/PID/stat (namespace watch), the ephemeral port range, /proc net tables"},
	{name: "close", why: "ending flows, connections, listeners and splice pipes"},
	{name: "ftruncate", why: "the log file's in-place rotation (--log-size)"},
	{name: "pwrite64", why: "the log file's in-place rotation (--log-size): the newest lines written over the oldest"},
	{name: "dup3", why: "background mode: standard streams onto /dev/null once ready"},

	// Sockets: the engine's host-side sockets, namespace-side sockets made
	// on the namespace thread, listeners of auto forwarding, inet_diag
	// scans, IPv6 zone look-ups (rtnetlink).
	{name: "socket", why: "host and namespace sockets of flows and forwarded ports; netlink for inet_diag and zone look-ups", args: socketArgs},
	{name: "bind", why: "flows bound to the namespace's source port; auto-forwarded listeners"},
	{name: "listen", why: "auto-forwarded TCP listeners"},
	{name: "accept4", why: "connections on forwarded ports"},
	{name: "connect", why: "flows toward the host's peers and into the namespace; spliced connections"},
	{name: "getsockname", why: "the net package's accept: local address of a control socket client; the loopback address a spliced connection reached on a listener bound to any address (-T, and -t with --host-lo-to-ns-lo); whether a bulk connection's peer is on this host (sock.LocalReno)"},
	{name: "getsockopt", why: "SO_ERROR of connects, SO_MEMINFO of flows, SO_PEERCRED of control socket clients"},
	{name: "setsockopt", why: "socket options of new flows and listeners; keepalives on a host socket once the namespace probes; reno for a bulk connection to a peer on this host (sock.LocalReno)"},
	{name: "sendto", why: "UDP and ICMP datagrams, netlink requests"},
	{name: "recvfrom", why: "UDP and ICMP datagrams, netlink replies, TCP data"},
	{name: "sendmsg", why: "TCP data toward the host, UDP with ancillary data"},
	{name: "recvmsg", why: "TCP data from the host, UDP with PKTINFO, ICMP errors"},
	{name: "sendmmsg", why: "batched UDP and ICMP datagrams"},
	{name: "recvmmsg", why: "batched UDP and ICMP datagrams"},
	{name: "shutdown", why: "half-closing TCP connections (FIN)"},
	{name: "splice", why: "the loopback fast path: socket to pipe to socket"},
	{name: "pipe2", why: "new splice pipes when the pool is empty"},
	{name: "fcntl", why: "O_NONBLOCK on new sockets; splice pipe sizes; a listener's twin for a rule the control socket moves (F_DUPFD_CLOEXEC)", args: fcntlArgs},
	{name: "ioctl", why: "the terminal's foreground group when forwarding SIGINT; vhost-net's queues detached at exit; the seccomp supervisor", args: ioctlArgs},

	// Event loops, timers, waiting.
	{name: "epoll_ctl", why: "adding and removing flows and listeners in the event loops"},
	{name: "epoll_pwait", why: "the event loops and the Go runtime's poller (x/sys/unix's EpollWait)"},
	{name: "ppoll", why: "waiting for a TCP socket's send buffer (fwd); a pidfd's readability (namespace watch)"},
	{name: "timerfd_settime", why: "the splice loop's and the engine's timers"},
	{name: "waitid", why: "reaping the spawned namespace's init (os/exec, P_PIDFD)"},
	{name: "wait4", why: "reaping the spawned namespace's init where pidfds are missing (os/exec's fallback)"},
	{name: "pidfd_send_signal", why: "SIGKILL to the spawned namespace's init when set-up fails (os.Process.Kill)"},
	{name: "getpgid", why: "our own process group (x/sys/unix's Getpgrp is getpgid(0)): is the terminal's foreground group ours, before forwarding SIGINT", args: ownGroupArgs},
	{name: "unlinkat", why: "removing the control socket at exit, in its directory only", args: unlinkArgs},
	{name: "newfstatat", arch: "amd64", why: "has the watched namespace file gone; is the control socket still ours: in their directories only", args: statArgs},
	{name: "fstatat", arch: "arm64", why: "fstatat(2) on arm64, as newfstatat", args: statArgs},

	// The Go runtime.
	{name: "futex", runtime: true, why: "Go runtime: goroutine parking and locks"},
	{name: "nanosleep", runtime: true, why: "Go runtime: sysmon and spinning; the seccomp supervisor before it exits"},
	{name: "sched_yield", runtime: true, why: "Go runtime: spinning"},
	{name: "clock_gettime", runtime: true, why: "Go runtime: time where the vDSO cannot serve it (an unstable clocksource)"},
	{name: "mmap", runtime: true, why: "Go runtime: heap and stacks, never executable", args: noExecArgs},
	{name: "munmap", runtime: true, why: "Go runtime: returning memory; vhost-net's memory table at exit"},
	{name: "madvise", runtime: true, why: "Go runtime: returning memory to the kernel"},
	{name: "mprotect", runtime: true, why: "Go runtime: faulting freed memory (sysFault, in its debugging modes), never executable", args: noExecArgs},
	{name: "clone", runtime: true, why: "Go runtime: new OS threads only (CLONE_THREAD, no new namespaces)", args: cloneArgs},
	{name: "rt_sigaction", runtime: true, why: "Go runtime: signal handlers"},
	{name: "rt_sigprocmask", runtime: true, why: "Go runtime: signal masks of new threads"},
	{name: "rt_sigreturn", runtime: true, why: "Go runtime: return from every signal handler"},
	{name: "sigaltstack", runtime: true, why: "Go runtime: signal stacks of new threads"},
	{name: "tgkill", runtime: true, why: "Go runtime: goroutine preemption (SIGURG) and per-thread signals; the seccomp supervisor's SIGSYS (--debug); to our own threads only", args: ownProcessArgs},
	{name: "kill", runtime: true, why: "Go runtime: dying of a signal (e.g. SIGPIPE on a closed stdout), to ourselves only", args: ownProcessArgs},
	{name: "getpid", runtime: true, why: "Go runtime: signals to ourselves"},
	{name: "gettid", runtime: true, why: "Go runtime: thread ids"},
	{name: "sched_getaffinity", runtime: true, why: "Go runtime: the periodic GOMAXPROCS update"},
	{name: "prctl", runtime: true, why: "Go runtime: naming new memory (PR_SET_VMA), where the kernel has CONFIG_ANON_VMA_NAME", args: prctlArgs},
	{name: "exit", runtime: true, why: "Go runtime: ending OS threads (e.g. the namespace thread at exit)"},
	{name: "exit_group", runtime: true, why: "exiting, at the end or after an error"},
	{name: "restart_syscall", runtime: true, why: "a sleep or timed wait interrupted by a signal, restarted by the kernel"},
}

// forArch returns the rules of the running architecture.
func forArch(goarch string) []rule {
	var out []rule
	for _, r := range allowlist {
		if r.arch == "" || r.arch == goarch {
			out = append(out, r)
		}
	}
	return out
}

func eq(arg uint32, v uint64) seccomp.Condition {
	return seccomp.Condition{Argument: arg, Operation: seccomp.Equal, Value: v}
}

// socketArgs: Internet sockets, and netlink for inet_diag (auto
// forwarding) and rtnetlink (IPv6 zone names). No packet, Unix or other
// sockets.
func socketArgs(*filterParams) [][]seccomp.Condition {
	return [][]seccomp.Condition{
		{eq(0, unix.AF_INET)},
		{eq(0, unix.AF_INET6)},
		{eq(0, unix.AF_NETLINK), eq(2, unix.NETLINK_ROUTE)},
		{eq(0, unix.AF_NETLINK), eq(2, unix.NETLINK_INET_DIAG)},
	}
}

func fcntlArgs(*filterParams) [][]seccomp.Condition {
	var out [][]seccomp.Condition
	for _, cmd := range []uint64{unix.F_GETFL, unix.F_SETFL, unix.F_GETFD, unix.F_SETFD,
		unix.F_GETPIPE_SZ, unix.F_SETPIPE_SZ, unix.F_DUPFD_CLOEXEC} {
		out = append(out, []seccomp.Condition{eq(1, cmd)})
	}
	return out
}

// ioctlRequests: the terminal's foreground group, the supervisor's
// SECCOMP_IOCTL_NOTIF_RECV and _SEND (--debug, GOPASTA_SECCOMP=log), and
// vhost-net's backend detached at exit.
var ioctlRequests = []uint64{
	unix.TIOCGPGRP,
	unix.SECCOMP_IOCTL_NOTIF_RECV, unix.SECCOMP_IOCTL_NOTIF_SEND,
	vhostNetSetBackend,
}

// vhostNetSetBackend is VHOST_NET_SET_BACKEND, _IOW(0xAF, 0x30, struct
// vhost_vring_file): vhost-net's queues are detached from the TAP at exit.
const vhostNetSetBackend = 0x4008af30

func ioctlArgs(*filterParams) [][]seccomp.Condition {
	var out [][]seccomp.Condition
	for _, req := range ioctlRequests {
		out = append(out, []seccomp.Condition{eq(1, req)})
	}
	return out
}

// unlinkArgs and statArgs allow the call relative to the directories
// given only; none given, not at all.
func unlinkArgs(p *filterParams) [][]seccomp.Condition { return inDirs(p.unlinkDirs) }
func statArgs(p *filterParams) [][]seccomp.Condition   { return inDirs(p.statDirs) }

func inDirs(fds []int) [][]seccomp.Condition {
	var out [][]seccomp.Condition
	for _, fd := range fds {
		out = append(out, []seccomp.Condition{eq(0, uint64(fd))})
	}
	return out
}

func noExecArgs(*filterParams) [][]seccomp.Condition {
	return [][]seccomp.Condition{{{Argument: 2, Operation: seccomp.BitsNotSet, Value: unix.PROT_EXEC}}}
}

// newNamespaces are clone's flags that make namespaces.
const newNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

func cloneArgs(*filterParams) [][]seccomp.Condition {
	return [][]seccomp.Condition{{
		{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD},
		{Argument: 0, Operation: seccomp.BitsNotSet, Value: newNamespaces},
	}}
}

func ownProcessArgs(p *filterParams) [][]seccomp.Condition {
	return [][]seccomp.Condition{{eq(0, uint64(p.pid))}}
}

func ownGroupArgs(*filterParams) [][]seccomp.Condition {
	return [][]seccomp.Condition{{eq(0, 0)}}
}

func prctlArgs(*filterParams) [][]seccomp.Condition {
	return [][]seccomp.Condition{{eq(0, unix.PR_SET_VMA)}}
}

// hot are the calls made per packet or per event-loop round, most frequent
// first (counted over the test suite). The program checks them first: a
// kernel without seccomp's action cache (before Linux 5.11) runs the
// program on every call, one comparison per entry until a match; later
// kernels skip it for calls allowed whatever their arguments.
var hot = []string{"read", "nanosleep", "write", "epoll_pwait", "getsockopt", "recvfrom",
	"futex", "recvmsg", "sendmsg", "sendto", "splice", "readv", "recvmmsg", "sendmmsg"}

// ordered returns rules with the hot ones first, the others in list order.
func ordered(rules []rule) []rule {
	rank := func(name string) int {
		for i, h := range hot {
			if h == name {
				return i
			}
		}
		return len(hot)
	}
	out := slices.Clone(rules)
	slices.SortStableFunc(out, func(a, b rule) int { return rank(a.name) - rank(b.name) })
	return out
}

// policy builds the filter's policy for the running architecture: the
// allowlist, and def for everything else.
func policy(p *filterParams, def seccomp.Action) seccomp.Policy {
	g := seccomp.SyscallGroup{Action: seccomp.ActionAllow}
	for _, r := range ordered(forArch(runtime.GOARCH)) {
		if r.args == nil {
			g.Names = append(g.Names, r.name)
			continue
		}
		for _, c := range r.args(p) {
			g.NamesWithCondtions = append(g.NamesWithCondtions, seccomp.NameWithConditions{Name: r.name, Conditions: c})
		}
	}
	return seccomp.Policy{DefaultAction: def, Syscalls: []seccomp.SyscallGroup{g}}
}
