package ns

// Spawn mode: the namespace init started with new user, network, UTS, IPC,
// mount and PID namespaces, its id maps, and the re-execution in a user
// namespace of our own.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// SpawnConfig describes the command to run in new namespaces.
type SpawnConfig struct {
	Command []string // argv; the caller resolves the default ($SHELL or /bin/sh)
	// LoginShell runs Command[0] with "-" before its name in argv[0], the
	// mark of a login shell (what pasta does for its default command): the
	// shell then reads the profile files.
	LoginShell bool
	Hostname   string // set in the new UTS namespace; "" keeps the host's name
	// Host ids mapped to 0 inside. Zero means the caller's own ids: mapping
	// host root needs root anyway, and then os.Getuid() is 0 too. When
	// both are 0 and the caller may map other ids (root), every id is
	// mapped to itself instead: see idMaps.
	UID, GID int
	// Standard streams of the command; nil means gopasta's own.
	Stdin, Stdout, Stderr *os.File
	Env                   []string // nil = os.Environ()
	// NoUserNS skips the new user namespace (UID and GID are then unused):
	// the other namespaces belong to gopasta's own user namespace, which
	// lets gopasta join the network namespace. Use it when gopasta runs as
	// root or was re-executed by ReexecInUserNS.
	NoUserNS bool
}

// A Child is the init process of a spawned namespace set. It runs the
// command once Release is called, forwards signals to it and exits with its
// status.
type Child struct {
	Pid int // host pid of the namespace init; its namespaces are the command's

	cmd      *exec.Cmd
	ctl      *os.File // write end of the control pipe: go-ahead, then signals
	ttyFiles []*os.File

	mu       sync.Mutex
	released bool

	done   chan struct{} // closed once the init has been reaped
	status int
	err    error
}

// Spawn starts the namespace init. On return the user, network, UTS, IPC,
// mount and PID namespaces exist and can be joined through /proc/<Pid>/ns/,
// but the command has not started: it runs once Release is called, so it
// never sees an unconfigured network.
func Spawn(cfg SpawnConfig) (*Child, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("ns: spawn: no command")
	}
	for _, a := range cfg.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, errors.New("ns: spawn: command contains a NUL byte")
		}
	}
	if strings.IndexByte(cfg.Hostname, 0) >= 0 || len(cfg.Hostname) > 64 {
		return nil, fmt.Errorf("ns: spawn: invalid hostname %q (at most 64 bytes)", cfg.Hostname)
	}
	uid, gid := cfg.UID, cfg.GID
	if uid == 0 {
		uid = os.Getuid()
	}
	if gid == 0 {
		gid = os.Getgid()
	}
	if uid < 0 || gid < 0 {
		return nil, fmt.Errorf("ns: spawn: invalid uid %d / gid %d", uid, gid)
	}
	std := [3]*os.File{cfg.Stdin, cfg.Stdout, cfg.Stderr}
	for i, def := range []*os.File{os.Stdin, os.Stdout, os.Stderr} {
		if std[i] == nil {
			std[i] = def
		}
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	env = withoutStubEnv(env)
	env = append(env, envInit+"="+initProtocol)
	if cfg.Hostname != "" {
		env = append(env, envHostname+"="+cfg.Hostname)
	}
	if cfg.LoginShell {
		env = append(env, envLogin+"="+initProtocol)
	}

	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("ns: spawn: %w", err)
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       append([]string{stubArgv0}, cfg.Command...),
		Env:        env,
		Stdin:      std[0],
		Stdout:     std[1],
		Stderr:     std[2],
		ExtraFiles: []*os.File{ctlR}, // fd 3 (ctlFd) in the stub
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
				unix.CLONE_NEWNS | unix.CLONE_NEWPID,
			// If gopasta dies the namespace has no network left: take the
			// init, and with it every process in the PID namespace, along.
			Pdeathsig: unix.SIGKILL,
		},
	}
	if !cfg.NoUserNS {
		a := cmd.SysProcAttr
		a.Cloneflags |= unix.CLONE_NEWUSER
		a.UidMappings, a.GidMappings, a.GidMappingsEnableSetgroups = idMaps(uid, gid)
	}
	c := &Child{cmd: cmd, ctl: ctlW, ttyFiles: std[:], done: make(chan struct{})}

	// Pdeathsig fires when the forking OS *thread* exits, not the process.
	// Fork from a locked goroutine that stays alive until the init is
	// reaped, so a thread discarded by the runtime never kills the child.
	err = startLocked(cmd, func(werr error) {
		c.status, c.err = exitStatus(cmd.ProcessState, werr)
		ctlW.Close()
		close(c.done)
	})
	ctlR.Close()
	if err != nil {
		ctlW.Close()
		return nil, fmt.Errorf("ns: spawn namespaces: %w%s", err, spawnHint(err))
	}
	c.Pid = cmd.Process.Pid
	return c, nil
}

// idMaps returns the uid and gid maps of a user namespace this process
// creates, where host uid and gid are root, and whether setgroups(2) stays
// allowed in it.
//
// An unprivileged caller may only map its own ids, one each, and must deny
// setgroups (user_namespaces(7)): its command is root over what the caller
// owns and nothing else. A caller that is root (uid and gid 0, with
// CAP_SETUID and CAP_SETGID) maps every id of its own user namespace to
// itself instead ("0 0 4294967295" on the host) and keeps setgroups: its
// command is then root over every file, whoever owns it, as root is
// outside, and can switch to any user (su, setuid programs, daemons that
// drop privileges). The new user namespace stays, so the command's root
// holds its capabilities over its own namespaces only: not over the host's
// network, kernel or devices. docs/architecture.md explains the choice.
//
// Root inside a user namespace whose creator denied setgroups (what
// `unshare -Ur` gives) cannot allow it again in a child: the kernel
// refuses "allow" there, so the child denies it too.
func idMaps(uid, gid int) (uids, gids []syscall.SysProcIDMap, setgroups bool) {
	if uid == 0 && gid == 0 && os.Getuid() == 0 && os.Getgid() == 0 && haveCaps(unix.CAP_SETUID, unix.CAP_SETGID) {
		u, uerr := identityMap("/proc/self/uid_map")
		g, gerr := identityMap("/proc/self/gid_map")
		if uerr == nil && gerr == nil {
			return u, g, setgroupsAllowed("/proc/self/setgroups")
		}
	}
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}, false
}

// setgroupsAllowed reads a user namespace's setgroups file: "allow" or
// "deny". A kernel without the file (before 3.19) has no such switch.
func setgroupsAllowed(path string) bool {
	b, err := os.ReadFile(path)
	return err != nil || strings.TrimSpace(string(b)) != "deny"
}

// identityMap reads an id map of our own user namespace (lines of "first
// id inside, first id outside, count") and returns the map of a child
// namespace that keeps each of those ids as it is. Ids in a child's map are
// written as our namespace sees them, i.e. the "inside" column here.
func identityMap(path string) ([]syscall.SysProcIDMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseIdentityMap(string(b))
}

func parseIdentityMap(s string) ([]syscall.SysProcIDMap, error) {
	var m []syscall.SysProcIDMap
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("ns: id map line %q: want 3 fields", line)
		}
		first, err1 := strconv.ParseUint(f[0], 10, 32)
		_, err2 := strconv.ParseUint(f[1], 10, 32)
		count, err3 := strconv.ParseUint(f[2], 10, 32)
		if err := errors.Join(err1, err2, err3); err != nil || count == 0 || first+count > 1<<32-1 {
			// (uid_t)-1 is no id: a map ends at 4294967294 at most.
			return nil, fmt.Errorf("ns: id map line %q: want two ids and a count, ending below 4294967295", line)
		}
		m = append(m, syscall.SysProcIDMap{ContainerID: int(first), HostID: int(first), Size: int(count)})
	}
	if len(m) == 0 {
		return nil, errors.New("ns: empty id map")
	}
	return m, nil
}

// haveCaps reports whether every one of caps is in our effective set.
func haveCaps(caps ...int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	for _, c := range caps {
		if data[c/32].Effective&(1<<(c%32)) == 0 {
			return false
		}
	}
	return true
}

func spawnHint(err error) string {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSPC) {
		return " (unprivileged user namespaces may be disabled: check kernel.unprivileged_userns_clone, user.max_user_namespaces and AppArmor's userns restriction)"
	}
	return ""
}

// NetNSPath returns the path of the child's network namespace.
func (c *Child) NetNSPath() string { return "/proc/" + strconv.Itoa(c.Pid) + "/ns/net" }

// UserNSPath returns the path of the child's user namespace.
func (c *Child) UserNSPath() string { return "/proc/" + strconv.Itoa(c.Pid) + "/ns/user" }

// Release tells the init that the network is ready: the command starts.
func (c *Child) Release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return ErrReleased
	}
	c.released = true
	if _, err := c.ctl.Write([]byte{ctlGo}); err != nil {
		return fmt.Errorf("ns: release command: namespace init is gone: %w", err)
	}
	return nil
}

// Signal forwards sig to the command (or, before Release, makes the init
// exit with 128+sig without running it). SIGKILL kills the init and with it
// the whole PID namespace.
//
// The command shares gopasta's process group, so a terminal's SIGINT and
// SIGQUIT reach it directly; when the terminal's foreground process group is
// gopasta's, Signal drops those two rather than deliver them twice.
func (c *Child) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok || s <= 0 || s > 64 {
		return fmt.Errorf("ns: unsupported signal %v", sig)
	}
	select {
	case <-c.done:
		return os.ErrProcessDone
	default:
	}
	if s == unix.SIGKILL {
		// Once gopasta has dropped to nobody (internal/sandbox), a root
		// command's init is no longer ours to kill: ask it to exit,
		// through the control pipe, as for any other signal.
		if err := c.cmd.Process.Kill(); !errors.Is(err, unix.EPERM) {
			return err
		}
	}
	if (s == unix.SIGINT || s == unix.SIGQUIT) && c.terminalSentIt() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.ctl.Write([]byte{byte(s)}); err != nil {
		return os.ErrProcessDone
	}
	return nil
}

// terminalSentIt reports whether the command's terminal has gopasta's
// process group in the foreground, i.e. whether a SIGINT/SIGQUIT we got
// most likely came from the keyboard and hit the command as well.
func (c *Child) terminalSentIt() bool { return foregroundIsOurs(c.ttyFiles) }

// foregroundIsOurs reports whether the first terminal among files has our
// process group in the foreground.
func foregroundIsOurs(files []*os.File) bool {
	pgrp := unix.Getpgrp()
	for _, f := range files {
		fg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
		if err == nil {
			return fg == pgrp
		}
	}
	return false
}

// Wait waits for the init to exit and returns the command's exit status,
// 128+N if it was killed by signal N. err is set only when the status could
// not be obtained. Wait may be called more than once.
func (c *Child) Wait() (status int, err error) {
	<-c.done
	return c.status, c.err
}

// Done is closed when the init has exited and Wait will not block.
func (c *Child) Done() <-chan struct{} { return c.done }

func exitStatus(ps *os.ProcessState, werr error) (int, error) {
	if ps == nil {
		return 0, fmt.Errorf("ns: wait for namespace init: %w", werr)
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return ps.ExitCode(), nil
	}
	switch {
	case ws.Exited():
		return ws.ExitStatus(), nil
	case ws.Signaled():
		return 128 + int(ws.Signal()), nil
	}
	return 0, fmt.Errorf("ns: namespace init ended with wait status %#x", uint32(ws))
}

const envUserNS = "GOPASTA_USERNS"

// Read (and hidden from children) before main runs, so a command or nested
// gopasta never mistakes itself for the re-executed copy.
var inReexecUserNS = os.Getenv(envUserNS) == initProtocol

func init() { os.Unsetenv(envUserNS) }

// InReexecUserNS reports whether this process is the copy started by
// ReexecInUserNS, i.e. root in a user namespace of its own.
func InReexecUserNS() bool { return inReexecUserNS }

// ReexecEnv is the environment a further copy of this process needs to be
// known as running in the re-executed user namespace too (attach mode's
// background copy, which must read --runas the same way): the marker when
// this process is such a copy, else nothing.
func ReexecEnv() []string {
	if !inReexecUserNS {
		return nil
	}
	return []string{envUserNS + "=" + initProtocol}
}

// startLocked starts cmd from a goroutine locked to its OS thread, which
// stays alive until cmd is reaped and then calls exited with Wait's
// result: Pdeathsig follows the thread that forked, so a thread the
// runtime discarded would kill the child. It returns Start's error.
func startLocked(cmd *exec.Cmd, exited func(werr error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}

// ReexecInUserNS runs gopasta again, with the same arguments and standard
// streams, in a new user namespace where it is root (uid_map "0 UID 1",
// gid_map "0 GID 1", setgroups denied; every id mapped to itself when we
// are root, see idMaps), still in the host's network namespace, and returns
// the status to exit with once that copy ends.
// SIGINT, SIGTERM, SIGHUP and SIGQUIT received meanwhile are passed on
// (keyboard signals only when the terminal did not deliver them already).
//
// This is how an unprivileged gopasta gets to join the network namespaces
// it creates: the copy owns them and holds CAP_SYS_ADMIN in its own user
// namespace, which setns(CLONE_NEWNET) requires. The copy spawns with
// SpawnConfig.NoUserNS. Joining someone else's existing user namespace
// (attach mode) is not possible this way: setns(CLONE_NEWUSER) refuses
// multithreaded processes, and a Go process always is.
func ReexecInUserNS() (status int, err error) {
	if inReexecUserNS {
		return 0, errors.New("ns: already re-executed in a user namespace")
	}
	uids, gids, setgroups := idMaps(os.Getuid(), os.Getgid())
	cmd := &exec.Cmd{
		Path:   "/proc/self/exe",
		Args:   os.Args,
		Env:    append(withoutStubEnv(os.Environ()), envUserNS+"="+initProtocol),
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 unix.CLONE_NEWUSER,
			UidMappings:                uids,
			GidMappings:                gids,
			GidMappingsEnableSetgroups: setgroups,
			Pdeathsig:                  unix.SIGKILL,
		},
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	defer signal.Stop(sigs)

	done := make(chan struct{})
	if err := startLocked(cmd, func(werr error) {
		status, err = exitStatus(cmd.ProcessState, werr)
		close(done)
	}); err != nil {
		return 0, fmt.Errorf("ns: re-execute in a user namespace: %w%s", err, spawnHint(err))
	}
	ttys := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	for {
		select {
		case <-done:
			return status, err
		case sig := <-sigs:
			s := sig.(syscall.Signal)
			if (s == unix.SIGINT || s == unix.SIGQUIT) && foregroundIsOurs(ttys) {
				continue
			}
			cmd.Process.Signal(s)
		}
	}
}
