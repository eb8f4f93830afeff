// Package portfwd is port forwarding at run time: the -t, -u, -T and -U
// rules turned into listening sockets, kept in step with what listens on
// the other side (auto), and each connection sent down the TAP or spliced.
//
// # Theory of operation
//
// The command line's rules (Rules) become pasta's two forwarding tables at
// start (tables.go): HOST (-t, -u) and SPLICE (-T, -U), 56-byte rules
// with dual-stack, best-effort and auto flags. From then on the tables are
// the one description of what is forwarded: the control socket reads them
// and replaces them (Tables, Replace). The tables are planned into sockets
// (plan.go: a pure function of the rules and a few facts about each side)
// and the set of open sockets is kept in step with the plan (sync.go:
// opened before the ones no longer wanted close, kept when a socket with
// the same address, port and interface is planned again, a port that
// cannot be bound retried every second). Every socket is handed to the
// loop that serves it (route.go):
//
//   - Host listeners (-t, -u) go to the engine (fwd), which owns the TAP.
//     A connection or datagram from a non-loopback peer becomes a flow
//     through the TAP, with the peer's address kept. A loopback peer is
//     handed back through the engine's splice hook, which connects a
//     socket inside the namespace (from a pool made there in advance, so
//     the engine's loop never waits for the namespace's thread) and
//     gives the pair to the splice forwarder.
//   - Namespace listeners (-T, -U) bind the namespace's loopback, are
//     created on the namespace's thread and are served by the splice
//     forwarder's own loop, which accepts, dials host loopback and pumps on
//     one goroutine.
//   - With --splice-only there is no engine: host listeners bind loopback
//     and are served by the splice forwarder like the namespace's.
//
// Auto rules (auto.go) open and close listeners once a second to follow
// the ports that listen on the other side, never mirroring gopasta's own.
// Nothing here runs on a loop that carries traffic: listeners are added
// to and removed from the engine and the splice forwarder through their
// thread-safe listener APIs, and connections, once established, belong
// to those loops, whatever happens to the rule that let them in.
//
// Two seams keep this testable without a namespace: Engine is the
// engine's listener API, and Config.InNS runs a function on a thread inside
// the namespace (the caller's namespace thread; a test passes a plain call).
package portfwd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/internal/sockdiag"
	"github.com/gopasta/gopasta/splice"
)

// Engine is what port forwarding needs of the engine (*fwd.Engine): its
// listeners and the hook for their loopback peers.
type Engine interface {
	AddListener(fwd.Listener) (fwd.ListenerID, error)
	RemoveListener(fwd.ListenerID)
	SetSpliceHook(fwd.SpliceHook)
	// LoopFd is the engine loop's epoll descriptor, which the splice loop
	// watches while it holds the processor (package epoll).
	LoopFd() int
}

// Config is what a Forwarder needs from the rest of the run.
type Config struct {
	// Ports are the command line's -t, -u, -T and -U; Start builds the
	// tables from them.
	Ports fwdrule.Options
	// NoTCP, NoUDP (--no-tcp, --no-udp): the tables cannot hold rules
	// of the protocol, not even through the control socket.
	NoTCP, NoUDP bool
	// Engine serves host listeners; nil with --splice-only.
	Engine Engine
	// InNS runs f on a thread inside the namespace and returns its
	// error: namespace listeners and sockets are created there.
	InNS func(f func() error) error
	// IPv4, IPv6: the families in use (-4, -6, and what the host has).
	IPv4, IPv6 bool
	// NSAddr4, NSAddr6: the namespace's own addresses, where forwarded
	// connections go unless a rule names a target.
	NSAddr4, NSAddr6 netip.Addr
	// NoSplice (--no-splice): loopback peers of host listeners take the
	// TAP too. SpliceOnly (--splice-only): no engine and no TAP.
	// HostLoToNSLo (--host-lo-to-ns-lo): spliced host connections reach
	// the namespace's loopback rather than its address.
	NoSplice, SpliceOnly, HostLoToNSLo bool
	// Freebind (--freebind) on host listeners.
	Freebind bool
	// UDPTimeout and UDPStreamTimeout time spliced UDP flows
	// (splice.Options); zero means splice's defaults.
	UDPTimeout, UDPStreamTimeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Refusals counts the connections and flows refused at a limit; the
	// splice forwarder and the engine share it (nil counts nothing).
	Refusals *limit.Refusals
	// Listening, when set, reports the listening TCP and bound UDP ports
	// of one side for auto forwarding instead of the kernel (tests).
	Listening func(nsSide bool) (tcp, udp fwdrule.PortSet, err error)
	// Gate, when set, holds back serving (the splice loop, auto scans,
	// bind retries) until it closes: the sandbox goes on in between
	// (internal/sandbox). Listeners are open when Start returns either way.
	Gate <-chan struct{}
}

// autoInterval is how often auto forwarding rescans and ports that could
// not be bound are retried; pasta's period.
const autoInterval = time.Second

// ErrClosed is returned by Replace after Close.
var ErrClosed = errors.New("portfwd: closed")

// Forwarder is the running port forwarding.
type Forwarder struct {
	cfg  Config
	log  *slog.Logger
	sp   *splice.Forwarder
	caps fwdrule.Caps
	// host and ns describe the two sides for planning.
	host, ns side

	slow chan fwd.SpliceConn // loopback peers the engine's thread could not finish
	// pool: namespace sockets for spliced connections, made once a host
	// TCP listener needs them; nil: every one is made on the namespace
	// thread.
	pool atomic.Pointer[nsSockPool]
	// inet_diag sockets of each side for auto scanning, opened at the
	// first scan; nil: /proc tables.
	diagHost, diagNS *sockdiag.Conn
	diagOpened       bool
	// The /proc net tables of each side, opened at Start: the fallback
	// where inet_diag is missing (procnet.go).
	procHost, procNS *procNet
	stop             chan struct{}
	wg               sync.WaitGroup

	// opMu serialises changes to the socket set (apply, tick): they
	// open sockets and may take a while; mu is held only briefly.
	opMu sync.Mutex
	set  sockSet // guarded by opMu

	mu     sync.Mutex
	tables [2]fwdrule.Table // in force, HOST and SPLICE
	// Ports we listen on, per side and protocol, so auto forwarding does
	// not mirror our own sockets back.
	ownHost, ownNS [2]fwdrule.PortSet
	closed         bool
}

// closer ends one listener.
type closer func()

// Start builds the tables from the port options, opens every listener they ask
// for (failing on a strict one that cannot be bound), starts the splice
// forwarder, installs the engine's splice hook and starts the once-a-second
// loop of auto scanning and bind retries. The listeners are open when it
// returns.
func Start(ctx context.Context, cfg Config) (*Forwarder, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.InNS == nil {
		return nil, errors.New("portfwd: Config.InNS is required")
	}
	caps := capsFor(cfg.IPv4, cfg.IPv6, cfg.NoTCP, cfg.NoUDP, ifnameWorks())
	var tables [2]fwdrule.Table
	var err error
	if tables[tHost], tables[tNS], err = cfg.Ports.Tables(caps, fwdrule.Ephemeral()); err != nil {
		return nil, &ConfigError{Err: err}
	}
	if caps&fwdrule.CapIfname == 0 && len(tables[tNS].Rules) > 0 {
		log.Warn("binding to interface lo does not work here (it needs Linux 5.7): -T and -U forward 127.0.0.1 and ::1 only, not the rest of 127.0.0.0/8")
	}
	pf := &Forwarder{
		cfg: cfg, log: log, caps: caps,
		host: side{v4: cfg.IPv4, v6: cfg.IPv6, loopbackOnly: cfg.SpliceOnly,
			loopbackSplice: cfg.Engine != nil && !cfg.NoSplice},
		ns:   side{v4: cfg.IPv4, v6: cfg.IPv6, loopbackOnly: true, isNS: true},
		slow: make(chan fwd.SpliceConn, 1024),
		stop: make(chan struct{}),
		set:  newSockSet(),
	}
	for i := range pf.tables {
		pf.tables[i] = fwdrule.Table{Pif: tablePifs[i], Caps: caps}
	}
	sp, err := splice.NewForwarder(splice.Options{Logger: log, Refusals: cfg.Refusals,
		UDPTimeout: cfg.UDPTimeout, UDPStreamTimeout: cfg.UDPStreamTimeout})
	if err != nil {
		return nil, fmt.Errorf("splice forwarder: %w", err)
	}
	pf.sp = sp
	if cfg.Engine != nil {
		if err := sp.WatchPeer(cfg.Engine.LoopFd()); err != nil {
			sp.Close()
			return nil, fmt.Errorf("splice forwarder: %w", err)
		}
	}
	if cfg.Listening == nil {
		// /proc/self/net is the thread group leader's namespace; the
		// namespace thread's own tables are under thread-self.
		pf.procHost = openProcNet("/proc/self/net")
		_ = cfg.InNS(func() error {
			pf.procNS = openProcNet("/proc/thread-self/net")
			return nil
		})
	}
	pf.wg.Add(2)
	go func() {
		defer pf.wg.Done()
		if !pf.gate(ctx) {
			return
		}
		if err := sp.Run(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, splice.ErrClosed) {
			log.Error("splice forwarding stopped", "err", err)
		}
	}()
	go func() {
		defer pf.wg.Done()
		pf.slowPath()
	}()
	if cfg.Engine != nil && !cfg.NoSplice {
		cfg.Engine.SetSpliceHook(pf.spliceHook)
	}
	// Auto listeners are planned before the command starts, as pasta.
	if err := pf.apply(tables, true); err != nil {
		pf.Close()
		return nil, err
	}
	pf.wg.Add(1)
	go func() {
		if pf.gate(ctx) {
			pf.loop(ctx)
		} else {
			pf.wg.Done()
		}
	}()
	return pf, nil
}

// gate waits for Config.Gate; false means Close or ctx came first.
func (pf *Forwarder) gate(ctx context.Context) bool {
	if pf.cfg.Gate == nil {
		return true
	}
	select {
	case <-pf.cfg.Gate:
		return true
	case <-pf.stop:
	case <-ctx.Done():
	}
	return false
}

func (pf *Forwarder) side(ns bool) side {
	if ns {
		return pf.ns
	}
	return pf.host
}

// Close ends every listener and the splice forwarder (with its
// connections), and waits for the goroutines.
func (pf *Forwarder) Close() {
	pf.mu.Lock()
	if pf.closed {
		pf.mu.Unlock()
		return
	}
	pf.closed = true
	pf.mu.Unlock()
	close(pf.stop)
	pf.opMu.Lock() // wait for an update or a scan in progress
	socks := pf.set.socks
	pf.set.socks = map[sockKey]*lsock{}
	pf.opMu.Unlock()
	for _, s := range socks {
		s.close()
	}
	pf.sp.Close()
	pf.wg.Wait()
	if p := pf.pool.Load(); p != nil {
		p.Close()
	}
	for _, c := range []*sockdiag.Conn{pf.diagHost, pf.diagNS} {
		if c != nil {
			c.Close()
		}
	}
	pf.procHost.close()
	pf.procNS.close()
}

// SpliceStats are the splice forwarder's counters.
func (pf *Forwarder) SpliceStats() splice.Stats { return pf.sp.Stats() }
