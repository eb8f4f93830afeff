package run

// Main and Run: one run from the configuration to the exit status, and
// waiting for the spawned command.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/internal/cmdline"
	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/ctlsock"
	"github.com/gopasta/gopasta/internal/faults"
	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/internal/logging"
	"github.com/gopasta/gopasta/internal/portfwd"
	"github.com/gopasta/gopasta/internal/sandbox"
	"github.com/gopasta/gopasta/ns"
	"github.com/gopasta/gopasta/tap"
)

// Main is gopasta: it parses args (os.Args, program name first), runs and
// returns the process exit status. In spawn mode gopasta re-executes
// itself as the namespace's init; that copy never returns from Main.
func Main(args []string) int {
	if ns.IsInitStub() {
		ns.InitStubMain()
	}
	// Run closes what we inherited, once it knows which descriptor --fd
	// names.
	return cmdline.Main(args, os.Stdout, os.Stderr, Run)
}

// Run carries out a validated configuration and returns the exit status:
// the command's in spawn mode, 0 in attach mode once the namespace is gone.
func Run(cfg *config.Config) (int, error) {
	// Descriptors whoever started us leaked are not ours to hold
	// (docs/security.md); the background copy's readiness pipe and
	// --fd's TAP are.
	tapFD, err := takeTapFD(cfg)
	keep := daemonFD()
	if tapFD >= 0 {
		keep = append(keep, tapFD)
	}
	sandbox.CloseInherited(keep...)
	if err != nil {
		return 1, err
	}
	if cfg.Mode == config.ModeOCIHook {
		return runHook(os.Stdin) // hook.go: becomes an attach run
	}
	// A binary that could not be confined fails before doing anything.
	if err := sandbox.Check(); err != nil {
		return 1, err
	}
	if status, done, err := enterUserNS(cfg, tapFD); done {
		return status, err
	}

	// A --runas that cannot be applied later fails now, in one line.
	if cfg.RunAs != nil {
		if err := sandbox.CheckRunAs(&sandbox.RunAs{UID: cfg.RunAs.UID, GID: cfg.RunAs.GID}, ns.InReexecUserNS()); err != nil {
			return 1, err
		}
	}

	// Attach mode goes to the background once ready, unless -f. The
	// foreground copy only relays the outcome of the set-up.
	var bg *background
	if cfg.Mode == config.ModeAttach && !cfg.Foreground {
		var relay bool
		var status int
		var err error
		bg, relay, status, err = daemonize(tapFD)
		if relay || err != nil {
			return status, err
		}
	}

	lo := logging.Options{
		Quiet: cfg.Quiet, Debug: cfg.Debug, Trace: cfg.Trace,
		File: cfg.LogFile, MaxSize: cfg.LogSize,
	}
	if bg != nil {
		// Once in the background, stderr is gone: without -l, messages
		// go to the system logger, connected now, before the sandbox
		// takes the file system and Unix sockets away.
		lo.Syslog = logging.SyslogPath
	}
	log, logOut, err := logging.New(lo)
	if err != nil {
		return 1, err
	}
	defer logOut.Close()
	slog.SetDefault(log)
	if faults.Enabled {
		// A test build (package faults): say what was injected, for the
		// test to check that every error path ran.
		defer func() { log.Warn("faults injected", "counts", faults.Report()) }()
	}

	// What the user watches in spawn mode is the command's output: lines
	// that only describe the set-up are for attach mode, or -d.
	notice := log.Info
	if cfg.Mode == config.ModeSpawn {
		notice = log.Debug
	}
	// A host without IPv6 (none in the kernel, or switched off by
	// sysctl) gives the namespace none either: IPv4 only, as with -4.
	hostNoIPv6 := false
	if !cfg.IPv4Only {
		if why := ns.HostIPv6Off(); why != "" {
			if cfg.IPv6Only {
				return 1, fmt.Errorf("--ipv6-only: the host has no IPv6 (%s)", why)
			}
			hostNoIPv6 = true
			notice("IPv6 is off on the host (" + why + "): IPv4 only")
		}
	}
	tmpl, err := ns.DiscoverTemplate(ns.TemplateOptions{
		Interface:   cfg.Interface,
		OutboundIf4: cfg.OutboundIf4,
		OutboundIf6: cfg.OutboundIf6,
		NoIPv4:      cfg.IPv6Only,
		NoIPv6:      cfg.IPv4Only || hostNoIPv6,
	})
	if err != nil {
		return 1, fmt.Errorf("host template interface: %w", err)
	}
	plan, err := planNetwork(cfg, tmpl)
	if err != nil {
		return 1, err
	}
	if hostNoIPv6 {
		plan.dropIPv6()
	}

	var child *ns.Child
	netnsPath := cfg.NetNS
	if cfg.Mode == config.ModeSpawn {
		child, err = ns.Spawn(ns.SpawnConfig{
			Command: spawnCommand(cfg.Command),
			// With no command, a login shell, as pasta starts.
			LoginShell: len(cfg.Command) == 0,
			Hostname:   spawnHostname(cfg.Hostname),
			UID:        os.Getuid(),
			GID:        os.Getgid(),
			Stdin:      os.Stdin,
			Stdout:     os.Stdout,
			Stderr:     os.Stderr,
			// The command's namespaces belong to our user namespace
			// when it is already theirs (re-executed, or --userns), or
			// with --netns-only.
			NoUserNS: ns.InReexecUserNS() || cfg.NetNSOnly,
		})
		if err != nil {
			return 1, err
		}
		netnsPath = child.NetNSPath()
	}
	// The command has its own descriptor limit, as it was given to us:
	// ours goes up once it is spawned.
	log.Debug("descriptor limit", "RLIMIT_NOFILE", raiseFileLimit())
	// From here on a failure must not leave the spawned namespace behind.
	fail := func(err error) (int, error) {
		if child != nil {
			child.Signal(syscall.SIGKILL)
			child.Wait()
		}
		return 1, err
	}

	th, err := ns.Enter(netnsPath)
	if err != nil {
		return fail(err)
	}
	defer th.Close()

	var dev *tap.Device
	var dl *dataLink // the TAP, with vhost-net on it per --vhost (link.go)
	err = th.Do(func() error {
		if err := ns.LoopbackUp(); err != nil {
			return fmt.Errorf("bringing up lo in the namespace: %w", err)
		}
		if cfg.SpliceOnly {
			return nil // no TAP: loopback forwarding only
		}
		var l *dataLink
		if tapFD >= 0 {
			l, err = adoptDataLink(cfg, tapFD, plan.MAC, log)
		} else {
			l, err = openDataLink(cfg, tap.Config{Name: plan.Ifname, MAC: plan.MAC}, log)
		}
		if err != nil {
			return err
		}
		dl, dev = l, l.tap
		d := dev
		// A namespace with IPv6 switched off (or none in its kernel)
		// runs IPv4 only, rather than failing to configure IPv6.
		if plan.IPv6 {
			if why := ns.LinkIPv6Off(d.Name()); why != "" {
				if !plan.IPv4 {
					return fmt.Errorf("--ipv6-only: the namespace has no IPv6 on %s (%s)", d.Name(), why)
				}
				plan.dropIPv6()
				notice("IPv6 is off in the namespace (" + why + "): IPv4 only")
			}
		}
		if !cfg.ConfigNet {
			return nil
		}
		return ns.ConfigureInterface(ns.NetConfig{
			Ifindex: d.Index(),
			MTU:     plan.MTU,
			Addrs:   plan.Addrs,
			Routes:  plan.Routes,
			Up:      true,
		})
	})
	if err != nil {
		return fail(err)
	}
	defer dl.Close() // vhost device, then TAP: after the engine (deferred later)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The engine and the splice loop serve nothing until the sandbox is
	// on: gate closes then.
	gate := make(chan struct{})
	es := planEngine(cfg, plan, readResolvConf("/etc/resolv.conf"))
	// The host's TCP and UDP timeouts, read while there is a file system.
	timeouts := hostTimeouts(procSys)
	logTimeouts(log, timeouts)
	es.opts.Timeouts = &timeouts
	// What the loops refuse at a limit: one count and one episode log
	// for the engine, the splice loop and port forwarding.
	refusals := &limit.Refusals{Log: log}
	defer refusals.Stop()
	es.opts.Refusals = refusals
	// IPv6 multicast from the namespace leaves by the template interface.
	es.opts.MulticastIf6 = tmpl.Ifindex6
	if !cfg.SpliceOnly && !tmpl.Local {
		// The template interfaces' neighbours, mirrored by the engine.
		if nb, err := ns.WatchNeighbours(tmpl.Ifindex4, tmpl.Ifindex6); err != nil {
			log.Warn("not following the host's neighbour table: ARP and NDP answer with our MAC address", "err", err)
		} else {
			defer nb.Close() // after the engine stops (deferred later)
			es.opts.Neighbours = neighbourSource{nb}
		}
	}
	var eng *fwd.Engine
	engineDone := &engineRun{done: make(chan struct{})} // never closes without an engine
	if cfg.SpliceOnly {
		log.Info("--splice-only: no namespace interface; loopback ports are forwarded by splicing")
	} else {
		if child == nil || cfg.Debug {
			// A spawned command's own output is what the user watches:
			// as pasta, the summary is for attach mode, or -d.
			summarize(log, cfg, tmpl, plan, dev.Name())
		}
		var closePcap func()
		eng, engineDone, closePcap, err = startEngine(ctx, cfg, dl, es, log, gate)
		if err != nil {
			return fail(err)
		}
		dl.startStats(ctx, cfg.Stats) // vhost counters next to the engine's (--stats)
		// Stop the engine before the TAP closes (deferred earlier, so later).
		defer func() {
			cancel()
			<-engineDone.done
			closePcap()
		}()
	}

	// Port forwarding (-t, -u, -T, -U): listeners open before the
	// command starts or the pid file says we are ready.
	fc := portfwd.Config{
		Ports: cfg.Ports, NoTCP: cfg.NoTCP, NoUDP: cfg.NoUDP, InNS: th.Do,
		IPv4: plan.IPv4, IPv6: plan.IPv6,
		NSAddr4: es.params.Addr4, NSAddr6: es.params.Addr6,
		NoSplice: cfg.NoSplice, SpliceOnly: cfg.SpliceOnly, HostLoToNSLo: cfg.HostLoToNSLo,
		Freebind: cfg.Freebind, Logger: log, Gate: gate, Refusals: refusals,
		UDPTimeout: timeouts.UDP, UDPStreamTimeout: timeouts.UDPStream,
	}
	if eng != nil {
		fc.Engine = eng
	}
	pf, err := portfwd.Start(ctx, fc)
	if err != nil {
		return fail(err)
	}
	defer pf.Close()
	// -c: the control socket, for pesto to read and replace pf's rules.
	var ctl *ctlsock.Server
	if cfg.ConfPath != "" {
		if ctl, err = ctlsock.Start(ctlsock.Options{Path: cfg.ConfPath, Tables: pf, Logger: log}); err != nil {
			return fail(err)
		}
		defer ctl.Close()
	}

	if cfg.PidFile != "" {
		if err := os.WriteFile(cfg.PidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return fail(fmt.Errorf("writing pid file: %w", err))
		}
	}

	// Attach mode exits when the namespace goes away; the watch opens
	// what it reads before the sandbox takes the file system away.
	var watch *ns.Watch
	if child == nil && !cfg.NoNetNSQuit {
		if watch, err = ns.WatchNetNS(ctx, netnsPath); err != nil {
			return 1, err
		}
	}
	if err := confine(cfg, watch, ctl, logOut, log); err != nil {
		return fail(err)
	}
	close(gate) // the first frame is read from here on
	faults.Start()

	// SIGQUIT too: the command gets it (Ctrl-\, or passed on by the copy
	// outside the user namespace), where Go's default would dump our
	// goroutines, exit 2 and take the command down with us.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	if child != nil {
		if err := child.Release(); err != nil {
			return fail(err)
		}
		return waitChild(child, sigs, engineDone, eng)
	}

	var gone <-chan struct{}
	if watch != nil {
		gone = watch.Gone()
	}
	if bg != nil {
		logOut.Detach()
		bg.ready()
	}
	var runErr error
	select {
	case <-gone:
		log.Info("namespace is gone, exiting")
	case s := <-sigs:
		log.Info("exiting", "signal", s.String())
	case <-engineDone.done:
		runErr = engineDone.err
	}
	// The pid file stays, as pasta's does: whoever started us reads it
	// after we are gone (podman, to tell which process it was).
	if runErr != nil {
		return 1, runErr
	}
	return 0, nil
}

// enterUserNS puts this process in the user namespace it must run in,
// by running gopasta again there (done is then true: the caller returns
// status and err). Joining a network namespace, and creating one, takes
// CAP_SYS_ADMIN in our own user namespace; without it we run again as
// root of a user namespace: a new one that will own the spawned
// namespaces, or the target's own. A command spawned with --userns gets
// its namespaces from that user namespace, which we join first whatever
// our privileges; with --netns-only, from ours, which must let us create
// them.
func enterUserNS(cfg *config.Config, tapFD int) (status int, done bool, err error) {
	spawn := cfg.Mode == config.ModeSpawn
	if ns.InReexecUserNS() {
		if spawn && !ns.HaveSysAdmin() {
			return 1, true, fmt.Errorf("--userns %s: not root in that user namespace, which cannot create the command's namespaces then", cfg.UserNS)
		}
		return 0, false, nil
	}
	switch {
	case spawn && cfg.UserNS != "":
		return 1, true, ns.ExecInUserNS(cfg.UserNS)
	case ns.HaveSysAdmin():
		return 0, false, nil
	case spawn && cfg.NetNSOnly:
		return 1, true, errors.New("--netns-only with a command: creating namespaces without a user namespace needs CAP_SYS_ADMIN (root, or gopasta run inside a user namespace)")
	case spawn:
		status, err := ns.ReexecInUserNS()
		return status, true, err
	case cfg.UserNS != "" && !cfg.NetNSOnly:
		if err := passTapFD(tapFD); err != nil {
			return 1, true, err
		}
		return 1, true, ns.ExecInUserNS(cfg.UserNS)
	}
	return 0, false, nil
}

// confine applies the sandbox (internal/sandbox) once everything is open.
// The watch and the control socket (either may be nil) name the
// directories they still use.
func confine(cfg *config.Config, watch *ns.Watch, ctl *ctlsock.Server, logOut *logging.Output, log *slog.Logger) error {
	o := sandbox.Options{
		RunAsInParent: ns.InReexecUserNS(),
		Debug:         cfg.Debug,
		LogFd:         2,
		Logger:        log,
	}
	if cfg.RunAs != nil {
		o.RunAs = &sandbox.RunAs{UID: cfg.RunAs.UID, GID: cfg.RunAs.GID}
	}
	if watch != nil && watch.Dir() != nil {
		o.Dirs = append(o.Dirs, sandbox.Dir{Fd: int(watch.Dir().Fd()), Stat: true})
	}
	if ctl != nil {
		o.Dirs = append(o.Dirs, sandbox.Dir{Fd: ctl.DirFD(), Path: filepath.Dir(cfg.ConfPath), Stat: true, Remove: true})
	}
	if fd := logOut.FileFd(); fd >= 0 {
		o.LogFd = fd
	}
	_, err := sandbox.Apply(o)
	return err
}

// drainTimeout bounds how long gopasta outlives its command while TCP
// connections of the namespace finish.
const drainTimeout = 2 * time.Second

// waitChild forwards signals to the spawned command until it exits, and
// returns its status (128+signal when it was killed).
func waitChild(child *ns.Child, sigs <-chan os.Signal, run *engineRun, eng *fwd.Engine) (int, error) {
	done := make(chan struct{})
	var status int
	var err error
	go func() {
		status, err = child.Wait()
		close(done)
	}()
	engineDone := run.done
	drainTCP := func(eng *fwd.Engine) {
		// The command is gone, but what it wrote last may still sit in
		// its namespace's socket buffers, which the kernel keeps
		// sending while we hold the namespace. Give those connections
		// a moment to finish rather than cutting their tails off.
		deadline := time.Now().Add(drainTimeout)
		for eng != nil && eng.Stats().FlowsTCP > 0 && time.Now().Before(deadline) {
			select {
			case <-engineDone:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	for {
		select {
		case s := <-sigs:
			child.Signal(s)
		case <-engineDone:
			// The namespace lost its network: say why, and let the
			// command go on without it rather than killing it.
			if run.err != nil {
				slog.Error("forwarding stopped", "err", run.err)
			}
			engineDone = nil
		case <-done:
			drainTCP(eng)
			return status, err
		}
	}
}

// spawnCommand is the command to run: the one given, else $SHELL, else sh.
func spawnCommand(cmd []string) []string {
	if len(cmd) > 0 {
		return cmd
	}
	if sh := os.Getenv("SHELL"); sh != "" {
		return []string{sh}
	}
	return []string{"/bin/sh"}
}

// spawnHostname is -H, else pasta's choice: "pasta-" and the host's name,
// cut to the kernel's 64-byte limit.
func spawnHostname(h string) string {
	if h != "" {
		return h
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	h = "pasta-" + host
	if len(h) > 64 {
		h = h[:64]
	}
	return h
}

// summarize logs the start-up summary that pasta users know: where the
// template came from and what the namespace got.
func summarize(log *slog.Logger, cfg *config.Config, t *ns.Template, p *netPlan, ifname string) {
	if t.Local {
		log.Info("no host interface with routes: local mode")
	} else {
		tmpl := []string{}
		if p.IPv4 && t.Ifname4 != "" && !p.Local4 {
			tmpl = append(tmpl, t.Ifname4+" (IPv4)")
		}
		if p.IPv6 && t.Ifname6 != "" && !p.Local6 {
			tmpl = append(tmpl, t.Ifname6+" (IPv6)")
		}
		if p.Local4 {
			tmpl = append(tmpl, "none for IPv4 (local mode)")
		}
		if p.Local6 {
			tmpl = append(tmpl, "none for IPv6 (local mode)")
		}
		log.Info("template interface: " + strings.Join(tmpl, ", "))
	}
	mtu := "kernel default"
	if p.MTU > 0 {
		mtu = strconv.Itoa(p.MTU)
	}
	state := "configured"
	if !cfg.ConfigNet {
		state = "not configured (use DHCP, DHCPv6 or SLAAC, or --config-net)"
	}
	log.Info("namespace interface: "+ifname, "mtu", mtu, "state", state)
	if p.IPv4 {
		log.Info("    IPv4", "address", p.Addr4.String(), "gateway", p.Gateway4.String())
	}
	if p.IPv6 {
		addr := "none"
		if p.Addr6.IsValid() {
			addr = p.Addr6.String()
		}
		log.Info("    IPv6", "address", addr, "gateway", p.Gateway6.String())
	}
}
