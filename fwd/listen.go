package fwd

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/slots"
	"github.com/gopasta/gopasta/internal/sock"
)

// Forwarded ports, host to namespace (-t, -u): the engine accepts on host
// listening sockets and turns each connection (or UDP peer) into a flow
// toward the namespace, or, for loopback peers when splicing is allowed,
// hands it to the splice hook, which bridges it to a socket inside the
// namespace without touching the TAP.
//
// The listener table is guarded by a mutex so that the auto-forwarding
// scanner can add and remove listeners from its own goroutine while the
// engine runs. The engine takes the lock once per listener event (a few
// accepts or one recvmmsg batch), never per frame. Removal closes the fd
// under the lock, and events carry a generation, so the engine never
// accepts on a closed or reused fd.

// Listener tags in epoll's Fd field: tagListenBase - slot.
const tagListenBase = -16

// Listener is a host socket the engine serves. Fd must be bound and, for
// TCP, listening; the engine makes it non-blocking and owns it from
// AddListener on (closing it on error too).
type Listener struct {
	Fd  int
	UDP bool
	// V6 is the socket's family (AF_INET6, bound IPV6_V6ONLY).
	V6 bool
	// Local is the address the socket is bound to (invalid or
	// unspecified = any); UDP reply sockets bind to it.
	Local netip.AddrPort
	// BindIf is the interface the socket is bound to (SO_BINDTODEVICE),
	// if any; UDP reply sockets bind to it too.
	BindIf string
	// ToAddr is the namespace address to forward to over the TAP, of the
	// socket's family (the port forwarding rules decide it: the rule's
	// target, else the namespace's own address); ToPort is the namespace
	// port. Without a usable ToAddr, connections that would take the TAP
	// are refused.
	ToAddr netip.Addr
	ToPort uint16
	// Splice: connections from host loopback go to the splice hook
	// rather than through the TAP.
	Splice bool
	// SpliceTo is the rule's own target address for those, of the
	// socket's family, passed on as SpliceConn.ToAddr; invalid when the
	// rule names none, and the hook then picks (the namespace's own
	// address or its loopback, as the options say).
	SpliceTo netip.Addr
}

// SpliceConn is a connection or UDP flow handed to the splice hook.
type SpliceConn struct {
	// Fd is the accepted TCP socket, or for UDP a socket bound to the
	// listener's address and connected to Peer. The hook owns it.
	Fd   int
	UDP  bool
	V6   bool
	Peer netip.AddrPort // the host peer (a loopback address)
	// ToAddr, ToPort: where the rule sends it (ToAddr is the listener's
	// SpliceTo: invalid when the rule names no address).
	ToAddr netip.Addr
	ToPort uint16
	// Data holds the UDP datagrams that arrived on the listener before
	// the flow had its own socket; send them first.
	Data [][]byte
	// Local is the address the peer connected or sent to (a loopback
	// address, which spliced connections may keep); for UDP, with Peer,
	// the flow's name.
	Local netip.AddrPort
	// Late (UDP): Data are datagrams of a peer handed over a moment ago
	// that reached the listener after its own socket was connected (the
	// kernel chose the listener for them just before); Fd is -1. They
	// belong on the flow made for that hand-over, whose name Local and
	// Peer give; a hook that cannot find it returns false.
	Late bool
}

// SpliceHook takes a loopback connection. It runs on the engine's loop
// and must not block: queue the work and return true, or return false to
// have the engine reset the connection.
type SpliceHook func(c *SpliceConn) bool

// ErrListenFamily: a listener's target address is not of its family.
var ErrListenFamily = errors.New("fwd: listener target address family differs from the socket's")

type listener struct {
	Listener
	gen        uint32
	active     bool
	acceptedIn uint64 // the engine cycle of the last accept (sock.AcceptBudget)
	// A TCP listener whose accept failed for want of memory (or of
	// descriptors, with the spare taken) is out of epoll until retryAt
	// (engine nanoseconds), for backoff (sock.Spare.AcceptFailed).
	off     bool
	retryAt int64
	backoff time.Duration
	udpLast uint32 // UDP: the largest datagram of the last batch (udpBurst)
	// UDP: loopback peers handed to the splice hook, until when their
	// datagrams on the listener are late ones (udplisten.go).
	handed    map[handedKey]int64
	handedMax int // sweep expired entries when handed grows to this
}

// handedKey names a spliced UDP flow on its listener.
type handedKey struct{ local, peer netip.AddrPort }

// listenTable is the engine's listener state (Engine.lst).
type listenTable struct {
	mu   sync.Mutex
	ls   slots.Table[listener]
	hook SpliceHook
	shut bool // the engine closed: no more listeners
	acc  sock.Acceptor

	// UDP listener batch scratch.
	recv *sock.RecvBatch // with each datagram's addresses
	hand []SpliceConn
}

// ListenerID names a listener for RemoveListener: its slot and, so that a
// stale ID never closes the slot's next listener, its generation.
type ListenerID uint64

func listenerID(slot int32, gen uint32) ListenerID { return ListenerID(uint64(slot)<<32 | uint64(gen)) }

func (id ListenerID) slot() int32 { return int32(id >> 32) }
func (id ListenerID) gen() uint32 { return uint32(id) }

// SetSpliceHook installs the hook for loopback connections; call it
// before AddListener. Without a hook every connection takes the TAP path.
func (e *Engine) SetSpliceHook(h SpliceHook) {
	e.lst.mu.Lock()
	e.lst.hook = h
	e.lst.mu.Unlock()
}

// AddListener registers l with the engine; safe from any goroutine,
// before or during Run.
func (e *Engine) AddListener(l Listener) (ListenerID, error) {
	for _, a := range []netip.Addr{l.ToAddr, l.SpliceTo} {
		if a.IsValid() && a.Unmap().Is6() != l.V6 {
			unix.Close(l.Fd)
			return 0, ErrListenFamily
		}
	}
	if err := unix.SetNonblock(l.Fd, true); err != nil {
		unix.Close(l.Fd)
		return 0, err
	}
	if l.UDP {
		// Replies must leave from the address each peer sent to.
		sock.RecvPktInfo(l.Fd, l.V6)
	}
	t := &e.lst
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shut {
		unix.Close(l.Fd)
		return 0, errors.New("fwd: engine closed")
	}
	if t.recv == nil {
		t.recv = sock.NewRecvBatch(udpBatch, true)
		t.hand = make([]SpliceConn, 0, udpBatch)
	}
	slot, old := t.ls.Take()
	s := &t.ls.Items[slot]
	gen := old.gen + 1
	l.ToAddr, l.SpliceTo = l.ToAddr.Unmap(), l.SpliceTo.Unmap()
	*s = listener{Listener: l, gen: gen, active: true}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: tagListenBase - slot, Pad: int32(gen)}
	if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, l.Fd, &ev); err != nil {
		s.active = false
		t.ls.Release(slot)
		unix.Close(l.Fd)
		return 0, fmt.Errorf("fwd: epoll_ctl add listener: %w", err)
	}
	return listenerID(slot, gen), nil
}

// RemoveListener closes a listener; connections it accepted live on.
// Safe from any goroutine; removing twice is harmless.
func (e *Engine) RemoveListener(id ListenerID) {
	t := &e.lst
	t.mu.Lock()
	defer t.mu.Unlock()
	slot := id.slot()
	if slot < 0 || int(slot) >= len(t.ls.Items) {
		return
	}
	s := &t.ls.Items[slot]
	if !s.active || s.gen != id.gen() {
		return
	}
	t.closeSlot(e, slot)
}

func (t *listenTable) closeSlot(e *Engine, slot int32) {
	s := &t.ls.Items[slot]
	if e.epfd > 0 {
		unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, s.Fd, nil)
	}
	unix.Close(s.Fd)
	s.active = false
	t.ls.Release(slot)
}

// closeListeners closes every listener (Engine.Close).
func (e *Engine) closeListeners() {
	t := &e.lst
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shut = true
	for i := range t.ls.Items {
		if t.ls.Items[i].active {
			t.closeSlot(e, int32(i))
		}
	}
}

// ListenerCount is the number of open listeners; safe from any goroutine.
func (e *Engine) ListenerCount() int {
	e.lst.mu.Lock()
	defer e.lst.mu.Unlock()
	return e.lst.ls.Used()
}

// listenEvent handles an epoll event of a listener (tag <= tagListenBase).
func (e *Engine) listenEvent(tag int32, gen uint32) {
	t := &e.lst
	slot := tagListenBase - tag
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(slot) >= len(t.ls.Items) {
		return
	}
	l := &t.ls.Items[slot]
	if !l.active || l.gen != gen {
		return
	}
	if l.UDP {
		e.udpListenerRead(l)
	} else {
		e.acceptTCP(l, slot)
	}
}

// inboundPeer is the address the namespace sees a host peer as: the NAT's
// answer, else (a loopback source without a host-loopback mapping, or the
// host's own address the namespace shadows) the gateway, which the
// namespace can always answer through the TAP.
func (e *Engine) inboundPeer(src netip.Addr, v6 bool) (netip.Addr, bool) {
	if a, ok := e.nat.FromHost(src); ok && a.Is6() == v6 {
		return a, true
	}
	if v6 {
		if e.nat.MapHostLoopback6.IsValid() {
			return e.nat.MapHostLoopback6, true
		}
		return e.p.Gateway6, e.p.Gateway6.IsValid()
	}
	if e.nat.MapHostLoopback4.IsValid() {
		return e.nat.MapHostLoopback4, true
	}
	return e.p.Gateway4, e.p.Gateway4.IsValid()
}

// target is where l forwards to in the namespace over the TAP: its
// ToAddr, which must not be loopback (only a spliced connection reaches
// the namespace's loopback).
func target(l *listener) (netip.Addr, bool) {
	return l.ToAddr, l.ToAddr.IsValid() && !l.ToAddr.IsLoopback()
}

// canSplice reports whether a connection from src on l goes to the hook.
func (t *listenTable) canSplice(l *listener, src netip.Addr) bool {
	return l.Splice && t.hook != nil && src.IsLoopback()
}

func (e *Engine) acceptTCP(l *listener, slot int32) {
	t := &e.lst
	batch := sock.AcceptBudget(l.acceptedIn, e.cycles)
	l.acceptedIn = e.cycles
	for range batch {
		fd, peer, err := t.acc.Accept(l.Fd)
		if err != nil {
			switch e.reserve.AcceptFailed(err, l.Fd, &t.acc, &l.backoff, e.opts.Refusals) {
			case sock.AcceptAgain:
				continue
			case sock.AcceptPause:
				e.pauseListener(l, slot, err)
			}
			return
		}
		if t.canSplice(l, peer.Addr()) {
			c := SpliceConn{Fd: fd, V6: l.V6, Peer: peer, ToAddr: l.SpliceTo, ToPort: l.ToPort, Local: l.Local}
			if a := l.Local.Addr(); !a.IsValid() || a.IsUnspecified() {
				// Which loopback address the peer connected to.
				c.Local, _ = t.acc.Local(fd)
			}
			if !t.hook(&c) {
				e.sys.abort(fd)
				e.sys.close(fd)
			}
			continue
		}
		to, ok1 := target(l)
		from, ok2 := e.inboundPeer(peer.Addr(), l.V6)
		if !ok1 || !ok2 || e.tr[protoTCP] == nil {
			e.drop(DropDestination)
			e.sys.abort(fd)
			e.sys.close(fd)
			continue
		}
		nsSide := netip.AddrPortFrom(to, l.ToPort)
		nsPeer := netip.AddrPortFrom(from, peer.Port())
		// Two host peers can map to one namespace peer (127.0.0.1:P and
		// the host's shadowed address :P both appear as the gateway);
		// the namespace could not tell them apart, so the second waits
		// for the first to go, like a port clash.
		k := flowKey{proto: header.ProtocolTCP, nsPort: l.ToPort, dstPort: peer.Port(), ns: to.As16(), dst: from.As16()}
		if e.ft.lookup(&k) >= 0 {
			e.drop(DropHostSocket)
			e.sys.abort(fd)
			e.sys.close(fd)
			continue
		}
		if err := e.tcpFromHost(fd, nsPeer, nsSide); err != nil && e.debug {
			e.log.Debug("forwarded connection refused", "peer", peer, "err", err)
		}
	}
}

// pauseListener takes TCP listener l (in slot) out of epoll for its
// backoff (sock.Spare.AcceptFailed), after its accept failed with err.
// The lock of e.lst is held.
func (e *Engine) pauseListener(l *listener, slot int32, err error) {
	ev := unix.EpollEvent{Fd: tagListenBase - slot, Pad: int32(l.gen)}
	if unix.EpollCtl(e.epfd, unix.EPOLL_CTL_MOD, l.Fd, &ev) != nil {
		return
	}
	l.off = true
	l.retryAt = e.now + int64(l.backoff)
	if e.debug {
		e.log.Debug("accept failed, retrying", "fd", l.Fd, "err", err, "in", l.backoff)
	}
	if e.listenRetryAt == 0 || l.retryAt < e.listenRetryAt {
		e.listenRetryAt = l.retryAt
		e.wakeAt(l.retryAt)
	}
}

// retryListeners puts paused listeners whose backoff has passed back into
// epoll (the timer's run at e.listenRetryAt), and notes when the next one
// is due.
func (e *Engine) retryListeners() {
	t := &e.lst
	t.mu.Lock()
	defer t.mu.Unlock()
	e.listenRetryAt = 0
	for i := range t.ls.Items {
		l := &t.ls.Items[i]
		if !l.active || !l.off {
			continue
		}
		if l.retryAt > e.now {
			if e.listenRetryAt == 0 || l.retryAt < e.listenRetryAt {
				e.listenRetryAt = l.retryAt
			}
			continue
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: tagListenBase - int32(i), Pad: int32(l.gen)}
		if unix.EpollCtl(e.epfd, unix.EPOLL_CTL_MOD, l.Fd, &ev) == nil {
			l.off = false
		}
	}
}
