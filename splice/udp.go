package splice

// Spliced UDP flows: a pair of connected sockets per peer, batches moved
// with recvmmsg and sendmmsg in segmentation offload runs, and late
// datagrams from the listener.

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/internal/sock"
)

// udpFlow forwards datagrams between two connected UDP sockets, one per
// namespace. Sockets are level-triggered: a flow may stop after udpRounds
// batches and be called again, without bookkeeping.
//
// A socket that cannot take a datagram (EAGAIN: its send buffer is full,
// which loopback never makes it, but a route through a real device may)
// does not lose it: the datagrams not yet sent are copied to the flow's
// backlog for that socket, the flow stops reading the other side (whose
// kernel queue, and then its sender, take the pressure, as they would for
// any slow receiver), and waits for EPOLLOUT. The backlog goes first once
// the socket takes datagrams again, so order holds. It is at most one
// batch, plus the datagrams that reached a listener before the flow had a
// socket of its own (listen.go, AddUDP's early datagrams).
type udpFlow struct {
	fd [2]int
	// seen[s] counts the batches (on a listener: the datagrams) read
	// from side s, up to 2: side 0 started the flow, and it is a stream
	// once side 1 answered and either side sent more than once.
	seen [2]uint8
	// lastLen[s]: the largest datagram of the last batch read from fd[s]
	// (0: none yet), which bounds the next batch (sock.Burst).
	lastLen [2]uint32
	gen     uint32
	active  bool
	last    int64
	// pend[s]: datagrams waiting for fd[s] to take them; armed[s]: the
	// epoll events fd[s] is registered for.
	pend  [2][][]byte
	armed [2]uint32
	// noGSO[s]: fd[s] refused a segmentation offload send
	// (sock.GSORefused), and takes its datagrams one per message since.
	noGSO [2]bool
	// A flow a UDP listener made: the listener's slot + 1 and
	// generation, and the peer it is for (listen.go).
	lis  int32
	lgen uint32
	peer netip.AddrPort
	// A flow added with AddUDPPeer: its name in Forwarder.keyed (zero
	// for none, or once a newer flow took the name).
	key UDPKey
}

// mmsgBatch is the loop's one set of datagram buffers, shared by all flows
// because the loop handles one flow at a time.
type mmsgBatch struct {
	// recv is recvmmsg's message array, one datagram each, with room
	// for the addresses a listener's datagrams need (listen.go); msgs
	// and iovs are its messages and their buffers.
	recv *sock.RecvBatch
	msgs []unix.Mmsghdr
	iovs []unix.Iovec
	bufs [][]byte
	// send is sendmmsg's view of the same datagrams, in runs that
	// segmentation offload carries as one message (sock.GSOBatch).
	send *sock.GSOBatch
}

const udpBufSize = 65536 // the largest datagram loopback carries

func newMmsgBatch(n int) *mmsgBatch {
	recv := sock.NewRecvBatch(n, true)
	b := &mmsgBatch{
		recv: recv,
		msgs: recv.Msgs,
		iovs: recv.Iovs,
		bufs: make([][]byte, n),
		send: sock.NewGSOBatch(n),
	}
	mem := make([]byte, n*udpBufSize)
	for i := range n {
		b.bufs[i] = mem[i*udpBufSize : (i+1)*udpBufSize]
		recv.Set(i, b.bufs[i])
	}
	return b
}

// AddUDP takes ownership of two connected UDP sockets, one per namespace,
// and forwards datagrams both ways until the flow times out (Options
// UDPTimeout, UDPStreamTimeout) or the Forwarder closes. On error both
// sockets are closed. early are datagrams of a's peer that the caller read
// before a existed (on an unconnected listening socket): the flow takes
// them over and sends them on b, in order, before anything a receives.
func (f *Forwarder) AddUDP(a, b int, early ...[]byte) error {
	return f.AddUDPPeer(UDPKey{}, a, b, early...)
}

// UDPKey names a flow whose first datagrams came through an unconnected
// socket that other peers share (a forwarded port's listener): the address
// the peer sent to and the peer.
type UDPKey struct {
	Local, Peer netip.AddrPort
}

func (k UDPKey) named() bool { return k.Peer.IsValid() }

// AddUDPPeer is AddUDP for a flow that a caller made from a shared
// listening socket: the flow is known by key until it closes, so that
// datagrams of the peer that still reach the listening socket after a has
// been connected can join it (LateUDP) rather than start a flow of their
// own. Such late datagrams exist: the kernel may have chosen the listening
// socket for a datagram just before a was connected and queue it there
// just after its reader last looked.
// The zero key names nothing: that is AddUDP.
func (f *Forwarder) AddUDPPeer(key UDPKey, a, b int, early ...[]byte) error {
	if err := f.addUDP(a, b, early, key); err != nil {
		closeFd(a)
		if b != a {
			closeFd(b)
		}
		f.refused(limit.UDP, err)
		return err
	}
	return nil
}

// LateUDP sends datagrams that reached a listening socket after the
// flow named key (AddUDPPeer) had its own socket on that flow's other side,
// after what the flow holds for it; there is no other way to keep them on
// the flow's source port. Their order relative to what the flow's own
// socket received meanwhile is lost, as it was lost in the kernel. They are
// counted as dropped when no such flow is open (any more). Safe from any
// goroutine; calls after AddUDPPeer from the same goroutine are ordered
// after it. The forwarder keeps data.
func (f *Forwarder) LateUDP(key UDPKey, data ...[]byte) error {
	if len(data) == 0 {
		return nil
	}
	return f.enqueue(pendingAdd{kind: kindUDPLate, fd: [2]int{-1, -1}, key: key, data: data})
}

// udpLate is LateUDP on the loop.
func (f *Forwarder) udpLate(p *pendingAdd) {
	s, ok := f.keyed[p.key]
	if !ok || !f.udp.Items[s].active {
		f.ctr.udpDrops.Add(uint64(len(p.data)))
		return
	}
	for _, d := range p.data {
		f.udpSendOther(int(s), d)
	}
}

func (f *Forwarder) addUDP(a, b int, early [][]byte, key UDPKey) error {
	if err := f.admitUDP(a, b); err != nil {
		return err
	}
	if err := f.enqueue(pendingAdd{kind: kindUDP, fd: [2]int{a, b}, data: early, key: key}); err != nil {
		f.reservedUDP.Add(-1)
		return err
	}
	return nil
}

// openUDP is AddUDP on the loop itself (a listener's new peer): the flow
// starts at once and its slot is returned.
func (f *Forwarder) openUDP(a, b int) (int, error) {
	if err := f.admitUDP(a, b); err != nil {
		closeFd(a)
		closeFd(b)
		return -1, err
	}
	slot := f.startUDP(&pendingAdd{kind: kindUDP, fd: [2]int{a, b}})
	if slot < 0 {
		return -1, &SocketError{Op: "epoll_ctl", Fd: a, Err: unix.EINVAL}
	}
	return slot, nil
}

// admitUDP checks and prepares the two sockets of a flow and takes its
// slot in the bounded table.
func (f *Forwarder) admitUDP(a, b int) error {
	if a < 0 || b < 0 || a == b {
		return &SocketError{Op: "add", Fd: b, Err: unix.EBADF}
	}
	for _, fd := range [2]int{a, b} {
		typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
		if err != nil {
			return &SocketError{Op: "SO_TYPE", Fd: fd, Err: err}
		}
		if typ != unix.SOCK_DGRAM {
			return &SocketError{Op: "check type", Fd: fd, Err: unix.EPROTOTYPE}
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			return &SocketError{Op: "O_NONBLOCK", Fd: fd, Err: err}
		}
	}
	if n := f.reservedUDP.Add(1); n > int64(f.opts.MaxUDP) {
		f.reservedUDP.Add(-1)
		return &LimitError{What: "udp flows", Limit: f.opts.MaxUDP}
	}
	return nil
}

// startUDP registers a flow and returns its slot, or -1 when it could not
// (the flow is closed then).
func (f *Forwarder) startUDP(p *pendingAdd) int {
	if f.udpBatch == nil {
		f.udpBatch = newMmsgBatch(f.opts.UDPBatch)
	}
	s32, old := f.udp.Take()
	slot := int(s32)
	u := &f.udp.Items[slot]
	gen := nextGen(old.gen)
	*u = udpFlow{fd: p.fd, gen: gen, active: true, last: f.now}
	u.pend[1] = p.data
	if len(p.data) > 0 {
		u.seen[0] = 1
	}
	if p.key.named() {
		if f.keyed == nil {
			f.keyed = map[UDPKey]int32{}
		}
		if old, ok := f.keyed[p.key]; ok && f.udp.Items[old].active {
			// A second flow under one name: the caller made two sockets
			// for one peer. The older one keeps its own socket's datagrams
			// but no longer takes late ones.
			f.udp.Items[old].key = UDPKey{}
		}
		u.key = p.key
		f.keyed[p.key] = s32
	}
	f.ctr.udpActive.Add(1)
	f.ctr.udpTotal.Add(1)
	for side := 0; side < 2; side++ {
		ev := tag(kindUDP, side, slot, gen)
		ev.Events = u.wants(side)
		if err := f.epollAdd(u.fd[side], &ev); err != nil {
			f.log.Debug("splice: epoll_ctl add udp socket", "fd", u.fd[side], "err", err)
			f.udpClose(slot)
			f.refused(limit.UDP, err)
			return -1
		}
		u.armed[side] = ev.Events
	}
	f.armTimer()
	if len(u.pend[1]) > 0 {
		f.udpFlush(slot, 1)
	}
	return slot
}

// wants is the epoll events fd[side] needs: readable unless what it reads
// would go to a socket with a backlog, writable while it has one.
func (u *udpFlow) wants(side int) uint32 {
	var ev uint32
	if len(u.pend[1-side]) == 0 {
		ev |= unix.EPOLLIN
	}
	if len(u.pend[side]) > 0 {
		ev |= unix.EPOLLOUT
	}
	return ev
}

// udpArm brings both sockets' epoll registrations in line with the
// backlogs.
func (f *Forwarder) udpArm(slot int) {
	u := &f.udp.Items[slot]
	for side := 0; side < 2; side++ {
		want := u.wants(side)
		if want == u.armed[side] {
			continue
		}
		ev := tag(kindUDP, side, slot, u.gen)
		ev.Events = want
		if err := sock.EpollCtl(f.epfd, unix.EPOLL_CTL_MOD, u.fd[side], &ev); err != nil {
			f.log.Warn("splice: epoll_ctl mod udp socket", "fd", u.fd[side], "err", err)
			continue
		}
		u.armed[side] = want
	}
}

// udpHold appends a copy of data to the backlog of fd[side]. The copy is
// the slow path's only allocation: a send buffer was full.
func (f *Forwarder) udpHold(slot, side int, data []byte) {
	u := &f.udp.Items[slot]
	u.pend[side] = append(u.pend[side], append([]byte(nil), data...))
	f.ctr.udpHeld.Add(1)
}

// udpFlush sends fd[side]'s backlog until it is empty or the socket is full
// again, then re-arms the flow.
func (f *Forwarder) udpFlush(slot, side int) {
	u := &f.udp.Items[slot]
	q := u.pend[side]
	sent, failed := 0, false
	for sent < len(q) {
		err := send(u.fd[side], q[sent])
		switch {
		case err == nil:
			f.ctr.udpDatagrams.Add(1)
			f.ctr.udpBytes.Add(uint64(len(q[sent])))
		case err == unix.EAGAIN:
			u.pend[side] = q[sent:]
			f.udpArm(slot)
			return
		case !failed:
			// Most likely an earlier datagram's ICMP error, which the
			// failed call reported and cleared: try this one again.
			failed = true
			continue
		default:
			f.ctr.udpDrops.Add(1)
		}
		q[sent] = nil
		sent++
		failed = false
	}
	u.pend[side] = nil
	f.udpArm(slot)
}

func (f *Forwarder) udpEvent(slot, side int, events uint32) {
	u := &f.udp.Items[slot]
	if events&unix.EPOLLERR != 0 {
		// An ICMP error (port unreachable) on a connected socket: consume
		// it so level-triggered epoll stops reporting it; the flow lives on
		// until its timeout, as the peer may come up.
		_, _ = unix.GetsockoptInt(u.fd[side], unix.SOL_SOCKET, unix.SO_ERROR)
	}
	if events&unix.EPOLLOUT != 0 && len(u.pend[side]) > 0 {
		f.udpFlush(slot, side)
	}
	// Readable, and the other side takes datagrams (this event may
	// predate a backlog that began earlier in the cycle).
	if events&unix.EPOLLIN == 0 || len(u.pend[1-side]) > 0 {
		return
	}
	b := f.udpBatch
	src, dst := u.fd[side], u.fd[1-side]
	for round := 0; round < udpRounds; round++ {
		want := sock.Burst(len(b.msgs), int(u.lastLen[side]))
		for i := range want {
			b.iovs[i].SetLen(udpBufSize)
			b.msgs[i].Len = 0
		}
		n, err := sock.Mmsg(unix.SYS_RECVMMSG, src, b.msgs[:want], unix.MSG_DONTWAIT)
		if err != nil || n == 0 {
			// EAGAIN: drained. ECONNREFUSED: a pending ICMP error, now
			// consumed; level triggering brings us back if data waits.
			return
		}
		u.seen[side] = min(u.seen[side]+1, 2)
		u.last = f.now
		last := uint32(0)
		for i := 0; i < n; i++ {
			b.iovs[i].SetLen(int(b.msgs[i].Len))
			last = max(last, b.msgs[i].Len)
		}
		u.lastLen[side] = last
		done, failed := 0, false // datagrams sent on, or dropped
		m := b.send.Fill(b.iovs[:n], !u.noGSO[1-side])
		for sent := 0; sent < m; {
			k, err := sock.Mmsg(unix.SYS_SENDMMSG, dst, b.send.Msgs[sent:m], unix.MSG_DONTWAIT)
			switch {
			case err == nil && k > 0:
				d, bytes := sock.Datagrams(b.send.Msgs[sent:sent+k]), uint64(0)
				for i := done; i < done+d; i++ {
					bytes += uint64(b.msgs[i].Len)
				}
				f.ctr.udpBytes.Add(bytes)
				f.ctr.udpDatagrams.Add(uint64(d))
				done += d
				sent += k
				failed = false
				continue
			case sock.GSORefused(&b.send.Msgs[sent], err):
				// Nothing of the refused message went out: it and
				// the rest go again, one datagram per message.
				u.noGSO[1-side] = true
				m, sent = b.send.Fill(b.iovs[done:n], false), 0
				continue
			case err == unix.EAGAIN || err == nil:
				// dst's send buffer is full: keep the rest, in order,
				// and read no more from src until dst takes it.
				for i := done; i < n; i++ {
					f.udpHold(slot, 1-side, b.bufs[i][:b.msgs[i].Len])
				}
				f.udpArm(slot)
				return
			case !failed:
				// Most likely an ICMP error an earlier datagram caused,
				// reported and cleared by this call: try again.
				failed = true
			default:
				// The kernel refuses this message itself.
				d := int(b.send.Msgs[sent].Hdr.Iovlen)
				f.ctr.udpDrops.Add(uint64(d))
				done += d
				sent++
				failed = false
			}
		}
		if n < want {
			return
		}
	}
}

func (f *Forwarder) udpClose(slot int) {
	u := &f.udp.Items[slot]
	f.forgetFlow(u)
	if u.key.named() {
		delete(f.keyed, u.key)
		u.key = UDPKey{}
	}
	f.ctr.udpDrops.Add(uint64(len(u.pend[0]) + len(u.pend[1])))
	u.pend = [2][][]byte{}
	for side := 0; side < 2; side++ {
		_ = sock.EpollCtl(f.epfd, unix.EPOLL_CTL_DEL, u.fd[side], nil)
		sock.Close(u.fd[side])
		u.fd[side] = -1
	}
	if !f.reserve.Held() {
		f.reserve.Renew() // descriptors were just freed
	}
	u.active = false
	f.udp.Release(int32(slot))
	f.ctr.udpActive.Add(^uint64(0))
	f.reservedUDP.Add(-1)
}
