package portfwd

// Where each forwarded socket is served and where its connections go: the
// one place that decides between the TAP and splicing, and the one place
// that knows a forwarded connection's target in the namespace.

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/internal/sock"
	"github.com/gopasta/gopasta/splice"
)

// tapTarget is where a connection through the TAP goes in the namespace:
// the rule's target address, else the namespace's own address.
func (pf *Forwarder) tapTarget(v6 bool, toAddr netip.Addr) netip.Addr {
	switch {
	case toAddr.IsValid():
		return toAddr
	case v6:
		return pf.cfg.NSAddr6
	default:
		return pf.cfg.NSAddr4
	}
}

// spliceTarget is where a spliced host connection goes inside the
// namespace: the rule's target address if it has one, else the namespace's
// own address over its loopback interface, so that services bound to the
// namespace's loopback only stay private, as in pasta. --host-lo-to-ns-lo
// (or no address yet) makes it the namespace's loopback, the same address
// the host peer connected to (local: 127.0.0.6 stays 127.0.0.6, as in
// pasta); so does --splice-only: without a TAP the namespace never gets
// its address, and connecting to it would fail with "network
// unreachable".
func (pf *Forwarder) spliceTarget(v6 bool, toAddr netip.Addr, port uint16, local netip.Addr) netip.AddrPort {
	a := sameLoopback(local, v6)
	switch {
	case toAddr.IsValid():
		a = toAddr
	case pf.cfg.HostLoToNSLo, pf.cfg.SpliceOnly:
	case v6 && pf.cfg.NSAddr6.IsValid():
		a = pf.cfg.NSAddr6
	case !v6 && pf.cfg.NSAddr4.IsValid():
		a = pf.cfg.NSAddr4
	}
	return netip.AddrPortFrom(a, port)
}

// sameLoopback is local if it is a loopback address of the family (v6),
// else that family's usual loopback address: a spliced connection or flow
// reaches the same address of 127.0.0.0/8 on the other side as it reached
// on this one.
func sameLoopback(local netip.Addr, v6 bool) netip.Addr {
	if local = local.Unmap(); local.IsLoopback() && local.Is6() == v6 {
		return local
	}
	return sock.Loopback(v6)
}

// register hands fd, bound as p says, to the loop that serves it: the
// engine for host listeners (TAP, with the splice hook for loopback
// peers), the splice forwarder for the namespace's listeners and for every
// listener with --splice-only. The returned closer unregisters and closes
// it; on error fd is closed.
func (pf *Forwarder) register(p listenPlan, fd int) (closer, error) {
	if !p.nsSide && !p.UDP && !pf.cfg.NoSplice {
		pf.ensurePool()
	}
	if !p.nsSide && pf.cfg.Engine != nil && !p.companion {
		id, err := pf.cfg.Engine.AddListener(fwd.Listener{
			Fd: fd, UDP: p.UDP, V6: p.V6, Local: netip.AddrPortFrom(p.Addr, p.Port),
			BindIf: p.Ifname, ToAddr: pf.tapTarget(p.V6, p.toAddr), ToPort: p.toPort,
			Splice: !pf.cfg.NoSplice, SpliceTo: p.toAddr,
		})
		if err != nil {
			return nil, err
		}
		return func() { pf.cfg.Engine.RemoveListener(id) }, nil
	}

	// Spliced: a namespace listener reaches host loopback, at the address
	// the connection reached (or the rule's target); a --splice-only host
	// listener, or a host socket's loopback companion, reaches the
	// namespace.
	dst := func(local netip.AddrPort) netip.AddrPort {
		switch {
		case p.toAddr.IsValid():
			return netip.AddrPortFrom(p.toAddr, p.toPort)
		case p.nsSide:
			return netip.AddrPortFrom(sameLoopback(local.Addr(), p.V6), p.toPort)
		}
		return pf.spliceTarget(p.V6, netip.Addr{}, p.toPort, local.Addr())
	}
	bound := netip.AddrPortFrom(p.Addr, p.Port)
	var id splice.ListenerID
	var err error
	if p.UDP {
		dial := func(local, peer netip.AddrPort) (int, error) { return pf.dialUDP(!p.nsSide, dst(local), peer) }
		l := splice.UDPListener{Fd: fd, V6: p.V6, Local: bound, Ifname: p.Ifname, Dial: dial}
		if p.nsSide {
			// A peer's own socket lives where the listener does.
			l.Reply = func(local, peer netip.AddrPort) (rfd int, err error) {
				err = pf.cfg.InNS(func() error {
					rfd, err = sock.Reply(local, p.Ifname, peer)
					return err
				})
				return rfd, err
			}
		}
		id, err = pf.sp.AddUDPListener(l)
	} else {
		dial := func(local netip.AddrPort) (int, error) { return pf.dial(!p.nsSide, false, dst(local)) }
		id, err = pf.sp.AddTCPListener(splice.TCPListener{Fd: fd, Local: bound, Dial: dial})
	}
	if err != nil {
		return nil, err
	}
	return func() { pf.sp.RemoveListener(id) }, nil
}

// ensurePool makes the pool of namespace sockets for spliced host
// connections, once a host TCP listener may need it.
func (pf *Forwarder) ensurePool() {
	if pf.pool.Load() == nil {
		pf.pool.Store(newNSSockPool(pf.cfg.InNS, pf.cfg.Refusals.Active, pf.cfg.IPv4, pf.cfg.IPv6))
	}
}

func (pf *Forwarder) own(nsSide bool) *[2]fwdrule.PortSet {
	if nsSide {
		return &pf.ownNS
	}
	return &pf.ownHost
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// dial opens a socket to dst on one side: inside the namespace (a pooled
// socket, else one made on the namespace's thread) or on the host (this
// goroutine's namespace: only the namespace's thread ever leaves the
// host's).
func (pf *Forwarder) dial(intoNS, udp bool, dst netip.AddrPort) (int, error) {
	if !intoNS {
		return sock.Dial(udp, dst)
	}
	if pool := pf.pool.Load(); !udp && pool != nil {
		if fd, ok, err := pool.dial(dst); ok {
			return fd, err
		}
	}
	var fd int
	err := pf.cfg.InNS(func() (err error) {
		fd, err = sock.Dial(udp, dst)
		return err
	})
	return fd, err
}

// dialUDP is dial for a spliced UDP flow, keeping the peer's source port
// (sock.DialUDPFrom) where the other side lets it have it, and toward the
// host its loopback address too, as pasta keeps them (into the namespace
// the kernel picks the source address, which goes with the target).
func (pf *Forwarder) dialUDP(intoNS bool, dst, peer netip.AddrPort) (int, error) {
	if !intoNS {
		return sock.DialUDPFrom(dst, peer)
	}
	from := netip.AddrPortFrom(netip.Addr{}, peer.Port())
	var fd int
	err := pf.cfg.InNS(func() (err error) {
		fd, err = sock.DialUDPFrom(dst, from)
		return err
	})
	return fd, err
}

// spliceHook takes the engine's loopback peers. It runs on the engine's
// thread and must not wait: a TCP connection that a pooled namespace
// socket can serve is connected and handed to the splice forwarder right
// here, as pasta does; the rest (UDP, an empty pool) goes to slowPath,
// late UDP datagrams too, so that they reach the forwarder after the flow
// they belong to.
func (pf *Forwarder) spliceHook(c *fwd.SpliceConn) bool {
	if pool := pf.pool.Load(); !c.UDP && pool != nil {
		dst := pf.spliceTarget(c.V6, c.ToAddr, c.ToPort, c.Local.Addr())
		if fd, ok, err := pool.dial(dst); ok {
			if err != nil {
				pf.log.Debug("splice: cannot reach the namespace", "dst", dst, "err", err)
				pf.refused(limit.TCP, err)
				return false
			}
			pf.bridge(c, fd)
			return true
		}
	}
	select {
	case pf.slow <- *c:
		return true
	default:
		// Overloaded: reset rather than stall the engine.
		k := limit.TCP
		if c.UDP {
			k = limit.UDP
		}
		pf.cfg.Refusals.Refuse(k, limit.Flows)
		return false
	}
}

// refused counts a spliced connection or flow of kind k that err refused,
// when err is a limit.
func (pf *Forwarder) refused(k limit.Kind, err error) {
	if res, ok := limit.Of(err); ok {
		pf.cfg.Refusals.Refuse(k, res)
	}
}

// slowPath finishes the loopback peers the engine's thread handed over
// without a namespace socket: one is made on the namespace's thread.
func (pf *Forwarder) slowPath() {
	for {
		select {
		case <-pf.stop:
			for {
				select {
				case c := <-pf.slow:
					if c.Fd >= 0 {
						unix.Close(c.Fd)
					}
				default:
					return
				}
			}
		case c := <-pf.slow:
			if c.Late {
				if err := pf.sp.LateUDP(splice.UDPKey{Local: c.Local, Peer: c.Peer}, c.Data...); err != nil {
					pf.log.Debug("splice: udp", "err", err)
				}
				continue
			}
			dst := pf.spliceTarget(c.V6, c.ToAddr, c.ToPort, c.Local.Addr())
			var other int
			var err error
			if c.UDP {
				other, err = pf.dialUDP(true, dst, c.Peer)
			} else {
				other, err = pf.dial(true, false, dst)
			}
			if err != nil {
				pf.log.Debug("splice: cannot reach the namespace", "dst", dst, "err", err)
				if c.UDP {
					unix.Close(c.Fd)
					pf.refused(limit.UDP, err)
				} else {
					sock.Abort(c.Fd)
					pf.refused(limit.TCP, err)
				}
				continue
			}
			pf.bridge(&c, other)
		}
	}
}

// bridge hands a connected pair to the splice forwarder, with the
// datagrams that arrived before the flow had its own socket: the forwarder
// sends them first, and holds them rather than drop them if other's send
// buffer is full.
func (pf *Forwarder) bridge(c *fwd.SpliceConn, other int) {
	if !c.UDP {
		if err := pf.sp.AddTCP(c.Fd, other); err != nil {
			pf.log.Debug("splice: tcp", "err", err)
		}
		return
	}
	if err := pf.sp.AddUDPPeer(splice.UDPKey{Local: c.Local, Peer: c.Peer}, c.Fd, other, c.Data...); err != nil {
		pf.log.Debug("splice: udp", "err", err)
	}
}
