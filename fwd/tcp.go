package fwd

import (
	"errors"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/seqnum"
	"github.com/gopasta/gopasta/internal/sock"
)

// TCP translation without a TCP stack and without user-space buffers, as
// pasta translates it. The host socket's kernel buffers
// are the only buffers:
//
//   - Host to namespace: data is read with MSG_PEEK from the offset the
//     namespace has not acknowledged yet (SO_PEEK_OFF keeps that offset in
//     the kernel), straight into frame buffers behind room for the headers,
//     and limited by the namespace's window. Only when the namespace
//     acknowledges bytes are they removed from the socket (MSG_TRUNC), so a
//     retransmission is a rewind of the peek offset. The ACKs of one batch
//     of frames are removed together and answered by one peek.
//   - Namespace to host: the in-order payload of a cycle's segments goes
//     out in one sendmsg; what the socket took is acknowledged, and the
//     window offered to the namespace is the socket's free send space, so
//     back-pressure reaches the namespace's sender. A socket whose peer is
//     on this host gets reno for congestion control once the namespace has
//     sent it sock.RenoAfter bytes (sock.LocalReno says why).
//
// Loss recovery is where pasta stalls: it offers no SACK and drops
// out-of-order segments, so after a loss it recovers one segment per
// retransmission timeout.
// Here every out-of-order segment from the namespace is answered at once
// with a duplicate ACK, so the namespace's stack fast-retransmits instead of
// waiting for its retransmission timer; duplicate ACKs from the namespace
// trigger our own fast retransmit; and the retransmission timer starts at
// 200 ms, not 1 s, since the link's round trip is microseconds.
//
// Sockets are registered edge-triggered once and never modified: an edge
// comes with new data, with free send space after a short write, with
// connect's outcome, and with errors. Work that an edge did not finish
// (window full) is resumed by the namespace's next ACK.
//
// Handshakes toward the namespace are timed as the host's kernel times its
// own (Timeouts: tcp_syn_retries, tcp_syn_linear_timeouts,
// tcp_synack_retries, tcp_rto_max_ms), so a forwarded connection into a
// namespace that does not answer gives up when the host's own connect()
// would.
//
// Keepalives: the host kernel answers its peer's keepalive probes itself,
// unseen, and the namespace's kernel answers ours, so neither side's
// probes can be passed on as segments. A probe from the namespace turns
// keepalives on for the host socket instead (keepaliveFromNS), and a
// connection the namespace has been silent on for tcpKeepaliveIdle gets a
// probe of ours (keepaliveToNS), which a namespace that forgot the
// connection answers with a reset.

const (
	tcpWindowScale = 7 // our window scale toward the namespace: up to 8 MiB
	tcpMaxWindow   = 65535 << tcpWindowScale
	tcpRTOInitial  = 200 * int64(1e6)
	tcpRTOMax      = 10 * int64(1e9) // data; the host's tcp_rto_max_ms may be lower
	tcpMaxRetries  = 10
	tcpSynTimeout  = 10 * int64(1e9) // host connect() for the namespace's SYN not done yet: drop the attempt
	tcpIdleTimeout = 7200 * int64(1e9)
	tcpDupAcks     = 3
	tcpSegBatch    = txFrames // segments per peek
	tcpOptsSYN     = 8        // MSS (4) + NOP + window scale (3)
	tcpWndPollMin  = int64(1e6)
	tcpWndPollMax  = 5 * int64(1e6)
	// tcpKeepaliveIdle: after this long without a segment from the
	// namespace on a connection with nothing in flight (to the next whole
	// second, keepaliveAt), we probe it (pasta probes after 30 to 60 s).
	tcpKeepaliveIdle = 30 * int64(1e9)
	// tcpMaxKeepIdle is the kernel's bound on TCP_KEEPIDLE, in seconds
	// (MAX_TCP_KEEPIDLE).
	tcpMaxKeepIdle = 32767
)

// Connection states. Beyond these, flags record the FIN exchange both ways.
const (
	tcpConnecting  uint8 = iota + 1 // SYN from the namespace, host connect() under way
	tcpSynAckSent                   // host connected, SYN-ACK sent, waiting for the ACK
	tcpEstablished                  // both sides up
	tcpSynSent                      // a host connection: our SYN sent to the namespace
)

const (
	tcpFinFromNS   uint16 = 1 << iota // the namespace's FIN was received and passed on (shutdown)
	tcpFinToNS                        // host EOF reached; our FIN sent to the namespace
	tcpFinAcked                       // the namespace acknowledged our FIN
	tcpWndClosed                      // we offered a zero/short window; update it on EPOLLOUT
	tcpAckPending                     // an ACK must go to the namespace at the end of frames()
	tcpDupPending                     // an out-of-order segment: send the ACK now, as a dup ACK
	tcpHostHup                        // the host socket reported EPOLLRDHUP: its peer sent FIN
	tcpFinSent                        // seqMax-1 is our FIN (kept across rewinds, unlike tcpFinToNS)
	tcpRecovering                     // after a rewind, until the namespace ACKs up to recover
	tcpPushPending                    // the namespace's ACKs of this batch opened room: push at its end
	tcpKeepalive                      // the namespace probed: the host socket has keepalives on
)

// tcpConn is the per-flow TCP state, indexed like the flow table.
type tcpConn struct {
	state            uint8
	wsFromNS         uint8 // the namespace's window scale
	dupAcks          uint8
	retries          uint8
	flags            uint16
	mss              uint16 // payload per segment toward the namespace
	isn              seqnum.Value
	seqToNS          seqnum.Value // next sequence number we send (snd.nxt)
	seqAckedByNS     seqnum.Value // the namespace's cumulative ACK (snd.una)
	seqMax           seqnum.Value // highest seqToNS ever sent (a rewind moves seqToNS back)
	seqFromNS        seqnum.Value // next sequence number expected (rcv.nxt)
	wndFromNS        uint32       // the namespace's receive window, in bytes
	wndToNS          uint32       // the window we last offered
	rtoAt, rto, idle int64
	wndAt, wndPoll   int64 // next check of a closed window, and its interval
	// kaAt: when the namespace's silence calls for our keepalive probe
	// (0: not established); lastToNS: when we last sent it a segment
	// other than such a probe, which is what its own keepalive timer
	// counts from.
	kaAt, lastToNS int64
	// unconsumed counts bytes the namespace acknowledged that are still at
	// the head of the host socket's receive queue: a batch's ACKs are
	// consumed with one discard at its end (see consume).
	unconsumed uint32
	// toHost counts the bytes the host socket took, up to
	// sock.RenoAfter, when a peer on this host gets reno.
	toHost sock.RenoCount
	// recover is seqMax when we last rewound (RFC 6582's recovery point):
	// duplicate ACKs below it are echoes of that loss, not a new one.
	recover seqnum.Value
	// wl1, wl2: the sequence and acknowledgement numbers of the segment
	// wndFromNS came from (RFC 9293's SND.WL1, SND.WL2).
	wl1, wl2 seqnum.Value
}

// tcpTr is the TCP translator.
type tcpTr struct {
	conns []tcpConn
	isn   *seqnum.ISNGenerator
	// Two iovec arrays: frames() gathers a batch's payload in sendIov
	// while the ACKs in that batch can make pushToNS peek into peekIov;
	// sharing one array sent peeked host data back to the host.
	sendIov []unix.Iovec
	peekIov []unix.Iovec
	// peekOff says, per family (index 1 for IPv6), whether the kernel
	// supports SO_PEEK_OFF on TCP sockets: IPv4 since Linux 6.10, IPv6
	// only since 6.12 (added by a later fix), so 6.10 and 6.11 as
	// released have it for one family and not the other.
	peekOff [2]peekCap
	scratch []byte // without SO_PEEK_OFF: where already-sent bytes are peeked to
	// From the host's Timeouts: how many times our SYN (linear of them 1 s
	// apart) and our SYN-ACK are sent again, the bound on a handshake's
	// retransmission interval, and on a data one (also ours, tcpRTOMax).
	synRetries, synLinear, synAckRetries int
	rtoMax, dataRTOMax                   int64
}

// peekCap is what a family's first socket found out about SO_PEEK_OFF.
type peekCap uint8

const (
	peekUnprobed peekCap = iota
	peekSupported
	peekUnsupported
)

// peekCapOf is what is known of SO_PEEK_OFF for f's host socket, by the
// socket's family, which is its host address's: hostSocket opens it by
// that address, and an accepted socket's listener is IPv6-only.
func (t *tcpTr) peekCapOf(f *Flow) *peekCap {
	if f.HostAddr().Is6() {
		return &t.peekOff[1]
	}
	return &t.peekOff[0]
}

// hasPeekOff reports whether f's host socket peeks from an offset the
// kernel keeps.
func (t *tcpTr) hasPeekOff(f *Flow) bool { return *t.peekCapOf(f) == peekSupported }

func newTCPTranslator(e *Engine) translator {
	return &tcpTr{
		conns:         make([]tcpConn, e.FlowCapacity()),
		isn:           seqnum.NewISNGenerator(),
		sendIov:       make([]unix.Iovec, rxBatch),
		peekIov:       make([]unix.Iovec, tcpSegBatch+1),
		synRetries:    e.to.SynRetries + e.to.SynLinear,
		synLinear:     e.to.SynLinear,
		synAckRetries: e.to.SynAckRetries,
		rtoMax:        int64(e.to.RTOMax),
		dataRTOMax:    min(tcpRTOMax, int64(e.to.RTOMax)),
	}
}

func (t *tcpTr) conn(idx int32) *tcpConn { return &t.conns[idx] }

// tcpChecksumOK verifies a segment from the namespace.
func tcpChecksumOK(p *packet) bool {
	if p.csumDone {
		return true
	}
	l4 := p.l4data()
	var ps uint16
	if p.v6 {
		ip := header.IPv6(p.frame[p.l3:])
		ps = header.PseudoHeaderChecksum(header.ProtocolTCP, ip.SrcSlice(), ip.DstSlice(), uint32(len(l4)))
	} else {
		ip := header.IPv4(p.frame[p.l3:])
		ps = header.PseudoHeaderChecksum(header.ProtocolTCP, ip.SrcSlice(), ip.DstSlice(), uint32(len(l4)))
	}
	return header.Checksum(l4, ps) == 0xffff
}

// validSegment checks what the dispatcher did not: header length, checksum
// and flag combinations no real stack sends.
func validSegment(p *packet) (header.TCP, bool) {
	th := header.TCP(p.l4data())
	if !th.IsValid() {
		return nil, false
	}
	fl := th.Flags()
	if fl&header.TCPFlagSYN != 0 && fl&(header.TCPFlagFIN|header.TCPFlagRST) != 0 {
		return nil, false
	}
	if fl&(header.TCPFlagSYN|header.TCPFlagACK|header.TCPFlagRST) == 0 {
		return nil, false // a segment must carry one of them
	}
	return th, tcpChecksumOK(p)
}

// checkedSegment is validSegment counting what it rejects.
func checkedSegment(e *Engine, p *packet) (header.TCP, bool) {
	th, ok := validSegment(p)
	switch {
	case ok:
	case th == nil:
		e.drop(DropBadTransport)
	default:
		e.drop(DropBadChecksum)
	}
	return th, ok
}

// open starts a flow for a SYN from the namespace: a non-blocking connect()
// to the destination (after NAT); the SYN-ACK waits for its outcome.
// Anything else without a flow gets a reset, so that a namespace stack
// holding a connection we no longer know gives up at once.
func (t *tcpTr) open(e *Engine, p *packet) int32 {
	th, ok := checkedSegment(e, p)
	if !ok {
		return -1
	}
	fl := th.Flags()
	if fl&header.TCPFlagRST != 0 {
		e.drop(DropNoFlow)
		return -1
	}
	if fl&(header.TCPFlagSYN|header.TCPFlagACK) != header.TCPFlagSYN {
		e.drop(DropNoFlow)
		t.resetFor(e, p, th)
		return -1
	}
	hostDst := e.nat.FromTap(p.dst, p.dport, true)
	evicted := e.ctr.evicted.Load()
	idx, err := e.openFlow(p, protoTCP, hostDst, hostSock{typ: unix.SOCK_STREAM, tcp: t})
	if idx < 0 {
		if err != nil && e.debug {
			e.log.Debug("tcp: no host socket", "dst", hostDst, "port", p.dport, "err", err)
		}
		if !descriptorsExhausted(err) || e.ctr.evicted.Load() == evicted {
			// Refused, as a kernel refuses a port nobody listens on.
			// Out of descriptors with a datagram flow evicted to make
			// room (evict.go) is for a moment: no answer then, and
			// the namespace's stack sends its SYN again, which finds
			// the descriptor free.
			e.refused(protoTCP, err)
			t.resetFor(e, p, th)
		}
		return -1
	}
	f := e.flow(idx)

	c := t.conn(idx)
	*c = tcpConn{state: tcpConnecting, rto: tcpRTOInitial}
	c.seqFromNS = seqnum.Value(th.Seq()).Add(1)
	c.wndFromNS = uint32(th.Window()) // a SYN's window is never scaled
	var o header.TCPOptions
	header.ParseTCPOptions(th.Options(), &o)
	c.mss = t.segmentSize(e, f.v6, o.MSS)
	if o.WS >= 0 {
		c.wsFromNS = uint8(o.WS)
	} else {
		c.wsFromNS = 255 // no scaling either way (RFC 7323 section 2.2)
	}
	c.idle = e.now + tcpIdleTimeout
	f.Deadline = e.now + tcpSynTimeout
	return idx
}

// segmentSize is the payload per segment toward the namespace: what its
// SYN announced, within our MTU.
func (t *tcpTr) segmentSize(e *Engine, v6 bool, mss uint16) uint16 {
	hdr := header.IPv4MinimumSize + header.TCPMinimumSize
	def := uint16(536)
	if v6 {
		hdr = header.IPv6MinimumSize + header.TCPMinimumSize
		def = 1220
	}
	limit := uint16(e.mtu - hdr)
	if mss == 0 {
		mss = def
	}
	return min(mss, limit)
}

// usePeekOff enables SO_PEEK_OFF on fd, f's new host socket (f.HostAddr()
// set). The family's first socket, whichever side opened it, probes for
// it; without it, peeks start at the head every time (scratch takes what
// is in flight).
func (t *tcpTr) usePeekOff(e *Engine, fd int, f *Flow) error {
	pc := t.peekCapOf(f)
	switch *pc {
	case peekUnprobed:
		*pc = peekSupported
		if e.sys.setsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, 0) != nil {
			*pc = peekUnsupported
			if t.scratch == nil {
				t.scratch = make([]byte, tcpMaxWindow)
			}
		}
	case peekSupported:
		return e.sys.setsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, 0)
	}
	return nil
}

// frames handles this cycle's segments of one flow from the namespace.
func (t *tcpTr) frames(e *Engine, idx int32, pkts []*packet) {
	c := t.conn(idx)
	f := e.flow(idx)
	n := 0 // iovecs of in-order payload queued for the host socket
	want := c.seqFromNS
	finAt := -1 // position in pkts of an in-order FIN
	for i, p := range pkts {
		th, ok := checkedSegment(e, p)
		if !ok {
			continue
		}
		fl := th.Flags()
		seq := seqnum.Value(th.Seq())
		if fl&header.TCPFlagRST != 0 {
			if t.resetFromNS(e, idx, th, want) {
				return
			}
			continue
		}
		if c.state == tcpEstablished && !seq.InWindow(c.seqFromNS-tcpMaxWindow, 2*tcpMaxWindow) {
			// Further from what we expect than any window we ever
			// offered, ahead or behind: no stack sends that for this
			// connection. Neither its ACK nor its window counts; the
			// answer is our ACK (RFC 9293 3.10.7.4, first check).
			e.drop(DropUnacceptable)
			c.flags |= tcpAckPending
			continue
		}
		if c.state == tcpSynSent {
			if fl&(header.TCPFlagSYN|header.TCPFlagACK) == header.TCPFlagSYN|header.TCPFlagACK {
				t.synAck(e, idx, th)
			}
			continue
		}
		if fl&header.TCPFlagSYN != 0 {
			// A retransmitted SYN: our SYN-ACK was lost, or we have
			// not sent it yet.
			if c.state == tcpSynAckSent {
				t.sendSynAck(e, idx)
			}
			continue
		}
		if c.state == tcpConnecting {
			continue // nothing but SYNs before our SYN-ACK
		}
		if fl&header.TCPFlagACK != 0 {
			if c.state != tcpSynAckSent && c.seqMax.LessThan(seqnum.Value(th.Ack())) {
				// An ACK of data we never sent: answer with our ACK
				// and drop the segment, payload and all (RFC 9293
				// 3.10.7.4, fifth check).
				e.drop(DropUnacceptable)
				c.flags |= tcpAckPending
				continue
			}
			if c.state == tcpSynAckSent && th.Ack() != uint32(c.isn.Add(1)) {
				// Not an answer to our SYN-ACK: refuse it, and its
				// payload with it (RFC 9293 3.10.7.4).
				t.resetSeg(e, idx, seqnum.Value(th.Ack()))
				continue
			}
			if !t.ack(e, idx, th) {
				return // closed
			}
		}
		pay := th.Payload()
		fin := fl&header.TCPFlagFIN != 0
		end := seq.Add(uint32(len(pay)))
		switch {
		case seq.LessThanEq(want) && want.LessThan(end):
			pay = pay[want-seq:] // in order, or partly seen before: keep the new part
		case seq == want && len(pay) == 0:
			// A pure ACK, or a FIN right where we are.
		case want.LessThan(seq):
			// A gap: something was lost on the way to us. Tell the
			// namespace at once, so it retransmits after three.
			c.flags |= tcpDupPending
			continue
		default:
			// Old news (a retransmission, a FIN we passed on already, a
			// zero-window or keepalive probe): re-ACK, in case our ACK
			// was what got lost and so the prober learns our window.
			if isKeepalive(c, seq, len(pay), fin) {
				t.keepaliveFromNS(e, idx)
			}
			c.flags |= tcpAckPending
			continue
		}
		if len(pay) > 0 {
			if c.flags&tcpFinFromNS != 0 || n == len(t.sendIov) {
				// Data after a FIN is invalid; a full batch waits
				// for the retransmission.
				continue
			}
			t.sendIov[n].Base = &pay[0]
			t.sendIov[n].SetLen(len(pay))
			n++
			want = want.Add(uint32(len(pay)))
		}
		if fin && c.flags&tcpFinFromNS == 0 {
			finAt = i
		}
	}

	// The batch's ACKs leave the host socket in one discard, and what
	// they opened is filled by one push: a discard per ACK made the host
	// socket announce its reopened window once per ACK, and the host
	// sender answered each from this thread's CPU.
	if !t.consume(e, idx) {
		return
	}
	if c.flags&tcpPushPending != 0 {
		c.flags &^= tcpPushPending
		t.pushToNS(e, idx)
		if e.flow(idx).state != flowActive {
			return
		}
	}
	if n > 0 {
		sent, err := e.sys.sendmsgIov(f.Fd, t.sendIov[:n])
		switch {
		case err == nil:
			c.seqFromNS = c.seqFromNS.Add(uint32(sent))
			if c.toHost.Add(sent) {
				e.sys.localReno(f.Fd, f.HostAddr())
			}
			if c.seqFromNS != want {
				// The send buffer filled up: what did not fit is not
				// acknowledged and comes again; EPOLLOUT reopens.
				c.flags |= tcpWndClosed
				finAt = -1
			}
			c.flags |= tcpAckPending
		case errors.Is(err, unix.EAGAIN):
			c.flags |= tcpWndClosed | tcpAckPending
			finAt = -1
		default:
			t.reset(e, idx)
			return
		}
	}
	if finAt >= 0 && c.seqFromNS == want {
		// Everything before the FIN is with the host: pass it on.
		e.sys.shutdown(f.Fd, unix.SHUT_WR)
		c.seqFromNS = c.seqFromNS.Add(1)
		c.flags |= tcpFinFromNS | tcpAckPending
	}
	if c.flags&(tcpAckPending|tcpDupPending) != 0 {
		t.sendAck(e, idx)
	}
	c.idle = e.now + tcpIdleTimeout
	if c.kaAt != 0 {
		c.kaAt = keepaliveAt(e.now)
	}
	if t.done(c) {
		e.closeFlow(idx)
		return
	}
	t.setDeadline(e, idx)
}

// ack processes the acknowledgement and window of a segment from the
// namespace. It returns false when the flow was closed.
func (t *tcpTr) ack(e *Engine, idx int32, th header.TCP) bool {
	c := t.conn(idx)
	a := seqnum.Value(th.Ack())
	if c.state == tcpSynAckSent {
		if a != c.isn.Add(1) {
			t.resetSeg(e, idx, a)
			return true
		}
		c.state = tcpEstablished
		c.seqAckedByNS = a
		c.retries, c.rto, c.rtoAt = 0, tcpRTOInitial, 0
		c.kaAt = keepaliveAt(e.now)
		c.wndFromNS = t.scaleWindow(c, th.Window())
		c.wl1, c.wl2 = seqnum.Value(th.Seq()), a
		// Data the host sent meanwhile raised an edge we could not use.
		t.pushToNS(e, idx)
		return true
	}
	oldWnd := c.wndFromNS
	// The window counts from the newest segment only (RFC 9293
	// 3.10.7.4, SND.WL1 and SND.WL2): one that left the namespace
	// earlier, reordered or forged behind the others, must not shut or
	// widen it again.
	if seq := seqnum.Value(th.Seq()); c.seqAckedByNS.LessThanEq(a) &&
		(c.wl1.LessThan(seq) || c.wl1 == seq && c.wl2.LessThanEq(a)) {
		c.wndFromNS = t.scaleWindow(c, th.Window())
		c.wl1, c.wl2 = seq, a
	}
	switch {
	case c.seqAckedByNS.LessThan(a) && a.LessThanEq(c.seqMax):
		acked := c.seqAckedByNS.Size(a)
		if c.flags&tcpFinSent != 0 && a == c.seqMax {
			// The FIN's sequence number has no byte behind it. A rewind
			// may have cleared tcpFinToNS: the FIN still arrived.
			acked--
			c.flags |= tcpFinToNS | tcpFinAcked
		}
		c.unconsumed += acked
		if c.seqToNS.LessThan(a) || !t.hasPeekOff(e.flow(idx)) {
			// Skipping ahead needs the kernel's peek offset at 0, and
			// without a peek offset the peek skips what is in flight
			// from the head: both need the head at the ACK now.
			if !t.consume(e, idx) {
				return false
			}
		}
		if c.seqToNS.LessThan(a) {
			// After a rewind, the namespace had more than it said: skip
			// ahead. The discard moved the kernel's peek offset back
			// by as much as it removed, to 0 here.
			c.seqToNS = a
		}
		c.seqAckedByNS = a
		if c.flags&tcpRecovering != 0 && c.recover.LessThanEq(a) {
			c.flags &^= tcpRecovering
		}
		c.dupAcks, c.retries, c.rto = 0, 0, tcpRTOInitial
		c.rtoAt = 0
		if c.seqAckedByNS != c.seqToNS {
			c.rtoAt = e.now + c.rto
		}
		c.flags |= tcpPushPending
	case a == c.seqAckedByNS && c.seqAckedByNS != c.seqToNS &&
		len(th.Payload()) == 0 && th.Flags()&header.TCPFlagFIN == 0 && c.wndFromNS == oldWnd:
		if c.flags&tcpRecovering != 0 {
			// The resent data makes the namespace's stack ACK again
			// for every segment it already had: one loss, one rewind.
			break
		}
		c.dupAcks++
		if c.dupAcks == tcpDupAcks {
			t.rewind(e, idx)
		}
	case c.wndFromNS > oldWnd:
		c.flags |= tcpPushPending // a window update
	}
	return e.flow(idx).state == flowActive
}

// resetFromNS applies a reset from the namespace the way RFC 5961
// (section 3.2) has a stack apply one, so that a process in the namespace
// that can forge segments (a raw socket) but does not know a connection's
// sequence numbers cannot end it with a few hundred guesses: a reset at
// exactly the next sequence number expected (want: after this batch's
// in-order data) aborts the connection, and it reports true; one elsewhere
// in the window gets a challenge ACK, which a stack that really reset
// answers with a reset at the exact number; the rest are dropped. Before
// the namespace answered our SYN, a reset counts when it acknowledges the
// SYN (RFC 9293 3.10.7.3).
func (t *tcpTr) resetFromNS(e *Engine, idx int32, th header.TCP, want seqnum.Value) bool {
	c := t.conn(idx)
	seq := seqnum.Value(th.Seq())
	abort := seq == want
	if c.state == tcpSynSent {
		abort = th.Flags()&header.TCPFlagACK != 0 && th.Ack() == uint32(c.isn.Add(1))
	}
	switch {
	case abort:
		e.sys.abort(e.flow(idx).Fd)
		e.closeFlow(idx)
		return true
	case c.state == tcpEstablished && seq.InWindow(c.seqFromNS, max(c.wndToNS, 1)):
		c.flags |= tcpAckPending
	}
	e.drop(DropUnacceptable)
	return false
}

// consume removes what the namespace acknowledged from the head of the
// host socket's receive queue. It returns false when the flow was reset.
func (t *tcpTr) consume(e *Engine, idx int32) bool {
	c := t.conn(idx)
	if c.unconsumed == 0 {
		return true
	}
	n := c.unconsumed
	c.unconsumed = 0
	if _, err := e.sys.discard(e.flow(idx).Fd, int(n)); err != nil {
		t.reset(e, idx)
		return false
	}
	return true
}

func (t *tcpTr) scaleWindow(c *tcpConn, w uint16) uint32 {
	if c.wsFromNS == 255 {
		return uint32(w)
	}
	return uint32(w) << c.wsFromNS
}

// rewind goes back to the namespace's last acknowledgement and sends again
// from there (go-back-N: no SACK, and the link rarely loses more than a
// burst).
func (t *tcpTr) rewind(e *Engine, idx int32) {
	c := t.conn(idx)
	f := e.flow(idx)
	if !t.consume(e, idx) {
		return
	}
	if t.hasPeekOff(f) {
		e.sys.setsockoptInt(f.Fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, 0)
	}
	c.seqToNS = c.seqAckedByNS
	c.flags &^= tcpFinToNS | tcpFinAcked
	c.flags |= tcpRecovering
	c.recover = c.seqMax
	c.dupAcks = 0
	e.ctr.retransmits.Add(1)
	t.pushToNS(e, idx)
}

// pushToNS sends host data to the namespace while its window allows:
// peeks into frame buffers, then writes headers around what arrived.
func (t *tcpTr) pushToNS(e *Engine, idx int32) {
	c := t.conn(idx)
	f := e.flow(idx)
	if c.state != tcpEstablished || c.flags&tcpFinToNS != 0 {
		return
	}
	hdr := l4Offset(f.v6) + header.TCPMinimumSize
	mss := uint32(c.mss)
	peekOff := t.hasPeekOff(f)
	for {
		inflight := c.seqAckedByNS.Size(c.seqToNS)
		wnd := c.wndFromNS
		if !peekOff {
			// Without a peek offset, in-flight bytes are peeked again
			// into the scratch buffer: it bounds what can be in flight.
			wnd = min(wnd, uint32(len(t.scratch)))
		}
		if inflight >= wnd {
			if c.wndFromNS == 0 && inflight == 0 {
				// A zero window: if the namespace's update is lost,
				// only our probe gets it to say its window again.
				t.armRTO(e, idx)
			}
			return // the namespace's ACK resumes us
		}
		room := wnd - inflight
		nseg := int((room + mss - 1) / mss)
		bufs := e.txBufs(min(nseg, tcpSegBatch))
		iov := t.peekIov[:0]
		skip := 0
		if !peekOff && inflight > 0 {
			skip = int(inflight)
			v := unix.Iovec{Base: &t.scratch[0]}
			v.SetLen(skip)
			iov = append(iov, v)
		}
		want := uint32(0)
		chunk := t.chunk(e, f.v6, mss)
		for _, b := range bufs {
			l := min(chunk, room-want)
			v := unix.Iovec{Base: &b[hdr]}
			v.SetLen(int(l))
			iov = append(iov, v)
			want += l
			if want == room {
				break
			}
		}
		n, err := e.sys.recvmsgIov(f.Fd, iov, unix.MSG_PEEK)
		if err != nil {
			if !errors.Is(err, unix.EAGAIN) {
				t.reset(e, idx)
			}
			return
		}
		if n <= skip {
			// Nothing new. With a peek offset, 0 without EAGAIN is
			// the end of the stream; without one, the hang-up flag
			// tells an ended stream from one that is merely idle.
			if n == 0 && peekOff || c.flags&tcpHostHup != 0 && n == skip {
				t.hostEOF(e, idx)
			}
			return
		}
		got := uint32(n - skip)
		t.emit(e, idx, bufs, got)
		if got < want && c.flags&tcpHostHup == 0 {
			// Drained; the next edge brings more. After a hang-up,
			// go round once more: the peek that finds the end sends
			// our FIN now rather than after the namespace's ACK.
			return
		}
	}
}

// emit writes headers around got peeked bytes spread over bufs (mss each)
// and queues them.
func (t *tcpTr) emit(e *Engine, idx int32, bufs [][]byte, got uint32) {
	c := t.conn(idx)
	chunk := t.chunk(e, e.flow(idx).v6, uint32(c.mss))
	win := t.window(e, idx)
	for w := 0; got > 0; w++ {
		l := min(got, chunk)
		flags := header.TCPFlagACK
		if l == got {
			flags |= header.TCPFlagPSH
		}
		n := t.segmentWin(e, idx, bufs[w], flags, c.seqToNS, int(l), nil, win)
		t.commit(e, idx, n, l)
		c.seqToNS = c.seqToNS.Add(l)
		got -= l
	}
	if c.seqMax.LessThan(c.seqToNS) {
		c.seqMax = c.seqToNS
	}
	t.armRTO(e, idx)
}

// chunk is how much data goes into one frame: one segment, or with a
// virtio-net header as many whole segments as a 64 KiB GSO frame holds
// (the namespace's kernel takes such a frame like one GRO built).
func (t *tcpTr) chunk(e *Engine, v6 bool, mss uint32) uint32 {
	if e.vnet == 0 {
		return mss
	}
	ipMax := uint32(65535 - header.TCPMinimumSize) // IPv6: payload length
	if !v6 {
		ipMax -= header.IPv4MinimumSize // IPv4: total length
	}
	return max(ipMax/mss*mss, mss)
}

// commit queues a segment of n bytes carrying plen bytes of payload. With a
// virtio-net header its checksum was left partial (segmentWin), and a
// segment longer than the MSS is a GSO frame for the namespace's kernel.
func (t *tcpTr) commit(e *Engine, idx int32, n int, plen uint32) {
	if e.vnet == 0 {
		e.txCommit(n)
		return
	}
	c := t.conn(idx)
	v6 := e.flow(idx).v6
	m := header.VirtioNetHdrFields{
		Flags:      header.VirtioNetHdrFNeedsCsum,
		CsumStart:  uint16(l4Offset(v6)),
		CsumOffset: 16, // the TCP checksum field
	}
	if plen > uint32(c.mss) {
		m.GSOType = header.VirtioNetHdrGSOTCPv4
		if v6 {
			m.GSOType = header.VirtioNetHdrGSOTCPv6
		}
		m.GSOSize = c.mss
		m.HdrLen = uint16(l4Offset(v6) + header.TCPMinimumSize)
	}
	e.txCommitMeta(n, &m)
}

// armRTO starts the retransmission timer unless it runs already.
func (t *tcpTr) armRTO(e *Engine, idx int32) {
	c := t.conn(idx)
	if c.rtoAt == 0 {
		c.rtoAt = e.now + c.rto
		e.wakeAt(c.rtoAt)
		t.setDeadline(e, idx)
	}
}

// hostEOF: the host peer finished sending and we have passed everything on:
// send our FIN.
func (t *tcpTr) hostEOF(e *Engine, idx int32) {
	c := t.conn(idx)
	t.sendFlags(e, idx, header.TCPFlagFIN|header.TCPFlagACK, c.seqToNS)
	c.seqToNS = c.seqToNS.Add(1)
	if c.seqMax.LessThan(c.seqToNS) {
		c.seqMax = c.seqToNS
	}
	c.flags |= tcpFinToNS | tcpFinSent
	t.armRTO(e, idx)
}

// done reports whether both directions are finished.
func (t *tcpTr) done(c *tcpConn) bool {
	return c.flags&(tcpFinFromNS|tcpFinToNS|tcpFinAcked) == tcpFinFromNS|tcpFinToNS|tcpFinAcked
}

func (t *tcpTr) sockEvent(e *Engine, idx int32, events uint32) {
	c := t.conn(idx)
	f := e.flow(idx)
	if c.state == tcpConnecting {
		if events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
			return
		}
		soerr, err := e.sys.getsockoptInt(f.Fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil || soerr != 0 {
			// Refused or unreachable: the namespace sees a reset, as it
			// would from the real peer.
			t.sendFlags(e, idx, header.TCPFlagRST|header.TCPFlagACK, 0)
			e.closeFlow(idx)
			return
		}
		c.isn = t.isn.ISN(netip.AddrPortFrom(f.DstAddr(), f.DstPort), netip.AddrPortFrom(f.NSAddr(), f.NSPort), e.nowT)
		c.seqToNS, c.seqAckedByNS, c.seqMax = c.isn.Add(1), c.isn.Add(1), c.isn.Add(1)
		c.state = tcpSynAckSent
		t.sendSynAck(e, idx)
		c.rto = handshakeRTO(0, 0, t.rtoMax)
		c.rtoAt = e.now + c.rto
		e.wakeAt(c.rtoAt)
		t.setDeadline(e, idx)
		return
	}
	if events&unix.EPOLLERR != 0 {
		if soerr, _ := e.sys.getsockoptInt(f.Fd, unix.SOL_SOCKET, unix.SO_ERROR); soerr != 0 {
			t.reset(e, idx)
			return
		}
	}
	if events&unix.EPOLLOUT != 0 && c.flags&tcpWndClosed != 0 {
		// Send space again: offer it, so the namespace resends what
		// did not fit.
		c.flags &^= tcpWndClosed
		t.sendAck(e, idx)
	}
	if events&(unix.EPOLLRDHUP|unix.EPOLLHUP) != 0 {
		c.flags |= tcpHostHup
	}
	if events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP) != 0 {
		t.pushToNS(e, idx)
	}
	c.idle = e.now + tcpIdleTimeout
}

// timer runs on the flow's deadline: retransmission, a namespace that never
// completes the handshake, or inactivity.
func (t *tcpTr) timer(e *Engine, idx int32) {
	c := t.conn(idx)
	f := e.flow(idx)
	switch {
	case c.state == tcpConnecting:
		// The host's connect() got no answer in tcpSynTimeout: give up
		// this attempt without a word to the namespace, as a lost SYN.
		// A reset would tell its application "refused" at 10 s where
		// the peer is only silent; instead its stack retransmits the
		// SYN (at 15, 31 and 63 s on Linux), each retransmission tries
		// the host again (a peer that answers late is still reached),
		// and if none is answered the application gets "timed out" from
		// its own stack, as pasta leaves it. The flow and its socket are
		// held for one attempt only, not for the namespace's whole wait.
		e.sys.abort(f.Fd)
		e.closeFlow(idx)
		return
	case e.now >= c.idle:
		t.reset(e, idx)
		return
	case c.wndAt != 0 && e.now >= c.wndAt:
		c.wndAt = 0
		if c.flags&tcpWndClosed != 0 {
			if t.window(e, idx) > c.wndToNS {
				c.flags &^= tcpWndClosed
				c.wndPoll = 0
				t.sendAck(e, idx) // polls on if still short
			} else {
				t.armWndPoll(e, idx)
			}
		}
		if c.rtoAt != 0 && e.now >= c.rtoAt {
			t.timer(e, idx)
			return
		}
	case c.rtoAt != 0 && e.now >= c.rtoAt && c.state == tcpEstablished &&
		c.wndFromNS == 0 && c.seqAckedByNS == c.seqToNS:
		// Persist: a segment one byte behind makes the namespace's
		// stack answer with its current window (RFC 9293 3.8.6.1). A
		// receiver that keeps its window shut is not a failure, so
		// this does not count toward giving up.
		t.sendFlags(e, idx, header.TCPFlagACK, c.seqToNS-1)
		c.rto = min(c.rto*2, t.dataRTOMax)
		c.rtoAt = e.now + c.rto
		e.wakeAt(c.rtoAt)
	case c.rtoAt != 0 && e.now >= c.rtoAt:
		c.retries++
		if int(c.retries) > t.retryLimit(c.state) {
			t.reset(e, idx)
			return
		}
		switch c.state {
		case tcpSynAckSent:
			c.rto = handshakeRTO(int(c.retries), 0, t.rtoMax)
		case tcpSynSent:
			c.rto = handshakeRTO(int(c.retries), t.synLinear, t.rtoMax)
		default:
			c.rto = min(c.rto*2, t.dataRTOMax)
		}
		c.rtoAt = e.now + c.rto
		switch c.state {
		case tcpSynAckSent:
			t.sendSynAck(e, idx)
		case tcpSynSent:
			t.sendSyn(e, idx)
		default:
			t.rewind(e, idx)
		}
		e.wakeAt(c.rtoAt)
	case c.kaAt != 0 && e.now >= c.kaAt:
		if c.rtoAt == 0 && c.seqAckedByNS == c.seqToNS {
			// Nothing in flight, and the retransmission timer, which
			// would find a dead namespace otherwise, is idle.
			t.keepaliveToNS(e, idx)
		}
		c.kaAt = keepaliveAt(e.now)
	}
	t.setDeadline(e, idx)
}

// keepaliveAt is when a connection the namespace has been silent on since
// now is due a keepalive probe: tcpKeepaliveIdle later, rounded up to a
// whole second of engine time. Every connection's probe then falls on one
// of those seconds, so probes wake the loop (whose every timer run scans
// the flows) at most once a second however many connections idle.
func keepaliveAt(now int64) int64 {
	const s = int64(time.Second)
	return (now + tcpKeepaliveIdle + s - 1) / s * s
}

// retryLimit is how many retransmissions a connection in state gets
// before it is reset: the host's for a handshake, ours for data.
func (t *tcpTr) retryLimit(state uint8) int {
	switch state {
	case tcpSynSent:
		return t.synRetries
	case tcpSynAckSent:
		return t.synAckRetries
	}
	return tcpMaxRetries
}

// isKeepalive reports whether a segment from the namespace at seq with n
// bytes of payload, acceptable otherwise but entirely old, is a keepalive
// probe: one sequence number behind what we expect, without data or with
// one byte of it (RFC 9293 3.8.4), and not a zero-window probe, which
// looks the same but comes while the window we offer is shut.
func isKeepalive(c *tcpConn, seq seqnum.Value, n int, fin bool) bool {
	return c.state == tcpEstablished && seq.Add(1) == c.seqFromNS && n <= 1 && !fin &&
		c.flags&tcpWndClosed == 0 && c.wndToNS > 0
}

// keepaliveFromNS turns keepalives on for the host socket of a connection
// the namespace's stack probed (its application asked for SO_KEEPALIVE),
// once: the host kernel then probes the host's peer after as long an idle
// time as the namespace's stack waited, the time since our last segment,
// from which its keepalive timer counts. The application's keepalives
// thereby keep the host side's path (a NAT, a firewall) open as they keep
// its own, and a host peer that is gone ends the connection (the host
// socket's error resets it). pasta turns SO_KEEPALIVE on with the host's
// default idle time.
func (t *tcpTr) keepaliveFromNS(e *Engine, idx int32) {
	c := t.conn(idx)
	if c.flags&tcpKeepalive != 0 {
		return
	}
	c.flags |= tcpKeepalive
	fd := e.flow(idx).Fd
	idle := min(max((e.now-c.lastToNS+5e8)/1e9, 1), tcpMaxKeepIdle)
	err := e.sys.setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(idle))
	if err == nil {
		err = e.sys.setsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	}
	if err != nil && e.debug {
		e.log.Debug("tcp: cannot turn keepalives on for a host socket", "err", err)
	}
}

// keepaliveToNS probes the namespace on a connection it has been silent
// on: a segment one sequence number behind what it has, which its stack
// answers with an ACK, or, if it no longer knows the connection (a socket
// closed in FIN_WAIT_2 and timed out there), with a reset, which ends the
// connection on the host side too. The namespace's own keepalive timer
// does not count such an old segment, so lastToNS stays.
func (t *tcpTr) keepaliveToNS(e *Engine, idx int32) {
	c := t.conn(idx)
	last := c.lastToNS
	t.sendFlags(e, idx, header.TCPFlagACK, c.seqToNS-1)
	c.lastToNS = last
}

// windowShort runs when we offer the namespace less than a segment: the
// host socket's send buffer is nearly full. The namespace then waits for
// a window update, and the update must come as soon as the buffer has room
// again, or the host socket runs dry while the namespace still has data:
// the transfer dips, and with a growing poll interval it stalled for
// hundreds of milliseconds at a time.
//
// The kernel only announces send space (an EPOLLOUT edge) to sockets it
// marked as having run out of it (SOCK_NOSPACE), which a send that hit a
// full buffer or a poll that found the socket unwritable does. Here no
// send failed, so wantSpace polls the socket once: if the buffer is more
// than two thirds full, the kernel marks it, and wakes us when it has
// drained below two thirds, with a third of the buffer free to offer (its
// own rule, sk_stream_is_writeable). The namespace's sender refills while
// two thirds are still queued, so the host socket never empties. A short
// poll backs that up for the windows the edge does not cover (a buffer
// between a third and two thirds full, or too small to matter).
func (t *tcpTr) windowShort(e *Engine, idx int32) {
	c := t.conn(idx)
	c.flags |= tcpWndClosed
	e.sys.wantSpace(e.flow(idx).Fd)
	t.armWndPoll(e, idx)
}

// armWndPoll schedules a check of a window we offered below one segment,
// every 1 ms at first, backing off to 5 ms while the host side stays full.
func (t *tcpTr) armWndPoll(e *Engine, idx int32) {
	c := t.conn(idx)
	if c.wndAt != 0 || c.state == tcpConnecting {
		return
	}
	c.wndPoll = min(max(c.wndPoll*2, tcpWndPollMin), tcpWndPollMax)
	c.wndAt = e.now + c.wndPoll
	e.wakeAt(c.wndAt)
	t.setDeadline(e, idx)
}

// setDeadline points the engine's timer at the flow's nearest event.
func (t *tcpTr) setDeadline(e *Engine, idx int32) {
	c := t.conn(idx)
	if c.state == tcpConnecting {
		return // open() set the SYN timeout; a repeated SYN must not move it
	}
	d := c.idle
	for _, at := range [...]int64{c.rtoAt, c.wndAt, c.kaAt} {
		if at != 0 && at < d {
			d = at
		}
	}
	e.flow(idx).Deadline = d
}

func (t *tcpTr) closed(e *Engine, idx int32) { t.conns[idx] = tcpConn{} }

// reset aborts both sides: RST to the namespace, and a reset to the host
// peer (SO_LINGER 0 before the close).
func (t *tcpTr) reset(e *Engine, idx int32) {
	c := t.conn(idx)
	if c.state != tcpConnecting {
		t.sendFlags(e, idx, header.TCPFlagRST|header.TCPFlagACK, c.seqToNS)
	}
	e.sys.abort(e.flow(idx).Fd)
	e.closeFlow(idx)
}

// resetSeg answers an unacceptable ACK with a reset carrying that ACK as
// its sequence number (RFC 9293 3.10.7.3).
func (t *tcpTr) resetSeg(e *Engine, idx int32, a seqnum.Value) {
	t.sendFlags(e, idx, header.TCPFlagRST, a)
}

// window is what we offer the namespace: the host socket's free send
// space, less an eighth for the kernel's per-buffer overhead, so that a
// full window still fits.
func (t *tcpTr) window(e *Engine, idx int32) uint32 {
	free, err := e.sys.sendSpace(e.flow(idx).Fd)
	if err != nil {
		if !e.warned.sendSpace {
			// A kernel before 4.12 has no SO_MEMINFO: without a window,
			// no TCP connection through the TAP can carry data. Say so
			// once rather than leave it a mystery.
			e.warned.sendSpace = true
			e.log.Warn("TCP: cannot read a host socket's send buffer (SO_MEMINFO, Linux 4.12): connections through the TAP get no window", "err", err)
		}
		return 0
	}
	w := uint32(free - free/8)
	return min(w, tcpMaxWindow)
}

func (t *tcpTr) sendAck(e *Engine, idx int32) {
	c := t.conn(idx)
	c.flags &^= tcpAckPending | tcpDupPending
	t.sendFlags(e, idx, header.TCPFlagACK, c.seqToNS)
}

func (t *tcpTr) sendSynAck(e *Engine, idx int32) {
	c := t.conn(idx)
	var opts [tcpOptsSYN]byte
	opts[0], opts[1] = 2, 4 // MSS
	opts[2], opts[3] = byte(c.mss>>8), byte(c.mss)
	if c.wsFromNS != 255 {
		opts[4], opts[5], opts[6], opts[7] = 1, 3, 3, tcpWindowScale // NOP, window scale
	} else {
		opts[4], opts[5], opts[6], opts[7] = 1, 1, 1, 1
	}
	b := e.txBuf()
	t.commit(e, idx, t.segment(e, idx, b, header.TCPFlagSYN|header.TCPFlagACK, c.isn, 0, opts[:]), 0)
}

// sendFlags queues a segment without payload.
func (t *tcpTr) sendFlags(e *Engine, idx int32, flags uint8, seq seqnum.Value) {
	b := e.txBuf()
	t.commit(e, idx, t.segment(e, idx, b, flags, seq, 0, nil), 0)
}

// segment writes the headers of a segment toward the namespace into b,
// offering the current window; see segmentWin.
func (t *tcpTr) segment(e *Engine, idx int32, b []byte, flags uint8, seq seqnum.Value, plen int, opts []byte) int {
	var win uint32
	if flags&header.TCPFlagRST == 0 {
		win = t.window(e, idx)
	}
	return t.segmentWin(e, idx, b, flags, seq, plen, opts, win)
}

// segmentWin writes the headers of a segment toward the namespace into b,
// whose payload (plen bytes) is already in place behind a 20-byte TCP
// header (segments with options carry no payload), offering window win. It
// returns the frame length.
func (t *tcpTr) segmentWin(e *Engine, idx int32, b []byte, flags uint8, seq seqnum.Value, plen int, opts []byte, win uint32) int {
	c := t.conn(idx)
	f := e.flow(idx)
	thLen := header.TCPMinimumSize + len(opts)
	l4len := thLen + plen
	o := e.writeHeaders(b, f.v6, header.ProtocolTCP, f.DstAddr(), f.NSAddr(), l4len)
	th := header.TCP(b[o : o+l4len])
	ack := uint32(0)
	if flags&header.TCPFlagACK != 0 {
		ack = uint32(c.seqFromNS)
	}
	scaled := flags&header.TCPFlagSYN == 0 && c.wsFromNS != 255
	if scaled {
		// What the namespace will read: scaling rounds down.
		win = min(win>>tcpWindowScale, 65535) << tcpWindowScale
	} else {
		win = min(win, 65535)
	}
	if flags&header.TCPFlagRST == 0 {
		c.wndToNS = win
		// Less than a segment: the namespace's stack sends nothing
		// more (a segment must fit whole) and would only probe after
		// its retransmission timeout, 200 ms and doubling, so the
		// window must be reopened from here. A window that was a
		// segment before rounding counts too: rounded down it is not
		// one (this cost 200 ms stalls at MTU 1500).
		if win < uint32(c.mss) {
			t.windowShort(e, idx)
		}
	}
	if scaled {
		win >>= tcpWindowScale
	}
	th.Encode(&header.TCPFields{
		SrcPort: f.DstPort, DstPort: f.NSPort,
		Seq: uint32(seq), Ack: ack,
		DataOffset: thLen, Flags: flags, Window: uint16(win),
	})
	c.lastToNS = e.now
	copy(th[header.TCPMinimumSize:], opts)
	if e.vnet > 0 {
		// Left partial: the pseudo-header sum in place, which the
		// namespace's kernel accepts as verified (CHECKSUM_PARTIAL).
		th.SetChecksum(pseudoSum(b, f.v6, header.ProtocolTCP, l4len))
	} else {
		th.SetChecksum(th.CalculateChecksum(pseudoSum(b, f.v6, header.ProtocolTCP, l4len)))
	}
	return o + l4len
}

// resetFor answers a segment that has no flow (RFC 9293 3.10.7.1).
func (t *tcpTr) resetFor(e *Engine, p *packet, th header.TCP) {
	var seq, ack uint32
	flags := header.TCPFlagRST
	if th.Flags()&header.TCPFlagACK != 0 {
		seq = th.Ack()
	} else {
		l := uint32(len(th.Payload()))
		if th.Flags()&header.TCPFlagSYN != 0 {
			l++
		}
		if th.Flags()&header.TCPFlagFIN != 0 {
			l++
		}
		ack = th.Seq() + l
		flags |= header.TCPFlagACK
	}
	b := e.txBuf()
	l4len := header.TCPMinimumSize
	o := e.writeHeaders(b, p.v6, header.ProtocolTCP, p.dst, p.src, l4len)
	out := header.TCP(b[o : o+l4len])
	out.Encode(&header.TCPFields{
		SrcPort: p.dport, DstPort: p.sport, Seq: seq, Ack: ack,
		DataOffset: header.TCPMinimumSize, Flags: flags,
	})
	out.SetChecksum(out.CalculateChecksum(pseudoSum(b, p.v6, header.ProtocolTCP, l4len)))
	e.txCommit(o + l4len)
}

// Errors of connections the host opens into the namespace.
var (
	ErrTCPDisabled = errors.New("fwd: TCP is disabled")
	ErrTableFull   = errors.New("fwd: flow table full")
	ErrFlowExists  = errors.New("fwd: the namespace would see this connection as one it already has")
)

// tcpFromHost starts a connection into the namespace for fd, a connected
// host socket accepted on a forwarded port: peer is the address the
// namespace sees it from (after NAT), to the namespace's address and port.
// The engine owns fd from the call on; on error it has been closed with a
// reset, so the host peer learns at once. Runs on the engine's thread.
func (e *Engine) tcpFromHost(fd int, peer, to netip.AddrPort) error {
	t, _ := e.tr[protoTCP].(*tcpTr)
	if t == nil {
		e.sys.abort(fd)
		e.sys.close(fd)
		return ErrTCPDisabled
	}
	idx := e.newFlowFor(header.ProtocolTCP, protoTCP, to, peer)
	if idx < 0 {
		e.sys.abort(fd)
		e.sys.close(fd)
		if e.FlowCount() >= e.FlowCapacity() {
			return ErrTableFull
		}
		return ErrFlowExists
	}
	f := e.flow(idx)
	f.Fd = fd
	f.setHostAddr(peer.Addr())
	e.sys.setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if err := t.usePeekOff(e, fd, f); err != nil {
		e.sys.abort(fd)
		e.closeFlow(idx)
		e.refused(protoTCP, err)
		return err
	}
	if err := e.sys.watch(fd, idx, f.gen, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET); err != nil {
		e.sys.abort(fd)
		e.closeFlow(idx)
		e.refused(protoTCP, err)
		return err
	}
	c := t.conn(idx)
	*c = tcpConn{state: tcpSynSent, rto: handshakeRTO(0, t.synLinear, t.rtoMax), wsFromNS: tcpWindowScale}
	c.mss = t.segmentSize(e, f.v6, 0xffff)
	c.isn = t.isn.ISN(peer, to, e.nowT)
	c.seqToNS, c.seqAckedByNS, c.seqMax = c.isn.Add(1), c.isn.Add(1), c.isn.Add(1)
	c.idle = e.now + tcpIdleTimeout
	t.sendSyn(e, idx)
	t.armRTO(e, idx)
	return nil
}

// sendSyn opens a connection toward the namespace (MSS and window scale;
// no SACK or timestamps, which we would not act on).
func (t *tcpTr) sendSyn(e *Engine, idx int32) {
	c := t.conn(idx)
	var opts [tcpOptsSYN]byte
	opts[0], opts[1] = 2, 4
	opts[2], opts[3] = byte(c.mss>>8), byte(c.mss)
	opts[4], opts[5], opts[6], opts[7] = 1, 3, 3, tcpWindowScale
	b := e.txBuf()
	t.commit(e, idx, t.segment(e, idx, b, header.TCPFlagSYN, c.isn, 0, opts[:]), 0)
}

// synAck completes a connection we opened toward the namespace.
func (t *tcpTr) synAck(e *Engine, idx int32, th header.TCP) {
	c := t.conn(idx)
	if seqnum.Value(th.Ack()) != c.isn.Add(1) {
		t.resetSeg(e, idx, seqnum.Value(th.Ack()))
		return
	}
	var o header.TCPOptions
	header.ParseTCPOptions(th.Options(), &o)
	c.mss = t.segmentSize(e, e.flow(idx).v6, o.MSS)
	c.wsFromNS = 255
	if o.WS >= 0 {
		c.wsFromNS = uint8(o.WS)
	}
	c.seqFromNS = seqnum.Value(th.Seq()).Add(1)
	c.wndFromNS = uint32(th.Window()) // a SYN's window is never scaled
	c.wl1, c.wl2 = seqnum.Value(th.Seq()), seqnum.Value(th.Ack())
	c.state = tcpEstablished
	c.retries, c.rto, c.rtoAt = 0, tcpRTOInitial, 0
	c.kaAt = keepaliveAt(e.now)
	// What the host peer sent while the handshake ran goes out now, and
	// its first segment is the handshake's ACK (RFC 9293 3.5 allows data
	// on it). A bare ACK ahead of it would complete the connection on its
	// own: the namespace's server would wake to accept, find nothing to
	// read and sleep again until the data segment came.
	sent := c.seqToNS
	t.pushToNS(e, idx)
	if e.flow(idx).state != flowActive {
		return
	}
	if c.seqToNS == sent {
		t.sendAck(e, idx) // nothing to send (yet): the ACK on its own
	}
	t.setDeadline(e, idx)
}
