package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/sockdiag"
	"github.com/gopasta/gopasta/ns"
	"github.com/gopasta/gopasta/splice"
)

// Port forwarding at run time (pasta-reference.md, "Ports", "Splice
// path"):
//
//   - -t/-u: host listeners served by the engine. Connections from
//     non-loopback peers go through the TAP; loopback peers are handed back
//     here (the splice hook) and bridged to a socket created inside the
//     namespace, with splice(2) moving the bytes (package splice).
//   - -T/-U: listeners on the namespace's loopback, created on the
//     namespace thread and served by Go's poller; each connection is
//     bridged to host loopback the same way.
//   - auto: every second, the other side's listening sockets are read from
//     /proc and listeners opened or closed to match.
//   - --splice-only: no engine; host listeners bind loopback and are served
//     like the namespace-side ones.

// autoInterval is how often auto forwarding rescans; pasta's period.
const autoInterval = time.Second

// portFwd is the running port forwarding.
type portFwd struct {
	cfg *config.Config
	log *slog.Logger
	eng *fwd.Engine // nil with --splice-only
	th  *ns.Thread
	sp  *splice.Forwarder
	// The namespace's addresses: the default target of spliced host
	// connections (unless --host-lo-to-ns-lo).
	nsAddr4, nsAddr6 netip.Addr
	host, nsSide     sideFacts

	// Host specs (-t, -u after the UDP default) and namespace specs.
	tcp, udp, tcpNS, udpNS config.PortSpec

	q    chan fwd.SpliceConn
	pool *nsSockPool // nil: every namespace socket is made on the namespace thread
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

// fwdSetup is what startForwarding needs from the rest of run.
type fwdSetup struct {
	cfg              *config.Config
	log              *slog.Logger
	eng              *fwd.Engine
	th               *ns.Thread
	nsAddr4, nsAddr6 netip.Addr
	v4, v6           bool
}

// startForwarding opens every static listener (failing on a strict one that
// cannot be bound) and starts the splice forwarder and auto scanning.
func startForwarding(ctx context.Context, s fwdSetup) (*portFwd, error) {
	cfg := s.cfg
	pf := &portFwd{
		cfg: cfg, log: s.log, eng: s.eng, th: s.th,
		nsAddr4: s.nsAddr4, nsAddr6: s.nsAddr6,
		host:   sideFacts{v4: s.v4, v6: s.v6, loopbackOnly: cfg.SpliceOnly},
		nsSide: sideFacts{v4: s.v4, v6: s.v6, loopbackOnly: true},
		q:      make(chan fwd.SpliceConn, 1024),
		stop:   make(chan struct{}),
		auto:   map[autoKey][]closer{},
	}
	pf.tcp, pf.tcpNS = defaultSpec(cfg.TCPPorts), defaultSpec(cfg.TCPNSPorts)
	pf.udp = config.MergeUDPFromTCP(cfg.TCPPorts, cfg.UDPPorts)
	pf.udpNS = config.MergeUDPFromTCP(cfg.TCPNSPorts, cfg.UDPNSPorts)
	if cfg.NoTCP {
		pf.tcp, pf.tcpNS = config.PortSpec{Mode: config.PortsNone}, config.PortSpec{Mode: config.PortsNone}
	}
	if cfg.NoUDP {
		pf.udp, pf.udpNS = config.PortSpec{Mode: config.PortsNone}, config.PortSpec{Mode: config.PortsNone}
	}

	sp, err := splice.NewForwarder(splice.Options{Logger: s.log})
	if err != nil {
		return nil, fmt.Errorf("splice forwarder: %w", err)
	}
	pf.sp = sp
	pf.wg.Add(2)
	go func() {
		defer pf.wg.Done()
		if err := sp.Run(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, splice.ErrClosed) {
			s.log.Error("splice forwarding stopped", "err", err)
		}
	}()
	go func() {
		defer pf.wg.Done()
		pf.spliceWorker()
	}()
	if s.th != nil && !cfg.NoSplice && pf.tcp.Mode != config.PortsNone {
		pf.pool = newNSSockPool(s.th.Do, s.v4, s.v6)
	}
	if pf.eng != nil {
		splice := !cfg.NoSplice
		pf.eng.SetSpliceHook(func(c *fwd.SpliceConn) bool {
			if !splice {
				return false
			}
			if !c.UDP && pf.pool != nil {
				// The common case stays on the engine's thread, as in
				// pasta: a pooled namespace socket, a non-blocking
				// connect, and the pair goes to the splice forwarder.
				dst := pf.nsTarget(c.V6, c.ToAddr, c.ToPort)
				if fd, ok, err := pf.pool.dial(dst); ok {
					if err != nil {
						pf.log.Debug("splice: cannot reach the namespace", "dst", dst, "err", err)
						return false
					}
					pf.bridge(false, c.Fd, fd, nil)
					return true
				}
			}
			select {
			case pf.q <- *c:
				return true
			default:
				return false // overloaded: reset rather than stall the engine
			}
		})
	}

	var weak weakFailures
	for _, side := range []struct {
		ns   bool
		spec *config.PortSpec
		udp  bool
	}{{false, &pf.tcp, false}, {false, &pf.udp, true}, {true, &pf.tcpNS, false}, {true, &pf.udpNS, true}} {
		f := pf.host
		if side.ns {
			f = pf.nsSide
		}
		for _, p := range planStatic(side.spec, side.udp, f) {
			c, err := pf.open(p, side.ns)
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
	weak.log(s.log)

	if pf.tcp.Mode == config.PortsAuto || pf.udp.Mode == config.PortsAuto ||
		pf.tcpNS.Mode == config.PortsAuto || pf.udpNS.Mode == config.PortsAuto {
		pf.openDiag()
		pf.scan() // before the command starts, as pasta
		pf.wg.Add(1)
		go pf.autoLoop(ctx)
	}
	return pf, nil
}

// defaultSpec applies pasta's default (auto) to an unset option.
func defaultSpec(s config.PortSpec) config.PortSpec {
	if s.Mode == config.PortsUnset {
		return config.DefaultPortSpec()
	}
	return s
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
func (pf *portFwd) Close() {
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

// open binds p on its side and starts serving it.
func (pf *portFwd) open(p listenPlan, nsSide bool) (closer, error) {
	var fd int
	var err error
	if nsSide {
		err = pf.th.Do(func() error {
			fd, err = bindPlan(p)
			return err
		})
	} else {
		p.freebind = pf.cfg.Freebind
		fd, err = bindPlan(p)
	}
	if err != nil {
		return nil, &ForwardError{Proto: p.proto(), Addr: p.addr, Port: p.port, Err: err}
	}
	own := &pf.ownHost
	if nsSide {
		own = &pf.ownNS
	}
	pf.mu.Lock()
	own[b2i(p.udp)].Add(p.port)
	pf.mu.Unlock()
	if !nsSide && pf.eng != nil {
		id, err := pf.eng.AddListener(fwd.Listener{
			Fd: fd, UDP: p.udp, V6: p.v6, Local: netip.AddrPortFrom(p.addr, p.port),
			BindIf: p.ifname, ToAddr: p.toAddr, ToPort: p.toPort, Splice: !pf.cfg.NoSplice,
		})
		if err != nil {
			return nil, &ForwardError{Proto: p.proto(), Addr: p.addr, Port: p.port, Err: err}
		}
		return func() { pf.eng.RemoveListener(id) }, nil
	}
	return pf.serveSplice(fd, p, nsSide)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// bindPlan opens p's socket in the calling thread's namespace.
func bindPlan(p listenPlan) (int, error) {
	domain, typ := unix.AF_INET, unix.SOCK_STREAM
	if p.v6 {
		domain = unix.AF_INET6
	}
	if p.udp {
		typ = unix.SOCK_DGRAM
	}
	fd, err := unix.Socket(domain, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	fail := func(err error) (int, error) {
		unix.Close(fd)
		return -1, err
	}
	// TCP: rebinding a port with connections in TIME_WAIT. UDP: the
	// per-flow reply sockets bind the same address and port.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if p.v6 {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	if p.freebind {
		// IPV6_FREEBIND needs Linux 4.15; before it, IP_FREEBIND on an
		// IPv6 socket does the same.
		opt, level := unix.IP_FREEBIND, unix.IPPROTO_IP
		if p.v6 {
			opt, level = unix.IPV6_FREEBIND, unix.IPPROTO_IPV6
		}
		if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
			return fail(fmt.Errorf("--freebind: %w", err))
		}
	}
	if p.ifname != "" {
		if err := unix.BindToDevice(fd, p.ifname); err != nil {
			return fail(fmt.Errorf("binding to interface %s: %w", p.ifname, err))
		}
	}
	var sa unix.Sockaddr
	if p.v6 {
		sa = &unix.SockaddrInet6{Port: int(p.port), Addr: p.addr.As16()}
	} else {
		sa = &unix.SockaddrInet4{Port: int(p.port), Addr: p.addr.As4()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail(err)
	}
	if !p.udp {
		if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
			return fail(err)
		}
	}
	return fd, nil
}

// loopbackOf is the loopback address of a family.
func loopbackOf(v6 bool) netip.Addr {
	if v6 {
		return netip.IPv6Loopback()
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// nsTarget is where a spliced host connection goes inside the namespace:
// the rule's loopback target address if it has one, else the namespace's
// own address over its loopback interface, so services bound to the
// namespace's loopback only stay private, as pasta; --host-lo-to-ns-lo (or
// no address yet) makes it the namespace's loopback. So does
// --splice-only: without a TAP the namespace never gets its address, and
// connecting to it would fail with "network unreachable".
func (pf *portFwd) nsTarget(v6 bool, toAddr netip.Addr, port uint16) netip.AddrPort {
	a := loopbackOf(v6)
	switch {
	case toAddr.IsValid():
		a = toAddr
	case pf.cfg.HostLoToNSLo, pf.cfg.SpliceOnly:
	case v6 && pf.nsAddr6.IsValid():
		a = pf.nsAddr6
	case !v6 && pf.nsAddr4.IsValid():
		a = pf.nsAddr4
	}
	return netip.AddrPortFrom(a, port)
}

// dialNS opens a socket to dst inside the namespace (on its thread).
func (pf *portFwd) dialNS(udp bool, dst netip.AddrPort) (int, error) {
	if !udp && pf.pool != nil {
		if fd, ok, err := pf.pool.dial(dst); ok {
			return fd, err
		}
	}
	var fd int
	err := pf.th.Do(func() (err error) {
		if udp {
			fd, err = splice.DialUDP("udp", netip.AddrPort{}, dst)
		} else {
			fd, err = splice.DialTCP("tcp", dst)
		}
		return err
	})
	return fd, err
}

// dialHost opens a socket to dst on the host (this goroutine's namespace:
// only the namespace thread ever leaves the host's).
func dialHost(udp bool, dst netip.AddrPort) (int, error) {
	if udp {
		return splice.DialUDP("udp", netip.AddrPort{}, dst)
	}
	return splice.DialTCP("tcp", dst)
}

// spliceWorker bridges the loopback connections the engine hands over.
func (pf *portFwd) spliceWorker() {
	for {
		select {
		case <-pf.stop:
			for {
				select {
				case c := <-pf.q:
					unix.Close(c.Fd)
				default:
					return
				}
			}
		case c := <-pf.q:
			dst := pf.nsTarget(c.V6, c.ToAddr, c.ToPort)
			other, err := pf.dialNS(c.UDP, dst)
			if err != nil {
				pf.log.Debug("splice: cannot reach the namespace", "dst", dst, "err", err)
				unix.Close(c.Fd)
				continue
			}
			pf.bridge(c.UDP, c.Fd, other, c.Data)
		}
	}
}

// bridge hands a connected pair to the splice forwarder, sending data (UDP
// datagrams read before the flow existed) on other first.
func (pf *portFwd) bridge(udp bool, fd, other int, data [][]byte) {
	if !udp {
		if err := pf.sp.AddTCP(fd, other); err != nil {
			pf.log.Debug("splice: tcp", "err", err)
		}
		return
	}
	for _, d := range data {
		unix.Write(other, d)
	}
	if err := pf.sp.AddUDP(fd, other); err != nil {
		pf.log.Debug("splice: udp", "err", err)
	}
}

// serveSplice serves a listener whose every connection is spliced: the
// namespace side's (-T/-U, to host loopback) and, with --splice-only, the
// host's (to the namespace). Go's poller waits for connections.
func (pf *portFwd) serveSplice(fd int, p listenPlan, nsSide bool) (closer, error) {
	f := os.NewFile(uintptr(fd), "listener")
	// Where connections go: host loopback for namespace listeners.
	target := func(v6 bool) netip.AddrPort {
		if p.toAddr.IsValid() {
			return netip.AddrPortFrom(p.toAddr, p.toPort)
		}
		if nsSide {
			return netip.AddrPortFrom(loopbackOf(v6), p.toPort)
		}
		return pf.nsTarget(v6, netip.Addr{}, p.toPort)
	}
	dial := func(udp bool, dst netip.AddrPort) (int, error) {
		if nsSide {
			return dialHost(udp, dst)
		}
		return pf.dialNS(udp, dst)
	}
	if !p.udp {
		// The descriptor is non-blocking, so the os.File waits in Go's
		// poller; a net.Listener's raw conn would refuse Read (EINVAL).
		rc, err := f.SyscallConn()
		if err != nil {
			f.Close()
			return nil, err
		}
		pf.wg.Add(1)
		go func() {
			defer pf.wg.Done()
			var backoff time.Duration
			for {
				// accept4 straight on the descriptor, with Go's poller
				// only for the waiting: no *net.TCPConn to build,
				// register, File, Dup and close per connection.
				afd, aerr := -1, error(nil)
				err := rc.Read(func(fd uintptr) bool {
					afd, _, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
					return aerr != unix.EAGAIN
				})
				if err != nil {
					return // the listener was closed
				}
				switch aerr {
				case nil:
				case unix.EINTR, unix.ECONNABORTED, unix.EPROTO:
					continue
				default:
					// Out of descriptors or memory: the connection
					// waits in the backlog. Returning would leave the
					// port bound but dead for good; retrying at once
					// would spin.
					backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
					pf.log.Debug("splice: accept failed, retrying", "port", p.port, "err", aerr, "in", backoff)
					select {
					case <-pf.stop:
						return
					case <-time.After(backoff):
					}
					continue
				}
				backoff = 0
				other, err := dial(false, target(p.v6))
				if err != nil {
					abort(afd)
					continue
				}
				pf.bridge(false, afd, other, nil)
			}
		}()
		return func() { f.Close() }, nil
	}
	pc, err := net.FilePacketConn(f)
	f.Close() // the packet conn holds its own copy
	if err != nil {
		return nil, err
	}
	uc := pc.(*net.UDPConn)
	pf.wg.Add(1)
	go func() {
		defer pf.wg.Done()
		buf := make([]byte, 65536)
		for {
			n, peer, err := uc.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
			// The reply socket lives where the listener does.
			var rfd int
			mk := func() (err error) {
				rfd, err = replySocket(p, peer)
				return err
			}
			if nsSide {
				err = pf.th.Do(mk)
			} else {
				err = mk()
			}
			if err != nil {
				continue
			}
			other, err := dial(true, target(p.v6))
			if err != nil {
				unix.Close(rfd)
				continue
			}
			pf.bridge(true, rfd, other, [][]byte{append([]byte(nil), buf[:n]...)})
		}
	}()
	return func() { uc.Close() }, nil
}

// replySocket is a UDP socket bound where p is and connected to peer, in
// the calling thread's namespace.
func replySocket(p listenPlan, peer netip.AddrPort) (int, error) {
	fd, err := bindPlan(p)
	if err != nil {
		return -1, err
	}
	var sa unix.Sockaddr
	if p.v6 {
		sa = &unix.SockaddrInet6{Port: int(peer.Port()), Addr: peer.Addr().As16()}
	} else {
		sa = &unix.SockaddrInet4{Port: int(peer.Port()), Addr: peer.Addr().As4()}
	}
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// abort closes fd with a reset.
func abort(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
	unix.Close(fd)
}
