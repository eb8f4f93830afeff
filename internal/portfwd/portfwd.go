// Package portfwd is port forwarding at run time: the -t, -u, -T and -U
// rules turned into listening sockets, kept in step with what listens on
// the other side (auto), and each connection sent down the TAP or spliced.
//
// # Theory of operation
//
// A rule set (Rules) is planned into sockets (plan.go: a pure function of
// the rules and a few facts about each side) and every planned socket is
// opened on its side and handed to the loop that serves it (route.go):
//
//   - Host listeners (-t, -u) go to the engine (fwd), which owns the TAP.
//     A connection or datagram from a non-loopback peer becomes a flow
//     through the TAP, with the peer's address kept. A loopback peer is
//     handed back through the engine's splice hook, which connects a
//     socket inside the namespace (from a pool made there in advance, so
//     the engine's thread never waits for the namespace's) and gives the
//     pair to the splice forwarder.
//   - Namespace listeners (-T, -U) bind the namespace's loopback, are
//     created on the namespace's thread and are served by the splice
//     forwarder's own loop, which accepts, dials host loopback and pumps on
//     one thread.
//   - With --splice-only there is no engine: host listeners bind loopback
//     and are served by the splice forwarder like the namespace's.
//
// Auto rules (auto.go) open and close listeners once a second to follow
// the ports that listen on the other side, never mirroring gopasta's own.
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
	"strings"
	"sync"
	"time"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/sockdiag"
	"github.com/gopasta/gopasta/splice"
)

// Engine is what port forwarding needs of the engine (*fwd.Engine): its
// listeners and the hook for their loopback peers.
type Engine interface {
	AddListener(fwd.Listener) (fwd.ListenerID, error)
	RemoveListener(fwd.ListenerID)
	SetSpliceHook(fwd.SpliceHook)
}

// Rules are the four forwarding options, pasta's defaults applied.
type Rules struct {
	TCP, UDP     config.PortSpec // host to namespace (-t, -u)
	TCPNS, UDPNS config.PortSpec // namespace to host (-T, -U)
}

// RulesFrom applies pasta's defaults to the command line's port options:
// auto where an option is absent, UDP forwarding what TCP does unless -u
// or -U says otherwise, nothing for a protocol turned off.
func RulesFrom(cfg *config.Config) Rules {
	r := Rules{
		TCP: defaultSpec(cfg.TCPPorts), TCPNS: defaultSpec(cfg.TCPNSPorts),
		UDP:   config.MergeUDPFromTCP(cfg.TCPPorts, cfg.UDPPorts),
		UDPNS: config.MergeUDPFromTCP(cfg.TCPNSPorts, cfg.UDPNSPorts),
	}
	none := config.PortSpec{Mode: config.PortsNone}
	if cfg.NoTCP {
		r.TCP, r.TCPNS = none, none
	}
	if cfg.NoUDP {
		r.UDP, r.UDPNS = none, none
	}
	return r
}

// defaultSpec applies pasta's default (auto) to an unset option.
func defaultSpec(s config.PortSpec) config.PortSpec {
	if s.Mode == config.PortsUnset {
		return config.DefaultPortSpec()
	}
	return s
}

func (r *Rules) auto() bool {
	for _, s := range []*config.PortSpec{&r.TCP, &r.UDP, &r.TCPNS, &r.UDPNS} {
		if s.Mode == config.PortsAuto {
			return true
		}
	}
	return false
}

// Config is what a Forwarder needs from the rest of the run.
type Config struct {
	Rules Rules
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
	// Logger; nil discards.
	Logger *slog.Logger
	// Listening, when set, reports the listening TCP and bound UDP ports
	// of one side for auto forwarding instead of the kernel (tests).
	Listening func(nsSide bool) (tcp, udp config.PortSet, err error)
}

// autoInterval is how often auto forwarding rescans; pasta's period.
const autoInterval = time.Second

// Forwarder is the running port forwarding.
type Forwarder struct {
	cfg Config
	log *slog.Logger
	sp  *splice.Forwarder
	// host and ns describe the two sides for planning.
	host, ns side

	slow chan fwd.SpliceConn // loopback peers the engine's thread could not finish
	pool *nsSockPool         // nil: every namespace socket is made on the namespace thread
	// inet_diag sockets of each side for auto scanning; nil: /proc tables.
	diagHost, diagNS *sockdiag.Conn
	stop             chan struct{}
	wg               sync.WaitGroup

	mu     sync.Mutex
	auto   map[autoKey][]closer // auto listeners by (side, proto, port)
	static []closer
	// Ports we listen on, per side and protocol, so auto forwarding does
	// not mirror our own sockets back.
	ownHost, ownNS [2]config.PortSet
	closed         bool
}

type autoKey struct {
	nsSide, udp bool
	port        uint16
}

// closer ends one listener.
type closer func()

// Start opens every static listener (failing on a strict one that cannot be
// bound), starts the splice forwarder, installs the engine's splice hook
// and starts auto scanning. The listeners are open when it returns.
func Start(ctx context.Context, cfg Config) (*Forwarder, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.InNS == nil {
		return nil, errors.New("portfwd: Config.InNS is required")
	}
	pf := &Forwarder{
		cfg: cfg, log: log,
		host: side{v4: cfg.IPv4, v6: cfg.IPv6, loopbackOnly: cfg.SpliceOnly},
		ns:   side{v4: cfg.IPv4, v6: cfg.IPv6, loopbackOnly: true, isNS: true},
		slow: make(chan fwd.SpliceConn, 1024),
		stop: make(chan struct{}),
		auto: map[autoKey][]closer{},
	}
	sp, err := splice.NewForwarder(splice.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("splice forwarder: %w", err)
	}
	pf.sp = sp
	pf.wg.Add(2)
	go func() {
		defer pf.wg.Done()
		if err := sp.Run(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, splice.ErrClosed) {
			log.Error("splice forwarding stopped", "err", err)
		}
	}()
	go func() {
		defer pf.wg.Done()
		pf.slowPath()
	}()
	r := &pf.cfg.Rules
	if !cfg.NoSplice && (r.TCP.Mode != config.PortsNone || cfg.SpliceOnly) {
		pf.pool = newNSSockPool(cfg.InNS, cfg.IPv4, cfg.IPv6)
	}
	if cfg.Engine != nil && !cfg.NoSplice {
		cfg.Engine.SetSpliceHook(pf.spliceHook)
	}

	var weak weakFailures
	for _, s := range []struct {
		ns   bool
		spec *config.PortSpec
		udp  bool
	}{{false, &r.TCP, false}, {false, &r.UDP, true}, {true, &r.TCPNS, false}, {true, &r.UDPNS, true}} {
		for _, p := range planStatic(s.spec, s.udp, pf.side(s.ns)) {
			c, err := pf.open(p)
			if err != nil {
				if bindFailureFatal(p, err) {
					pf.Close()
					return nil, err
				}
				weak.add(p, err)
				continue
			}
			pf.static = append(pf.static, c)
		}
	}
	weak.log(log)

	if r.auto() {
		pf.openDiag()
		pf.scan() // before the command starts, as pasta
		pf.wg.Add(1)
		go pf.autoLoop(ctx)
	}
	return pf, nil
}

func (pf *Forwarder) side(ns bool) side {
	if ns {
		return pf.ns
	}
	return pf.host
}

// weakFailures collects ports of ranges, all and auto that could not be
// bound, so thousands of them make a few log lines, not thousands.
type weakFailures struct {
	byErr map[string][]string
}

func (w *weakFailures) add(p listenPlan, err error) {
	if w.byErr == nil {
		w.byErr = map[string][]string{}
	}
	k := errText(err)
	w.byErr[k] = append(w.byErr[k], p.String())
}

func (w *weakFailures) log(log *slog.Logger) {
	for why, ps := range w.byErr {
		shown := ps
		if len(shown) > 8 {
			shown = shown[:8]
		}
		log.Warn("cannot forward some ports, going on without them",
			"reason", why, "count", len(ps), "ports", strings.Join(shown, ", "))
	}
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
	static, auto := pf.static, pf.auto
	pf.static, pf.auto = nil, nil
	pf.mu.Unlock()
	close(pf.stop)
	for _, c := range static {
		c()
	}
	for _, cs := range auto {
		for _, c := range cs {
			c()
		}
	}
	pf.sp.Close()
	pf.wg.Wait()
	if pf.pool != nil {
		pf.pool.Close()
	}
	for _, c := range []*sockdiag.Conn{pf.diagHost, pf.diagNS} {
		if c != nil {
			c.Close()
		}
	}
}

// SpliceStats are the splice forwarder's counters.
func (pf *Forwarder) SpliceStats() splice.Stats { return pf.sp.Stats() }
