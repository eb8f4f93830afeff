package splice

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpFlow forwards datagrams between two connected UDP sockets, one per
// namespace. Sockets are level-triggered: a flow may stop after udpRounds
// batches and be called again, without bookkeeping.
type udpFlow struct {
	fd     [2]int
	seen   [2]bool // datagrams came from this side; both means replied
	gen    uint32
	active bool
	last   int64
	// A flow a UDP listener made: the listener's slot + 1 and
	// generation, and the peer it is for (listen.go).
	lis  int32
	lgen uint32
	peer netip.AddrPort
}

// mmsgBatch is the loop's one set of datagram buffers, shared by all flows
// because the loop handles one flow at a time.
type mmsgBatch struct {
	msgs []unix.Mmsghdr
	iovs []unix.Iovec
	bufs [][]byte
}

const udpBufSize = 65536 // the largest datagram loopback carries

func newMmsgBatch(n int) *mmsgBatch {
	b := &mmsgBatch{
		msgs: make([]unix.Mmsghdr, n),
		iovs: make([]unix.Iovec, n),
		bufs: make([][]byte, n),
	}
	mem := make([]byte, n*udpBufSize)
	for i := range n {
		b.bufs[i] = mem[i*udpBufSize : (i+1)*udpBufSize]
		b.iovs[i].Base = &b.bufs[i][0]
		b.msgs[i].Hdr.Iov = &b.iovs[i]
		b.msgs[i].Hdr.SetIovlen(1)
	}
	return b
}

// AddUDP takes ownership of two connected UDP sockets, one per namespace,
// and forwards datagrams both ways until the flow times out (Options
// UDPTimeout, UDPReplyTimeout) or the Forwarder closes. On error both
// sockets are closed. A datagram the caller already read (the one that
// created the flow on an unconnected listening socket) is the caller's to
// send on b before or after handing the pair over.
func (f *Forwarder) AddUDP(a, b int) error {
	if err := f.addUDP(a, b); err != nil {
		closeFd(a)
		if b != a {
			closeFd(b)
		}
		return err
	}
	return nil
}

func (f *Forwarder) addUDP(a, b int) error {
	if err := f.admitUDP(a, b); err != nil {
		return err
	}
	if err := f.enqueue(pendingAdd{kind: kindUDP, fd: [2]int{a, b}}); err != nil {
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
	var slot int
	if n := len(f.udpFree); n > 0 {
		slot = f.udpFree[n-1]
		f.udpFree = f.udpFree[:n-1]
	} else {
		slot = len(f.udp)
		f.udp = append(f.udp, udpFlow{})
	}
	u := &f.udp[slot]
	gen := nextGen(u.gen)
	*u = udpFlow{fd: p.fd, gen: gen, active: true, last: f.now}
	f.ctr.udpActive.Add(1)
	f.ctr.udpTotal.Add(1)
	for side := 0; side < 2; side++ {
		ev := tag(kindUDP, side, slot, gen)
		ev.Events = unix.EPOLLIN
		if err := unix.EpollCtl(f.epfd, unix.EPOLL_CTL_ADD, u.fd[side], &ev); err != nil {
			f.log.Warn("splice: epoll_ctl add udp socket", "fd", u.fd[side], "err", err)
			f.udpClose(slot)
			return -1
		}
	}
	f.armTimer()
	return slot
}

func (f *Forwarder) udpEvent(slot, side int, events uint32) {
	u := &f.udp[slot]
	if events&unix.EPOLLERR != 0 {
		// An ICMP error (port unreachable) on a connected socket: consume
		// it so level-triggered epoll stops reporting it; the flow lives on
		// until its timeout, as the peer may come up.
		_, _ = unix.GetsockoptInt(u.fd[side], unix.SOL_SOCKET, unix.SO_ERROR)
	}
	if events&unix.EPOLLIN == 0 {
		return
	}
	b := f.udpBatch
	src, dst := u.fd[side], u.fd[1-side]
	for round := 0; round < udpRounds; round++ {
		for i := range b.msgs {
			b.iovs[i].SetLen(udpBufSize)
			b.msgs[i].Len = 0
		}
		n, err := mmsg(unix.SYS_RECVMMSG, src, b.msgs, unix.MSG_DONTWAIT)
		if err != nil || n == 0 {
			// EAGAIN: drained. ECONNREFUSED: a pending ICMP error, now
			// consumed; level triggering brings us back if data waits.
			return
		}
		u.seen[side] = true
		u.last = f.now
		var bytes uint64
		for i := 0; i < n; i++ {
			b.iovs[i].SetLen(int(b.msgs[i].Len))
			bytes += uint64(b.msgs[i].Len)
		}
		sent := 0
		for sent < n {
			m, err := mmsg(unix.SYS_SENDMMSG, dst, b.msgs[sent:n], unix.MSG_DONTWAIT)
			if err != nil || m == 0 {
				// A full send buffer or a refused peer: UDP may drop, and
				// waiting would stall the other flows.
				f.ctr.udpDrops.Add(uint64(n - sent))
				break
			}
			sent += m
		}
		f.ctr.udpDatagrams.Add(uint64(sent))
		f.ctr.udpBytes.Add(bytes)
		if n < len(b.msgs) {
			return
		}
	}
}

// mmsg wraps recvmmsg/sendmmsg, which x/sys/unix does not: one syscall,
// no allocation.
func mmsg(trap uintptr, fd int, msgs []unix.Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	r, _, e := unix.Syscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func (f *Forwarder) udpClose(slot int) {
	u := &f.udp[slot]
	f.forgetFlow(u)
	for side := 0; side < 2; side++ {
		_ = unix.EpollCtl(f.epfd, unix.EPOLL_CTL_DEL, u.fd[side], nil)
		unix.Close(u.fd[side])
		u.fd[side] = -1
	}
	u.active = false
	f.udpFree = append(f.udpFree, slot)
	f.ctr.udpActive.Add(^uint64(0))
	f.reservedUDP.Add(-1)
}
