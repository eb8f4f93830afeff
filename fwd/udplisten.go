package fwd

import (
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/sock"
)

// Host-initiated UDP (-u). A datagram from a new host peer on a forwarded
// port creates a flow toward the namespace with its own reply socket: bound
// to the listener's address and port (both SO_REUSEADDR) and connected to
// the peer, so the kernel delivers the peer's later datagrams to it rather
// than to the listener, and the namespace's replies leave from the port the
// peer talked to. From then on the flow is an ordinary UDP flow (udp.go).

// spliceDrainRounds bounds the batches one listener event reads while
// loopback peers' earlier datagrams may still wait in the listener's queue
// (udpListenerRead): far more than a listener's receive buffer holds at its
// default size.
const spliceDrainRounds = 32

// spliceLateWindow is how long after a hand-over a datagram of the same
// peer on the listener counts as late (SpliceConn.Late) rather than as the
// start of a new flow. The kernel queues such a datagram on the listener
// within microseconds of the peer's socket being connected, a little later
// on a busy machine; after the window the peer's socket is gone (its flow
// closed) if the listener hears from the peer again.
const spliceLateWindow = int64(500 * time.Millisecond)

// udpListenerRead moves datagrams from a UDP listener, received straight
// into transmit buffers behind room for the headers, and hands new loopback
// peers to the splice hook.
//
// A loopback peer's own socket (spliceDatagram), bound and connected to
// it, takes the peer's datagrams from its connect on; those that came
// before wait in the listener's queue, behind the ones read already. They
// must be among the flow's early datagrams, which the splice forwarder
// sends before anything the flow's socket received: read later, they would
// arrive after newer datagrams. So once a batch made such a socket,
// reading goes on until a batch that began after its connect leaves the
// queue empty (comes back short), and only then are the peers handed over.
//
// That is not quite enough: the kernel picks the socket for a datagram
// and queues it on that socket in two steps, and a datagram for which it
// picked the listener just before the connect may be queued after the
// short batch. Such a datagram is late: it goes to the hook marked so,
// for the flow already made (the splice forwarder sends it on that flow,
// out of order but from the right port), never to a second flow, whose
// socket, bound and connected like the first, would take the rest of the
// peer's datagrams from it.
func (e *Engine) udpListenerRead(l *listener) {
	t := &e.lst
	t.hand = t.hand[:0]
	made := false
	for range spliceDrainRounds {
		n, asked, created := e.udpListenerBatch(l)
		made = made || created
		if !created && (!made || n < asked) {
			break
		}
	}
	for i := range t.hand {
		c := &t.hand[i]
		switch {
		case t.hook(c):
			if !c.Late {
				e.handedOver(l, c.Local, c.Peer)
			}
		case c.Late:
			e.drop(DropHostSocket)
		default:
			e.sys.close(c.Fd)
		}
		t.hand[i] = SpliceConn{}
	}
	t.hand = t.hand[:0]
}

// handedOver notes that the flow of peer to local on l has its own socket
// now, so that its datagrams still reaching l for a moment are late ones.
func (e *Engine) handedOver(l *listener, local, peer netip.AddrPort) {
	if l.handed == nil {
		l.handed = make(map[handedKey]int64)
	}
	if len(l.handed) >= l.handedMax {
		for p, until := range l.handed {
			if e.now >= until {
				delete(l.handed, p)
			}
		}
		l.handedMax = max(64, 2*len(l.handed))
	}
	l.handed[handedKey{local, peer}] = e.now + spliceLateWindow
}

// udpListenerBatch moves one recvmmsg batch from a UDP listener (udpRecv):
// how many datagrams it read, of how many it asked for, and whether a
// loopback peer got its own socket.
func (e *Engine) udpListenerBatch(l *listener) (n, asked int, created bool) {
	t := &e.lst
	bs, n := e.udpRecv(l.Fd, l.V6, l.udpLast, t.recv, true)
	if n == 0 {
		return 0, len(bs), false
	}
	off := l4Offset(l.V6) + header.UDPMinimumSize
	to, toOK := target(l)
	w := 0
	l.udpLast = 0
	for i := range n {
		m := &t.recv.Msgs[i]
		l.udpLast = max(l.udpLast, m.Len)
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			e.drop(DropTooBig)
			continue
		}
		ln := int(m.Len)
		peer := t.recv.From(i)
		local := netip.AddrPortFrom(t.recv.To(i, l.Local.Addr()), l.Local.Port())
		if t.canSplice(l, peer.Addr()) {
			created = e.spliceDatagram(l, local, peer, bs[i][off:off+ln]) || created
			continue
		}
		from, ok := e.inboundPeer(peer.Addr(), l.V6)
		if !toOK || !ok || e.tr[protoUDP] == nil {
			e.drop(DropDestination)
			continue
		}
		k := flowKey{proto: header.ProtocolUDP, nsPort: l.ToPort, dstPort: peer.Port(), ns: to.As16(), dst: from.As16()}
		idx := e.ft.lookup(&k)
		if idx < 0 {
			idx = e.udpFromHost(l, local, peer, netip.AddrPortFrom(to, l.ToPort), netip.AddrPortFrom(from, peer.Port()))
			if idx < 0 {
				continue
			}
		} else if e.flow(idx).HostAddr() != peer.Addr() {
			// Another host peer already appears as this namespace
			// peer (see acceptTCP).
			e.drop(DropHostSocket)
			continue
		}
		f := e.flow(idx)
		fl, meta := e.udpFrame(bs[i], f, ln)
		e.txCommitFrom(bs, i, w, fl, meta)
		w++
		e.udpActivity(f, false)
	}
	return n, len(bs), created
}

// udpFromHost opens the flow of a new host peer on listener l.
func (e *Engine) udpFromHost(l *listener, local, peer, nsSide, nsPeer netip.AddrPort) int32 {
	idx := e.newFlowFor(header.ProtocolUDP, protoUDP, nsSide, nsPeer)
	if idx < 0 {
		return -1
	}
	f := e.flow(idx)
	f.setHostAddr(peer.Addr())
	fd, err := e.udpReplySocket(l, local, peer, idx)
	if err == nil {
		if err = e.sys.watch(fd, idx, f.gen, unix.EPOLLIN); err != nil {
			e.sys.close(fd)
		}
	}
	if err != nil {
		e.drop(DropHostSocket)
		e.refused(protoUDP, err)
		if e.debug {
			e.log.Debug("udp: no reply socket", "peer", peer, "err", err)
		}
		e.closeFlow(idx)
		return -1
	}
	f.Fd = fd
	f.Flags |= flagHostInit
	return idx
}

// udpReplySocket is the peer's own socket (sock.Reply) with ICMP errors
// queued on it (IP_RECVERR), which udp.go turns into ICMP for the
// namespace; setup is the flow it is for, if it has one yet, else -1.
// With --freebind it binds with IP_FREEBIND, as the listener did: the
// address the peer sent to may be one the host does not have configured
// (an IPv6 address of a local route, which bind(2) refuses otherwise).
func (e *Engine) udpReplySocket(l *listener, local, peer netip.AddrPort, setup int32) (int, error) {
	fd, err := sock.ReplyWith(local, peer, sock.ReplyOptions{Ifname: l.BindIf, Freebind: e.opts.Freebind})
	if err != nil {
		e.outOfDescriptors(err, setup)
		return -1, err
	}
	e.recvErr(fd, l.V6)
	return fd, nil
}

// spliceDatagram queues a loopback datagram for the splice hook: the first
// of a peer in this listener event gets a reply socket (and it reports
// true), later ones join its data; one of a peer handed over a moment ago
// is late (udpListenerRead).
// The copies allocate, once per datagram that arrives before the flow has
// its own socket; the flow's traffic afterwards never passes here.
func (e *Engine) spliceDatagram(l *listener, local, peer netip.AddrPort, data []byte) bool {
	t := &e.lst
	cp := append([]byte(nil), data...)
	for i := range t.hand {
		if t.hand[i].Peer == peer && t.hand[i].Local == local {
			t.hand[i].Data = append(t.hand[i].Data, cp)
			return false
		}
	}
	c := SpliceConn{Fd: -1, UDP: true, V6: l.V6, Peer: peer, Local: local,
		ToAddr: l.SpliceTo, ToPort: l.ToPort, Data: [][]byte{cp}}
	if until, ok := l.handed[handedKey{local, peer}]; ok && e.now < until {
		c.Late = true
		t.hand = append(t.hand, c)
		return false
	}
	fd, err := e.udpReplySocket(l, local, peer, -1)
	if err != nil {
		e.drop(DropHostSocket)
		e.refused(protoUDP, err)
		return false
	}
	c.Fd = fd
	t.hand = append(t.hand, c)
	return true
}
