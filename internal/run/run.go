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
// It goes through the phases below in order, each a method of one run;
// what a phase opens is closed at the end, in the reverse order.
func Run(cfg *config.Config) (int, error) {
	tapFD, err := keepOwnDescriptors(cfg)
	if err != nil {
		return 1, err
	}
	if cfg.Mode == config.ModeOCIHook {
		return runHook(os.Stdin) // hook.go: becomes an attach run
	}
	r, status, done, err := start(cfg, tapFD)
	if done {
		return status, err
	}
	defer r.close()
	if err := r.plan(); err != nil {
		return 1, err
	}
	if err := r.link(); err != nil {
		return r.fail(err)
	}
	if err := r.forward(); err != nil {
		return r.fail(err)
	}
	if err := r.confine(); err != nil {
		return r.fail(err)
	}
	return r.wait()
}

// run is one run's state, filled in phase by phase.
type run struct {
	cfg    *config.Config
	tapFD  int         // --fd's TAP, or -1
	bg     *background // attach mode in the background: told when ready
	log    *slog.Logger
	logOut *logging.Output
	notice func(msg string, args ...any) // set-up lines: info in attach mode, debug in spawn mode

	// plan
	tmpl *ns.Template
	net  *netPlan

	// link
	child     *ns.Child // spawn mode: the command, not yet released
	netnsPath string
	th        *ns.Thread // a thread in the namespace
	dl        *dataLink  // the TAP, with vhost-net per --vhost; nil with --splice-only

	// forward
	ctx        context.Context
	gate       chan struct{} // closes once the sandbox is on: the loops serve from then
	eng        *fwd.Engine   // nil with --splice-only
	engineDone *engineRun
	ctl        *ctlsock.Server

	// confine
	watch *ns.Watch // attach mode: the namespace's going away

	closers []func() // run in reverse by close
}

// onClose adds fn to what close runs, before everything added earlier.
func (r *run) onClose(fn func()) { r.closers = append(r.closers, fn) }

func (r *run) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// fail ends a run that failed once the command may have been spawned: it
// must not leave the spawned namespace behind.
func (r *run) fail(err error) (int, error) {
	if r.child != nil {
		r.child.Signal(syscall.SIGKILL)
		r.child.Wait()
	}
	return 1, err
}

// keepOwnDescriptors closes the descriptors whoever started us leaked,
// which are not ours to hold (docs/security.md), and returns --fd's TAP
// (or -1), which is ours, as is the background copy's readiness pipe.
func keepOwnDescriptors(cfg *config.Config) (tapFD int, err error) {
	tapFD, err = takeTapFD(cfg)
	keep := daemonFD()
	if tapFD >= 0 {
		keep = append(keep, tapFD)
	}
	sandbox.CloseInherited(keep...)
	return tapFD, err
}

// start is the first phase: the user namespace to run in, the
// background, and logging. done says that the run ends here with status
// and err (a relay, a copy of us in another user namespace, or a
// failure).
func start(cfg *config.Config, tapFD int) (_ *run, status int, done bool, err error) {
	// A binary that could not be confined fails before doing anything.
	if err := sandbox.Check(); err != nil {
		return nil, 1, true, err
	}
	if status, done, err := enterUserNS(cfg, tapFD); done {
		return nil, status, true, err
	}

	// A --runas that cannot be applied later fails now, in one line.
	if cfg.RunAs != nil {
		if err := sandbox.CheckRunAs(&sandbox.RunAs{UID: cfg.RunAs.UID, GID: cfg.RunAs.GID}, ns.InReexecUserNS()); err != nil {
			return nil, 1, true, err
		}
	}

	// Attach mode goes to the background once ready, unless -f. The
	// foreground copy only relays the outcome of the set-up.
	r := &run{cfg: cfg, tapFD: tapFD}
	if cfg.Mode == config.ModeAttach && !cfg.Foreground {
		var relay bool
		r.bg, relay, status, err = daemonize(tapFD)
		if relay || err != nil {
			return nil, status, true, err
		}
	}

	lo := logging.Options{
		Quiet: cfg.Quiet, Debug: cfg.Debug, Trace: cfg.Trace,
		File: cfg.LogFile, MaxSize: cfg.LogSize,
	}
	if r.bg != nil {
		// Once in the background, stderr is gone: without -l, messages
		// go to the system logger, connected now, before the sandbox
		// takes the file system and Unix sockets away.
		lo.Syslog = logging.SyslogPath
	}
	if r.log, r.logOut, err = logging.New(lo); err != nil {
		return nil, 1, true, err
	}
	r.onClose(func() { r.logOut.Close() })
	slog.SetDefault(r.log)
	if faults.Enabled {
		// A test build (package faults): say what was injected, for the
		// test to check that every error path ran.
		r.onClose(func() { r.log.Warn("faults injected", "counts", faults.Report()) })
	}
	// What the user watches in spawn mode is the command's output: lines
	// that only describe the set-up are for attach mode, or -d.
	r.notice = r.log.Info
	if cfg.Mode == config.ModeSpawn {
		r.notice = r.log.Debug
	}
	return r, 0, false, nil
}

// plan reads the host's template interface and plans the namespace's
// addresses, routes and MTU (plan.go).
func (r *run) plan() error {
	cfg := r.cfg
	// A host without IPv6 (none in the kernel, or switched off by
	// sysctl) gives the namespace none either: IPv4 only, as with -4.
	hostNoIPv6 := false
	if !cfg.IPv4Only {
		if why := ns.HostIPv6Off(); why != "" {
			if cfg.IPv6Only {
				return fmt.Errorf("--ipv6-only: the host has no IPv6 (%s)", why)
			}
			hostNoIPv6 = true
			r.notice("IPv6 is off on the host (" + why + "): IPv4 only")
		}
	}
	var err error
	r.tmpl, err = ns.DiscoverTemplate(ns.TemplateOptions{
		Interface:   cfg.Interface,
		OutboundIf4: cfg.OutboundIf4,
		OutboundIf6: cfg.OutboundIf6,
		NoIPv4:      cfg.IPv6Only,
		NoIPv6:      cfg.IPv4Only || hostNoIPv6,
	})
	if err != nil {
		return fmt.Errorf("host template interface: %w", err)
	}
	if r.net, err = planNetwork(cfg, r.tmpl); err != nil {
		return err
	}
	if hostNoIPv6 {
		r.net.dropIPv6()
	}
	return nil
}

// nsCongestionControl is the TCP congestion control the namespace's routes
// through the TAP name (--config-net). A connection over them ends at
// gopasta's sockets a few microseconds away; the host socket's congestion
// control is the one that meets the network. A pacing algorithm there
// (bbr, the default of many hosts, which a new namespace inherits) paces
// against bandwidth samples that gopasta's batched acknowledgements make
// noisy and holds the link well below what it carries; reno sends what
// the window allows, and the window is the host socket's free space.
const nsCongestionControl = "reno"

// link spawns the command's namespaces (spawn mode) or finds the one to
// join, enters it, and there brings lo up, opens the data link (link.go)
// and configures the interface (--config-net).
func (r *run) link() error {
	cfg, plan, log := r.cfg, r.net, r.log
	r.netnsPath = cfg.NetNS
	if cfg.Mode == config.ModeSpawn {
		child, err := ns.Spawn(ns.SpawnConfig{
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
			return err
		}
		r.child = child
		r.netnsPath = child.NetNSPath()
	}
	// The command has its own descriptor limit, as it was given to us:
	// ours goes up once it is spawned.
	log.Debug("descriptor limit", "RLIMIT_NOFILE", raiseFileLimit())

	th, err := ns.Enter(r.netnsPath)
	if err != nil {
		return err
	}
	r.th = th
	r.onClose(func() { th.Close() })

	err = th.Do(func() error {
		if err := ns.LoopbackUp(); err != nil {
			return fmt.Errorf("bringing up lo in the namespace: %w", err)
		}
		if cfg.SpliceOnly {
			return nil // no TAP: loopback forwarding only
		}
		var l *dataLink
		var err error
		if r.tapFD >= 0 {
			l, err = adoptDataLink(cfg, r.tapFD, plan.MAC, log)
		} else {
			l, err = openDataLink(cfg, tap.Config{Name: plan.Ifname, MAC: plan.MAC}, log)
		}
		if err != nil {
			return err
		}
		r.dl = l
		// The vhost device, then the TAP: after the engine (which stops
		// in a closer added later, so run earlier).
		r.onClose(func() { l.Close() })
		d := l.tap
		// A namespace with IPv6 switched off (or none in its kernel)
		// runs IPv4 only, rather than failing to configure IPv6.
		if plan.IPv6 {
			if why := ns.LinkIPv6Off(d.Name()); why != "" {
				if !plan.IPv4 {
					return fmt.Errorf("--ipv6-only: the namespace has no IPv6 on %s (%s)", d.Name(), why)
				}
				plan.dropIPv6()
				r.notice("IPv6 is off in the namespace (" + why + "): IPv4 only")
			}
		}
		if !cfg.ConfigNet {
			return nil
		}
		return ns.ConfigureInterface(ns.NetConfig{
			Ifindex:           d.Index(),
			MTU:               plan.MTU,
			Addrs:             plan.Addrs,
			Routes:            plan.Routes,
			Up:                true,
			CongestionControl: nsCongestionControl,
		})
	})
	return err
}

// forward starts what carries traffic: the engine on the data link
// (engine.go), port forwarding (internal/portfwd) and the control socket
// (-c); then writes the pid file. The loops serve nothing until the
// sandbox is on (gate).
func (r *run) forward() error {
	cfg, plan, log, tmpl := r.cfg, r.net, r.log, r.tmpl
	ctx, cancel := context.WithCancel(context.Background())
	r.ctx = ctx
	r.onClose(cancel)
	r.gate = make(chan struct{})
	es := planEngine(cfg, plan, readResolvConf("/etc/resolv.conf"))
	// The host's TCP and UDP timeouts, read while there is a file system.
	timeouts := hostTimeouts(procSys)
	logTimeouts(log, timeouts)
	es.opts.Timeouts = &timeouts
	// What the loops refuse at a limit: one count and one episode log
	// for the engine, the splice loop and port forwarding.
	refusals := &limit.Refusals{Log: log}
	r.onClose(refusals.Stop)
	es.opts.Refusals = refusals
	// IPv6 multicast from the namespace leaves by the template interface.
	es.opts.MulticastIf6 = tmpl.Ifindex6
	if !cfg.SpliceOnly && !tmpl.Local {
		// The template interfaces' neighbours, mirrored by the engine.
		if nb, err := ns.WatchNeighbours(tmpl.Ifindex4, tmpl.Ifindex6); err != nil {
			log.Warn("not following the host's neighbour table: ARP and NDP answer with our MAC address", "err", err)
		} else {
			r.onClose(func() { nb.Close() }) // after the engine stops (added later)
			es.opts.Neighbours = neighbourSource{nb}
		}
	}
	r.engineDone = &engineRun{done: make(chan struct{})} // never closes without an engine
	if cfg.SpliceOnly {
		log.Info("--splice-only: no namespace interface; loopback ports are forwarded by splicing")
	} else {
		if r.child == nil || cfg.Debug {
			// A spawned command's own output is what the user watches:
			// as pasta, the summary is for attach mode, or -d.
			summarize(log, cfg, tmpl, plan, r.dl.tap.Name())
		}
		var closePcap func()
		var err error
		r.eng, r.engineDone, closePcap, err = startEngine(ctx, cfg, r.dl, es, log, r.gate)
		if err != nil {
			return err
		}
		r.dl.startStats(ctx, cfg.Stats) // vhost counters next to the engine's (--stats)
		// The engine stops before the TAP closes (added earlier).
		done := r.engineDone.done
		r.onClose(func() {
			cancel()
			<-done
			closePcap()
		})
	}

	// Port forwarding (-t, -u, -T, -U): listeners open before the
	// command starts or the pid file says we are ready.
	fc := portfwd.Config{
		Ports: cfg.Ports, NoTCP: cfg.NoTCP, NoUDP: cfg.NoUDP, InNS: r.th.Do,
		IPv4: plan.IPv4, IPv6: plan.IPv6,
		NSAddr4: es.params.Addr4, NSAddr6: es.params.Addr6,
		NoSplice: cfg.NoSplice, SpliceOnly: cfg.SpliceOnly, HostLoToNSLo: cfg.HostLoToNSLo,
		Freebind: cfg.Freebind, Logger: log, Gate: r.gate, Refusals: refusals,
		UDPTimeout: timeouts.UDP, UDPStreamTimeout: timeouts.UDPStream,
	}
	if r.eng != nil {
		fc.Engine = r.eng
	}
	pf, err := portfwd.Start(ctx, fc)
	if err != nil {
		return err
	}
	r.onClose(func() { pf.Close() })
	// -c: the control socket, for pesto to read and replace pf's rules.
	if cfg.ConfPath != "" {
		if r.ctl, err = ctlsock.Start(ctlsock.Options{Path: cfg.ConfPath, Tables: pf, Logger: log}); err != nil {
			return err
		}
		r.onClose(func() { r.ctl.Close() })
	}

	if cfg.PidFile != "" {
		if err := os.WriteFile(cfg.PidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return fmt.Errorf("writing pid file: %w", err)
		}
	}
	return nil
}

// confine applies the sandbox (internal/sandbox) once everything is open,
// and opens the gate: the loops serve from here on. In attach mode the
// watch of the namespace opens what it reads first.
func (r *run) confine() error {
	cfg := r.cfg
	if r.child == nil && !cfg.NoNetNSQuit {
		var err error
		if r.watch, err = ns.WatchNetNS(r.ctx, r.netnsPath); err != nil {
			return err
		}
	}
	o := sandbox.Options{
		RunAsInParent: ns.InReexecUserNS(),
		Debug:         cfg.Debug,
		LogFd:         2,
		Logger:        r.log,
	}
	if cfg.RunAs != nil {
		o.RunAs = &sandbox.RunAs{UID: cfg.RunAs.UID, GID: cfg.RunAs.GID}
	}
	// The watch and the control socket name the directories they still
	// use.
	if r.watch != nil && r.watch.Dir() != nil {
		o.Dirs = append(o.Dirs, sandbox.Dir{Fd: int(r.watch.Dir().Fd()), Stat: true})
	}
	if r.ctl != nil {
		o.Dirs = append(o.Dirs, sandbox.Dir{Fd: r.ctl.DirFD(), Path: filepath.Dir(cfg.ConfPath), Stat: true, Remove: true})
	}
	if fd := r.logOut.FileFd(); fd >= 0 {
		o.LogFd = fd
	}
	if _, err := sandbox.Apply(o); err != nil {
		return err
	}
	close(r.gate) // the first frame is read from here on
	faults.Start()
	return nil
}

// wait is the last phase: it releases the command and waits for it
// (spawn mode), or tells the foreground copy we are ready and waits for
// the namespace to go, a signal, or the engine to stop (attach mode).
// The pid file stays, as pasta's does: whoever started us reads it after
// we are gone (podman, to tell which process it was).
func (r *run) wait() (int, error) {
	// SIGQUIT too: the command gets it (Ctrl-\, or passed on by the copy
	// outside the user namespace), where Go's default would dump our
	// goroutines, exit 2 and take the command down with us.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	if r.child != nil {
		if err := r.child.Release(); err != nil {
			return r.fail(err)
		}
		return waitChild(r.child, sigs, r.engineDone, r.eng)
	}

	var gone <-chan struct{}
	if r.watch != nil {
		gone = r.watch.Gone()
	}
	if r.bg != nil {
		r.logOut.Detach()
		r.bg.ready()
	}
	select {
	case <-gone:
		r.log.Info("namespace is gone, exiting")
	case s := <-sigs:
		r.log.Info("exiting", "signal", s.String())
	case <-r.engineDone.done:
		if err := r.engineDone.err; err != nil {
			return 1, err
		}
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
