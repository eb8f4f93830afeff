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
}

func (s *streamSys) recvmsgIov(_ int, iov []unix.Iovec, flags int) (int, error) {
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

// FuzzTCPFrames drives an established flow (host side faked) with random
// segments from the namespace, host data arrivals, send-space changes and
// clock ticks. Nothing may panic; no segment toward the namespace may go
// beyond the window it advertised or exceed the MSS, carry bytes other
// than the host stream's at its sequence number, and the sequence
// variables must stay ordered.
func FuzzTCPFrames(f *testing.F) {
	f.Add([]byte{0, 10, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 200, 2, 50, 3, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 255, 0, 0x10, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 1, 0})
	f.Add([]byte{1, 100, 4, 0, 4, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		l := newFakeLink(t)
		cl := &capLink{fakeLink: l}
		e, err := New(cl, paramsMTU(1500), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		ss := &streamSys{fakeSys: newFakeSys(), space: 1 << 20, take: 1 << 20}
		e.sys = ss
		now := e.start
		e.clock = func() time.Time { return now }
		tr := e.tr[protoTCP].(*tcpTr)
		if len(ops) > 0 && ops[0]&1 != 0 {
			tr.peekOff, tr.scratch = false, make([]byte, tcpMaxWindow)
		}
		const port, nsPort = 80, 40000
		seg := func(flags uint8, seq, ack uint32, wnd uint16, opts, pay []byte) {
			e.updateClock()
			e.handleFrames([][]byte{tcpFrame(ns4, ext, nsPort, port, seq, ack, flags, wnd, opts, pay)})
		}
		// Handshake: SYN, connect() "succeeds", ACK.
		iss := uint32(5000)
		seg(header.TCPFlagSYN, iss, 0, 1000, synOpts(1000, 2), nil)
		idx := e.ft.active[0]
		e.sockEvent(idx, e.flow(idx).gen, unix.EPOLLOUT)
		c := tr.conn(idx)
		seg(header.TCPFlagACK, iss+1, uint32(c.isn)+1, 1000, nil, nil)
		e.flush()
		cl.out = nil
		if c.state != tcpEstablished {
			t.Fatalf("state %d after the handshake, want established", c.state)
		}
		start := c.isn.Add(1) // stream offset 0
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
			for _, fr := range cl.out {
				s, err := decodeSeg(fr)
				if err != nil {
					t.Fatal(err)
				}
				if s.has(header.TCPFlagRST) {
					continue
				}
				end := seqnum.Value(s.seq).Add(uint32(len(s.payload)))
				if len(s.payload) > int(c.mss) {
					t.Fatalf("segment of %d bytes, MSS %d", len(s.payload), c.mss)
				}
				if len(s.payload) > 0 && edge.LessThan(end) {
					t.Fatalf("segment %v ends beyond the window edge (una %d + wnd %d)", s, c.seqAckedByNS, c.wndFromNS)
				}
				for i, b := range s.payload {
					off := int(start.Size(seqnum.Value(s.seq))) + i
					if b != patByte(off) {
						t.Fatalf("byte at stream offset %d is %d, want %d", off, b, patByte(off))
					}
				}
			}
			cl.out = nil
		}
		for len(ops) >= 2 {
			op, arg := ops[0], ops[1]
			ops = ops[2:]
			switch op % 6 {
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
				now = now.Add(time.Duration(arg) * 10 * time.Millisecond)
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
			}
			check()
			if e.flow(idx).state != flowActive {
				return
			}
		}
	})
}
