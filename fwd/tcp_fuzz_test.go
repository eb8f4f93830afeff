package fwd

import (
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/seqnum"
)

// streamSys fakes one connected host stream socket: host data is the
// pattern stream, of which avail bytes have arrived; head bytes were
// removed (discarded); the peek offset follows SO_PEEK_OFF's rules.
type streamSys struct {
	*fakeSys
	head, avail int
	peek        int
	peekOn      bool // SO_PEEK_OFF was set (the kernel's default is off, -1)
	eof         bool
	space       int // free send space
	take        int // most bytes one sendmsg takes
	sentBytes   int
	peeks       int // MSG_PEEK reads
	discards    int // discard calls
}

func (s *streamSys) recvmsgIov(_ int, iov []unix.Iovec, flags int) (int, error) {
	if flags&unix.MSG_PEEK != 0 {
		s.peeks++
	}
	off := s.head
	if flags&unix.MSG_PEEK != 0 && s.peekOn {
		off += s.peek
	}
	n := 0
	for _, v := range iov {
		b := unsafe.Slice(v.Base, v.Len)
		for i := range b {
			if off >= s.avail {
				break
			}
			b[i] = patByte(off)
			off++
			n++
		}
	}
	if n == 0 && !s.eof {
		return 0, unix.EAGAIN
	}
	if flags&unix.MSG_PEEK != 0 && s.peekOn {
		s.peek += n
	}
	return n, nil
}

func (s *streamSys) discard(_ int, n int) (int, error) {
	s.discards++
	n = min(n, s.avail-s.head)
	s.head += n
	s.peek = max(s.peek-n, 0)
	return n, nil
}

func (s *streamSys) setsockoptInt(_, level, opt, val int) error {
	if level == unix.SOL_SOCKET && opt == unix.SO_PEEK_OFF {
		s.peek, s.peekOn = val, true
	}
	return nil
}

func (s *streamSys) sendmsgIov(_ int, iov []unix.Iovec) (int, error) {
	n := 0
	for _, v := range iov {
		n += int(v.Len)
	}
	n = min(n, s.take)
	if n == 0 {
		return 0, unix.EAGAIN
	}
	s.sentBytes += n
	return n, nil
}

func (s *streamSys) sendSpace(int) (int, error) { return s.space, nil }

// fakeStream is an established flow whose host side is streamSys, on an
// engine at MTU 1500 with a clock the test moves. Without peekOff the
// engine works as on a kernel without SO_PEEK_OFF for TCP:
// it must know that before the connection opens, as it sets the option
// on the new socket.
type fakeStream struct {
	e   *Engine
	cl  *capLink
	ss  *streamSys
	tr  *tcpTr
	idx int32
	c   *tcpConn
	now time.Time
	iss uint32 // the namespace's initial sequence number
	// frame builds a segment of the flow from the namespace; seg
	// delivers one, in a batch of its own.
	frame func(flags uint8, seq, ack uint32, wnd uint16, opts, pay []byte) []byte
	seg   func(flags uint8, seq, ack uint32, wnd uint16, opts, pay []byte)
}

func newFakeStream(t testing.TB, peekOff bool) *fakeStream {
	l := newFakeLink(t)
	fs := &fakeStream{cl: &capLink{fakeLink: l}, iss: 5000}
	e, err := New(fs.cl, paramsMTU(1500), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	fs.e = e
	fs.ss = &streamSys{fakeSys: newFakeSys(), space: 1 << 20, take: 1 << 20}
	e.sys = fs.ss
	fs.now = e.start
	e.clock = func() time.Time { return fs.now }
	fs.tr = e.tr[protoTCP].(*tcpTr)
	if !peekOff {
		fs.tr.peekOff = [2]peekCap{peekUnsupported, peekUnsupported}
		fs.tr.scratch = make([]byte, tcpMaxWindow)
	}
	const port, nsPort = 80, 40000
	fs.frame = func(flags uint8, seq, ack uint32, wnd uint16, opts, pay []byte) []byte {
		return tcpFrame(ns4, ext, nsPort, port, seq, ack, flags, wnd, opts, pay)
	}
	fs.seg = func(flags uint8, seq, ack uint32, wnd uint16, opts, pay []byte) {
		e.updateClock()
		e.handleFrames([][]byte{fs.frame(flags, seq, ack, wnd, opts, pay)})
	}
	// Handshake: SYN, connect() "succeeds", ACK.
	fs.seg(header.TCPFlagSYN, fs.iss, 0, 1000, synOpts(1000, 2), nil)
	fs.idx = e.ft.active[0]
	e.sockEvent(fs.idx, e.flow(fs.idx).gen, unix.EPOLLOUT)
	fs.c = fs.tr.conn(fs.idx)
	fs.seg(header.TCPFlagACK, fs.iss+1, uint32(fs.c.isn)+1, 1000, nil, nil)
	e.flush()
	fs.cl.out = nil
	if fs.c.state != tcpEstablished {
		t.Fatalf("state %d after the handshake, want established", fs.c.state)
	}
	return fs
}

// FuzzTCPFrames drives an established flow (host side faked) with random
// segments from the namespace, alone or as a batch of ACKs, host data
// arrivals, send-space changes and clock ticks. Nothing may panic; no
// segment toward the namespace may go beyond the window it advertised or
// exceed the MSS, carry bytes other than the host stream's at its sequence
// number, and the sequence variables must stay ordered.
func FuzzTCPFrames(f *testing.F) {
	f.Add([]byte{0, 10, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 200, 2, 50, 3, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 255, 0, 0x10, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 1, 0})
	f.Add([]byte{1, 100, 4, 0, 4, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 3})
	f.Add([]byte{0, 60, 6, 3, 0, 20, 6, 0x83, 6, 7, 2, 30, 6, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		fs := newFakeStream(t, len(ops) == 0 || ops[0]&1 == 0)
		e, cl, ss, idx, c, seg := fs.e, fs.cl, fs.ss, fs.idx, fs.c, fs.seg
		now := &fs.now
		iss := fs.iss
		nsSeq := iss + 1

		check := func() {
			t.Helper()
			e.flush()
			e.reap()
			if e.flow(idx).state != flowActive {
				cl.out = nil
				return
			}
			if !c.seqAckedByNS.LessThanEq(c.seqToNS) || !c.seqToNS.LessThanEq(c.seqMax) {
				t.Fatalf("sequence order broken: una %d nxt %d max %d", c.seqAckedByNS, c.seqToNS, c.seqMax)
			}
			edge := c.seqAckedByNS.Add(c.wndFromNS)
			for _, s := range fs.sent(t) {
				end := seqnum.Value(s.seq).Add(uint32(len(s.payload)))
				if len(s.payload) > int(c.mss) {
					t.Fatalf("segment of %d bytes, MSS %d", len(s.payload), c.mss)
				}
				if len(s.payload) > 0 && edge.LessThan(end) {
					t.Fatalf("segment %v ends beyond the window edge (una %d + wnd %d)", s, c.seqAckedByNS, c.wndFromNS)
				}
			}
		}
		for len(ops) >= 2 {
			op, arg := ops[0], ops[1]
			ops = ops[2:]
			switch op % 7 {
			case 0: // host data arrives
				ss.avail += int(arg) * 97
				e.sockEvent(idx, e.flow(idx).gen, unix.EPOLLIN)
			case 1: // a segment from the namespace
				if len(ops) < 8 {
					return
				}
				flags := ops[0] &^ (header.TCPFlagSYN | header.TCPFlagRST)
				if ops[0]&0x80 != 0 {
					flags |= ops[0] & header.TCPFlagRST
				}
				ackOff := int32(int8(ops[1])) * 64
				wnd := uint16(ops[2])<<8 | uint16(ops[3])
				plen := int(ops[4]) * 8
				seqOff := int32(int8(ops[5]))
				ops = ops[8:]
				ack := uint32(c.seqAckedByNS) + uint32(ackOff)
				if arg&1 != 0 {
					ack = uint32(c.seqToNS) // acknowledge everything sent
				}
				seg(flags, nsSeq+uint32(seqOff), ack, wnd, nil, make([]byte, plen))
				if seqOff == 0 {
					nsSeq = uint32(c.seqFromNS)
				}
			case 2: // the clock moves
				*now = now.Add(time.Duration(arg) * 10 * time.Millisecond)
				e.updateClock()
				e.runTimers()
			case 3: // send space changes
				ss.space = int(arg) * 1024
				ss.take = int(arg) * 512
				e.sockEvent(idx, e.flow(idx).gen, unix.EPOLLOUT)
			case 4: // the host peer finishes
				ss.eof = true
				e.sockEvent(idx, e.flow(idx).gen, unix.EPOLLIN|unix.EPOLLRDHUP)
			case 5: // an epoll error without a socket error
				e.sockEvent(idx, e.flow(idx).gen, uint32(arg)<<2)
			case 6: // a batch of ACKs, each further along, or duplicates
				k := uint32(arg%8) + 1
				una, inflight := uint32(c.seqAckedByNS), c.seqAckedByNS.Size(c.seqToNS)
				batch := make([][]byte, 0, k)
				for j := uint32(1); j <= k; j++ {
					ack := una + inflight*j/k
					if arg&0x80 != 0 {
						ack = una
					}
					batch = append(batch, fs.frame(header.TCPFlagACK, nsSeq, ack, uint16(arg)<<4|0xff, nil, nil))
				}
				e.updateClock()
				e.handleFrames(batch)
			}
			check()
			if e.flow(idx).state != flowActive {
				return
			}
		}
	})
}

// sent takes the segments the engine queued toward the namespace since the
// last call, other than resets, and checks that each carries the host
// stream's bytes at its sequence number.
func (fs *fakeStream) sent(t testing.TB) []tcpSeg {
	t.Helper()
	start := fs.c.isn.Add(1) // stream offset 0
	var segs []tcpSeg
	for _, fr := range fs.cl.out {
		s, err := decodeSeg(fr)
		if err != nil {
			t.Fatal(err)
		}
		if s.has(header.TCPFlagRST) {
			continue
		}
		for i, b := range s.payload {
			off := int(start.Size(seqnum.Value(s.seq))) + i
			if b != patByte(off) {
				t.Fatalf("byte at stream offset %d is %d, want %d", off, b, patByte(off))
			}
		}
		segs = append(segs, s)
	}
	fs.cl.out = nil
	return segs
}

// TestTCPBatchedAcks: the namespace's ACKs that arrive in one batch leave
// the host socket in one discard and are answered with one peek. A discard
// per ACK made the host socket announce its reopened window once per ACK,
// and the host's sender answered each from the engine's CPU while its own
// sends went out from another, so loopback delivered segments out of order
// and the sender retransmitted spuriously. Without a peek offset (a kernel
// without SO_PEEK_OFF for TCP) the peek skips what is in flight from the
// head, so each ACK is consumed at once there.
func TestTCPBatchedAcks(t *testing.T) {
	for _, tt := range []struct {
		name         string
		peekOff      bool
		wantDiscards int
	}{
		{"peek offset", true, 1},
		{"no peek offset", false, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFakeStream(t, tt.peekOff)
			c, ss, mss := fs.c, fs.ss, uint32(fs.c.mss)
			ss.avail = 100 * int(mss)
			fs.e.sockEvent(fs.idx, fs.e.flow(fs.idx).gen, unix.EPOLLIN)
			fs.e.flush()
			// The namespace's window is 1000 << 2: four segments.
			if got := len(fs.sent(t)); got != 4 {
				t.Fatalf("set-up: %d segments in the first window, want 4", got)
			}
			start := uint32(c.isn) + 1
			var batch [][]byte
			for k := uint32(1); k <= 4; k++ {
				batch = append(batch, fs.frame(header.TCPFlagACK, fs.iss+1, start+k*mss, 1000, nil, nil))
			}
			d0, p0 := ss.discards, ss.peeks
			fs.e.handleFrames(batch)
			fs.e.flush()
			if got := ss.discards - d0; got != tt.wantDiscards {
				t.Errorf("discard calls for a batch of 4 ACKs: got %d, want %d", got, tt.wantDiscards)
			}
			if got := ss.peeks - p0; got != 1 {
				t.Errorf("peeks for a batch of 4 ACKs: got %d, want 1", got)
			}
			if got, want := ss.head, int(4*mss); got != want {
				t.Errorf("host socket head after the batch: got %d, want %d", got, want)
			}
			segs := fs.sent(t)
			if len(segs) != 4 || segs[0].seq != start+4*mss {
				t.Fatalf("after the batch: %d segments from %v, want 4 from %d", len(segs), segs, start+4*mss)
			}
		})
	}
}

// TestTCPBatchedAcksRewind: an ACK and then three duplicates of it in one
// batch. The rewind resends from that ACK, so the bytes the ACK freed
// must leave the host socket before the peek offset goes back to its head;
// otherwise the resent segment would carry the stream's first bytes.
func TestTCPBatchedAcksRewind(t *testing.T) {
	fs := newFakeStream(t, true)
	c, ss, mss := fs.c, fs.ss, uint32(fs.c.mss)
	ss.avail = 100 * int(mss)
	fs.e.sockEvent(fs.idx, fs.e.flow(fs.idx).gen, unix.EPOLLIN)
	fs.e.flush()
	fs.sent(t)
	start := uint32(c.isn) + 1
	ack := fs.frame(header.TCPFlagACK, fs.iss+1, start+mss, 1000, nil, nil)
	fs.e.handleFrames([][]byte{ack, ack, ack, ack})
	fs.e.flush()
	if c.flags&tcpRecovering == 0 {
		t.Fatalf("three duplicate ACKs in a batch did not rewind")
	}
	segs := fs.sent(t) // checks every byte against its stream offset
	if len(segs) == 0 || segs[0].seq != start+mss {
		t.Fatalf("after the rewind: segments %v, want the first at %d", segs, start+mss)
	}
	if got, want := ss.head, int(mss); got != want {
		t.Errorf("host socket head: got %d, want %d", got, want)
	}
}

// TestTCPWindowRoundedBelowSegment: a window of a segment or a little more
// is a window of less than one once window scaling rounds it down. The
// namespace then sends nothing and would wait for its retransmission
// timer; the engine must take it as a short window and reopen it itself
// (at MTU 1500 this stalled transfers for 200 ms and more).
func TestTCPWindowRoundedBelowSegment(t *testing.T) {
	fs := newFakeStream(t, true)
	c := fs.c
	mss := int(c.mss)
	// window() offers free - free/8: make that a segment and a bit, but
	// less than the next multiple of the scaling unit.
	fs.ss.space = (mss + 8) * 8 / 7
	unit := 1 << tcpWindowScale
	if w := int(fs.tr.window(fs.e, fs.idx)); w < mss || w/unit*unit >= mss {
		t.Fatalf("set-up: window %d, want at least the MSS %d and below it once rounded to %d", w, mss, unit)
	}
	fs.seg(header.TCPFlagACK, fs.iss+1, uint32(c.seqToNS), 1000, nil, make([]byte, 100))
	fs.e.flush()
	if c.flags&tcpWndClosed == 0 {
		t.Errorf("window %d offered (%d before rounding), MSS %d: not taken as short", c.wndToNS, fs.tr.window(fs.e, fs.idx), mss)
	}
	if int(c.wndToNS) >= mss || c.wndToNS%(1<<tcpWindowScale) != 0 {
		t.Errorf("recorded window %d: want what the namespace reads, a multiple of %d below the MSS %d", c.wndToNS, 1<<tcpWindowScale, mss)
	}
	if c.wndAt == 0 {
		t.Errorf("no window poll armed behind the short window")
	}
}
