package splice

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/internal/slots"
	"github.com/gopasta/gopasta/internal/sock"
)

// Listeners whose every connection is spliced: the namespace's loopback
// listeners of -T and -U (whose peers are always local), and with
// --splice-only the host's listeners of -t and -u. They live on the
// forwarder's loop, so a connection is accepted, its other side dialled
// and its bytes pumped on one goroutine, with no hand-over between them.
//
// The listener table has a mutex because listeners come and go from other
// goroutines (auto forwarding's scanner): RemoveListener closes the socket
// at once, so that the port can be bound again right away, and events carry
// a generation so the loop never accepts on a closed or reused descriptor.
// The loop takes the lock once per listener event, never per byte.

// TCPListener is a listening TCP socket whose connections are spliced.
type TCPListener struct {
	// Fd is bound and listening; the Forwarder owns it from
	// AddTCPListener on (and closes it on error too).
	Fd int
	// Local is the address Fd is bound to. Bound to any address (or
	// unknown), each connection's own is asked of the kernel.
	Local netip.AddrPort
	// Dial opens the other side's socket of a new connection, connected
	// or connecting (sock.Dial); local is the address and port the
	// connection reached (a loopback address of 127.0.0.0/8, for a
	// listener bound to any address on lo). It runs on the loop: it must
	// not wait for the connection to be established.
	Dial func(local netip.AddrPort) (int, error)
}

// UDPListener is a bound UDP socket whose peers become spliced flows.
type UDPListener struct {
	// Fd is bound; owned from AddUDPListener on.
	Fd int
	V6 bool
	// Local is the address Fd is bound to; Ifname its device, if any.
	Local  netip.AddrPort
	Ifname string
	// Reply opens a peer's own socket where the listener is (sock.Reply
	// in the listener's namespace): local is the address the peer sent
	// to. nil: sock.Reply on the loop.
	Reply func(local, peer netip.AddrPort) (int, error)
	// Dial opens the other side's socket, connected to the target; local
	// is the address and port the flow's first datagram was sent to, and
	// peer the flow's peer on the listener's side, whose port (and
	// loopback address) the socket should keep (sock.DialUDPFrom).
	Dial func(local, peer netip.AddrPort) (int, error)
}

// ListenerID names a listener for RemoveListener.
type ListenerID struct {
	slot int32
	gen  uint32
}

type listener struct {
	tcp    TCPListener
	udp    UDPListener
	isUDP  bool
	gen    uint32
	active bool
	// Accept backoff after running out of descriptors or memory: the
	// listener is taken out of epoll until retryAt.
	backoff time.Duration
	retryAt int64
	off     bool
	// The loop cycle of this listener's last accept: a listener reported
	// again in the very next cycle has a queue, and is drained in a batch.
	acceptedIn uint64
	// UDP: the flows this listener created, by peer, so that datagrams
	// that reached the listener before the peer's own socket existed
	// join their flow instead of starting another.
	flows map[netip.AddrPort]int
}

type listenTable struct {
	mu  sync.Mutex
	ls  slots.Table[listener]
	acc sock.Acceptor
}

// AddTCPListener serves l on the loop; safe from any goroutine.
func (f *Forwarder) AddTCPListener(l TCPListener) (ListenerID, error) {
	if l.Dial == nil {
		unix.Close(l.Fd)
		return ListenerID{}, errors.New("splice: TCPListener without Dial")
	}
	return f.addListener(listener{tcp: l}, l.Fd)
}

// AddUDPListener serves l on the loop; safe from any goroutine.
func (f *Forwarder) AddUDPListener(l UDPListener) (ListenerID, error) {
	if l.Dial == nil {
		unix.Close(l.Fd)
		return ListenerID{}, errors.New("splice: UDPListener without Dial")
	}
	if err := sock.RecvPktInfo(l.Fd, l.V6); err != nil {
		unix.Close(l.Fd)
		return ListenerID{}, &SocketError{Op: "PKTINFO", Fd: l.Fd, Err: err}
	}
	return f.addListener(listener{udp: l, isUDP: true, flows: map[netip.AddrPort]int{}}, l.Fd)
}

func (f *Forwarder) addListener(l listener, fd int) (ListenerID, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return ListenerID{}, &SocketError{Op: "O_NONBLOCK", Fd: fd, Err: err}
	}
	t := &f.lst
	t.mu.Lock()
	defer t.mu.Unlock()
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		unix.Close(fd)
		return ListenerID{}, ErrClosed
	}
	slot, old := t.ls.Take()
	s := &t.ls.Items[slot]
	l.gen = nextGen(old.gen)
	l.active = true
	*s = l
	ev := tag(kindListen, 0, int(slot), l.gen)
	ev.Events = unix.EPOLLIN
	if err := f.epollAdd(fd, &ev); err != nil {
		s.active = false
		t.ls.Release(slot)
		unix.Close(fd)
		return ListenerID{}, fmt.Errorf("splice: epoll_ctl add listener: %w", err)
	}
	return ListenerID{slot, l.gen}, nil
}

// RemoveListener closes a listener at once; what it accepted lives on.
// Safe from any goroutine; removing twice is harmless.
func (f *Forwarder) RemoveListener(id ListenerID) {
	t := &f.lst
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(id.slot) >= len(t.ls.Items) || !t.ls.Items[id.slot].active || t.ls.Items[id.slot].gen != id.gen {
		return
	}
	f.closeListener(id.slot)
}

// closeListener retires a slot; t.mu is held.
func (f *Forwarder) closeListener(slot int32) {
	t := &f.lst
	s := &t.ls.Items[slot]
	fd := s.tcp.Fd
	if s.isUDP {
		fd = s.udp.Fd
	}
	if f.epfd >= 0 {
		_ = unix.EpollCtl(f.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
	unix.Close(fd)
	// Its flows live on without it; they look the listener up by slot
	// and generation when they end, and find it gone.
	*s = listener{gen: s.gen}
	t.ls.Release(slot)
}

// ListenerCount is the number of open listeners; safe from any goroutine.
func (f *Forwarder) ListenerCount() int {
	f.lst.mu.Lock()
	defer f.lst.mu.Unlock()
	return f.lst.ls.Used()
}

// closeListeners closes every listener (Close).
func (f *Forwarder) closeListeners() {
	t := &f.lst
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.ls.Items {
		if t.ls.Items[i].active {
			f.closeListener(int32(i))
		}
	}
}

// listenEvent serves a listener's epoll event.
func (f *Forwarder) listenEvent(slot int, gen uint32) {
	t := &f.lst
	t.mu.Lock()
	defer t.mu.Unlock()
	if slot >= len(t.ls.Items) || !t.ls.Items[slot].active || t.ls.Items[slot].gen != gen {
		return
	}
	if t.ls.Items[slot].isUDP {
		f.udpListenerRead(int32(slot))
	} else {
		f.acceptTCP(int32(slot))
	}
}

// acceptTCP takes connections off a listener, as many as
// sock.AcceptBudget says.
func (f *Forwarder) acceptTCP(slot int32) {
	t := &f.lst
	l := &t.ls.Items[slot]
	batch := sock.AcceptBudget(l.acceptedIn, f.cycles)
	l.acceptedIn = f.cycles
	for range batch {
		fd, _, err := t.acc.Accept(l.tcp.Fd)
		if err != nil {
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				f.pool.drain() // idle pipes give way to the refusals
			}
			switch f.reserve.AcceptFailed(err, l.tcp.Fd, &t.acc, &l.backoff, f.opts.Refusals) {
			case sock.AcceptAgain:
				continue
			case sock.AcceptPause:
				f.log.Debug("splice: accept failed, retrying", "fd", l.tcp.Fd, "err", err, "in", l.backoff)
				f.pauseListener(slot)
			}
			return
		}
		local := l.tcp.Local
		if a := local.Addr(); !a.IsValid() || a.IsUnspecified() {
			if local, err = t.acc.Local(fd); err != nil {
				f.log.Debug("splice: a connection's own address", "err", err)
				sock.Abort(fd)
				continue
			}
		}
		other, err := l.tcp.Dial(local)
		if err != nil {
			f.log.Debug("splice: cannot reach the target", "err", err)
			sock.Abort(fd)
			f.refused(limit.TCP, err)
			continue
		}
		if err := f.openTCP(fd, other); err != nil {
			f.log.Debug("splice: tcp", "err", err)
		}
	}
}

// pauseListener takes a listener out of epoll until its backoff passes.
func (f *Forwarder) pauseListener(slot int32) {
	l := &f.lst.ls.Items[slot]
	ev := tag(kindListen, 0, int(slot), l.gen)
	fd := l.tcp.Fd
	if sock.EpollCtl(f.epfd, unix.EPOLL_CTL_MOD, fd, &ev) != nil {
		return
	}
	l.off = true
	l.retryAt = f.now + int64(l.backoff)
	f.armRetry(l.backoff)
}

// armRetry makes the retry timer fire within d. The loop remembers when
// it armed the timer for (retryAt), so that no system call asks.
func (f *Forwarder) armRetry(d time.Duration) {
	d = max(d, time.Millisecond)
	at := f.now + int64(d)
	if f.retryAt != 0 && f.retryAt <= at {
		return
	}
	it := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if setTimer(f.retryfd, &it) == nil {
		f.retryAt = at
	} else {
		f.retryLost = true
	}
}

// retryListeners puts paused listeners whose backoff has passed back into
// epoll, and re-arms the timer for the others.
func (f *Forwarder) retryListeners() {
	f.retryAt = 0 // the one-shot timer fired (or was lost)
	f.retryLost = false
	t := &f.lst
	t.mu.Lock()
	defer t.mu.Unlock()
	next := time.Duration(-1)
	for i := range t.ls.Items {
		l := &t.ls.Items[i]
		if !l.active || !l.off {
			continue
		}
		if wait := time.Duration(l.retryAt - f.now); wait > 0 {
			if next < 0 || wait < next {
				next = wait
			}
			continue
		}
		ev := tag(kindListen, 0, i, l.gen)
		ev.Events = unix.EPOLLIN
		if sock.EpollCtl(f.epfd, unix.EPOLL_CTL_MOD, l.tcp.Fd, &ev) == nil {
			l.off = false
		}
	}
	if next >= 0 {
		f.armRetry(next)
	}
}

// listenDrainRounds bounds the batches one listener event reads while new
// flows' earlier datagrams may still wait in the listener's queue
// (udpListenerRead): far more than a listener's receive buffer holds at its
// default size.
const listenDrainRounds = 64

// udpListenerRead takes datagrams from a UDP listener. Each comes from a
// peer without a socket of its own yet: the first makes the flow, the
// others of the same peer join it.
//
// A new flow's socket, bound and connected to the peer, takes the peer's
// datagrams from its connect on; those that came before wait in the
// listener's queue, behind the ones read already. They must reach the flow
// before anything its own socket received, or they would arrive after
// newer datagrams (or, had they made a flow of their own, from another
// port): so once a batch made a flow, reading goes on until a batch that
// began after that flow's connect leaves the queue empty, i.e. comes back
// short. The flow's socket is read in a later cycle.
func (f *Forwarder) udpListenerRead(slot int32) {
	if f.udpBatch == nil {
		f.udpBatch = newMmsgBatch(f.opts.UDPBatch)
	}
	made := false
	for range listenDrainRounds {
		n, created := f.udpListenerBatch(slot)
		made = made || created
		if !created && (!made || n < len(f.udpBatch.msgs)) {
			return
		}
	}
}

// udpListenerBatch reads and delivers one batch: how many datagrams, and
// whether one of them made a new flow.
func (f *Forwarder) udpListenerBatch(slot int32) (n int, created bool) {
	t := &f.lst
	l := &t.ls.Items[slot]
	b := f.udpBatch
	for i := range b.msgs {
		b.recv.SetFrom(i, b.bufs[i])
	}
	n, err := sock.Mmsg(unix.SYS_RECVMMSG, l.udp.Fd, b.msgs, unix.MSG_DONTWAIT)
	for i := range n {
		m := &b.msgs[i]
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			f.ctr.udpDrops.Add(1)
			continue
		}
		peer := b.recv.From(i)
		local := netip.AddrPortFrom(b.recv.To(i, l.udp.Local.Addr()), l.udp.Local.Port())
		if f.udpFromListener(slot, local, peer, b.bufs[i][:m.Len]) {
			created = true
		}
	}
	// Flows read with the same batch: no name, no control.
	for i := range b.msgs {
		b.recv.Set(i, b.bufs[i])
	}
	_ = err // EAGAIN, or an error a later event reports again
	return n, created
}

// udpFromListener delivers one datagram that reached listener slot from
// peer: on the peer's flow if it has one, else on a new flow (and then
// reports true).
func (f *Forwarder) udpFromListener(slot int32, local, peer netip.AddrPort, data []byte) bool {
	l := &f.lst.ls.Items[slot]
	if s, ok := l.flows[peer]; ok && f.udp.Items[s].active {
		f.udpSendOther(s, data)
		return false
	}
	reply := l.udp.Reply
	if reply == nil {
		reply = func(local, peer netip.AddrPort) (int, error) { return sock.Reply(local, l.udp.Ifname, peer) }
	}
	a, err := reply(local, peer)
	if err != nil {
		f.ctr.udpDrops.Add(1)
		f.log.Debug("splice: udp reply socket", "peer", peer, "err", err)
		f.refused(limit.UDP, err)
		return false
	}
	b, err := l.udp.Dial(local, peer)
	if err != nil {
		unix.Close(a)
		f.ctr.udpDrops.Add(1)
		f.log.Debug("splice: udp: cannot reach the target", "err", err)
		f.refused(limit.UDP, err)
		return false
	}
	s, err := f.openUDP(a, b)
	if err != nil {
		f.ctr.udpDrops.Add(1)
		f.log.Debug("splice: udp", "err", err)
		f.refused(limit.UDP, err)
		return false
	}
	u := &f.udp.Items[s]
	u.lis, u.lgen, u.peer = slot+1, l.gen, peer
	l.flows[peer] = s
	f.udpSendOther(s, data)
	return true
}

// udpSendOther sends one datagram of the listener's side to the other
// side of flow s, as the flow's own pump would: after the flow's backlog
// for that side, if it has one (udp.go).
func (f *Forwarder) udpSendOther(s int, data []byte) {
	u := &f.udp.Items[s]
	u.seen[0] = min(u.seen[0]+1, 2)
	u.last = f.now
	if len(u.pend[1]) > 0 {
		f.udpHold(s, 1, data)
		return
	}
	err := send(u.fd[1], data)
	if err != nil && err != unix.EAGAIN {
		// Most likely an earlier datagram's ICMP error, now cleared.
		err = send(u.fd[1], data)
	}
	switch err {
	case nil:
		f.ctr.udpDatagrams.Add(1)
		f.ctr.udpBytes.Add(uint64(len(data)))
	case unix.EAGAIN:
		f.udpHold(s, 1, data)
		f.udpArm(s)
	default:
		f.ctr.udpDrops.Add(1)
	}
}

// send sends one datagram on a connected socket without allocating. Unlike
// write(2), send(2) sends a datagram of length zero too.
func send(fd int, b []byte) error {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(p), uintptr(len(b)), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// forgetFlow removes a closing flow from its listener's peer table.
func (f *Forwarder) forgetFlow(u *udpFlow) {
	if u.lis == 0 {
		return
	}
	t := &f.lst
	t.mu.Lock()
	if i := int(u.lis - 1); i < len(t.ls.Items) && t.ls.Items[i].active && t.ls.Items[i].gen == u.lgen {
		delete(t.ls.Items[i].flows, u.peer)
	}
	t.mu.Unlock()
	u.lis = 0
}
