package fwd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/seqnum"
	"github.com/gopasta/gopasta/internal/sock"
)

// The TCP tests drive the engine by hand (handleFrames, socket events from
// the engine's own epoll, timers on a fake clock) against real host sockets,
// playing the namespace's TCP themselves with frames built here.

// capLink records every frame the engine writes, in order.
type capLink struct {
	*fakeLink
	out [][]byte
}

func (l *capLink) WriteBatch(bufs [][]byte) (int, error) {
	for _, b := range bufs {
		l.out = append(l.out, append([]byte(nil), b...))
	}
	return len(bufs), nil
}

type tcpHarness struct {
	t   *testing.T
	e   *Engine
	l   *capLink
	now time.Time
	ev  []unix.EpollEvent
	seg []tcpSeg // parsed frames not yet taken by the test
}

func newTCPHarness(t *testing.T, p *NetParams, opts Options) *tcpHarness {
	t.Helper()
	// The test's goroutine moves into a fresh network namespace when it
	// may (root), so that its loopback ports, backlogs and sysctls are
	// its own; without privileges it runs in the current namespace.
	if fresh, err := nstest.UnshareNetns(); fresh && err != nil {
		t.Fatal(err)
	}
	l := &capLink{fakeLink: newFakeLink(t)}
	e, err := New(l, p, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	h := &tcpHarness{t: t, e: e, l: l, now: e.start, ev: make([]unix.EpollEvent, 64)}
	e.clock = func() time.Time { return h.now }
	return h
}

func (h *tcpHarness) tr() *tcpTr { return h.e.tr[protoTCP].(*tcpTr) }

// cycle is one loop iteration: frames from the link, host socket events
// (waiting up to waitMs for one), timers, flush, reap.
func (h *tcpHarness) cycle(waitMs int, frames ...[]byte) {
	e := h.e
	e.updateClock()
	if len(frames) > 0 {
		e.handleFrames(frames)
	}
	n, err := unix.EpollWait(e.epfd, h.ev, waitMs)
	if err != nil && !errors.Is(err, unix.EINTR) {
		h.t.Fatalf("epoll_wait: %v", err)
	}
	for i := range h.ev[:max(n, 0)] {
		if h.ev[i].Fd >= 0 {
			e.sockEvent(h.ev[i].Fd, uint32(h.ev[i].Pad), h.ev[i].Events)
		}
	}
	e.runTimers()
	e.flush()
	e.reap()
	for _, b := range h.l.out {
		h.seg = append(h.seg, parseTCP(h.t, b))
	}
	h.l.out = h.l.out[:0]
}

// send delivers frames from the namespace in one batch.
func (h *tcpHarness) send(frames ...[]byte) { h.cycle(0, frames...) }

// advance moves the fake clock (timers) without touching real time.
func (h *tcpHarness) advance(d time.Duration) {
	h.now = h.now.Add(d)
	h.cycle(0)
}

// until runs cycles until cond holds, failing after 5 s.
func (h *tcpHarness) until(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		// The engine's clock moves with the wait, as it would in Run.
		h.now = h.now.Add(10 * time.Millisecond)
		h.cycle(10)
	}
}

// take returns the first pending segment matching keep (nil: any), waiting
// for it; segments before it are discarded.
func (h *tcpHarness) take(what string, keep func(*tcpSeg) bool) tcpSeg {
	h.t.Helper()
	var got tcpSeg
	h.until(what, func() bool {
		for i := range h.seg {
			if keep == nil || keep(&h.seg[i]) {
				got = h.seg[i]
				h.seg = h.seg[i+1:]
				return true
			}
		}
		h.seg = h.seg[:0]
		return false
	})
	return got
}

// none checks that no segment matching keep is pending after a short
// settle.
func (h *tcpHarness) none(what string, keep func(*tcpSeg) bool) {
	h.t.Helper()
	for range 5 {
		h.cycle(5)
	}
	for _, s := range h.seg {
		if keep == nil || keep(&s) {
			h.t.Errorf("unexpected %s: %v", what, s)
		}
	}
	h.seg = h.seg[:0]
}

// tcpSeg is a parsed segment from the engine.
type tcpSeg struct {
	parsed
	seq, ack uint32
	flags    uint8
	wnd      uint16
	opts     header.TCPOptions
	payload  []byte
}

func (s tcpSeg) String() string {
	return fmtSeg(s.flags, s.seq, s.ack, s.wnd, len(s.payload))
}

func fmtSeg(fl uint8, seq, ack uint32, wnd uint16, n int) string {
	names := "FSRPAUEC"
	f := []byte{}
	for i := range 8 {
		if fl&(1<<i) != 0 {
			f = append(f, names[i])
		}
	}
	return string(f) + " seq=" + itoa(seq) + " ack=" + itoa(ack) + " wnd=" + itoa(uint32(wnd)) + " len=" + itoa(uint32(n))
}

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b [10]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}

func (s *tcpSeg) has(f uint8) bool { return s.flags&f == f }

// parseTCP validates a frame from the engine, the TCP checksum included.
func parseTCP(t testing.TB, b []byte) tcpSeg {
	t.Helper()
	s, err := decodeSeg(b)
	if err != nil {
		t.Fatalf("frame from the engine: %v", err)
	}
	return s
}

// decodeSeg checks every header and checksum of a TCP frame from the engine.
func decodeSeg(b []byte) (tcpSeg, error) {
	var s tcpSeg
	eth := header.Ethernet(b)
	if len(b) < header.EthernetMinimumSize || !eth.IsValid() {
		return s, fmt.Errorf("short frame %x", b)
	}
	if !bytes.Equal(eth.Src(), ourMAC) {
		return s, fmt.Errorf("eth src %x, want %v", eth.Src(), ourMAC)
	}
	switch eth.Type() {
	case header.EtherTypeIPv4:
		ip := header.IPv4(b[14:])
		if len(ip) < 20 || !ip.IsValid(len(ip)) || !ip.IsChecksumValid() {
			return s, fmt.Errorf("bad IPv4 header %x", b[14:])
		}
		if int(ip.TotalLength()) != len(ip) {
			return s, fmt.Errorf("IPv4 total length %d, frame holds %d", ip.TotalLength(), len(ip))
		}
		s.proto, s.src, s.dst, s.l4 = ip.Protocol(), ip.Src(), ip.Dst(), ip.Payload()
	case header.EtherTypeIPv6:
		ip := header.IPv6(b[14:])
		if len(ip) < 40 || !ip.IsValid(len(ip)) {
			return s, fmt.Errorf("bad IPv6 header %x", b[14:])
		}
		if int(ip.PayloadLength())+40 != len(ip) {
			return s, fmt.Errorf("IPv6 payload length %d, frame holds %d", ip.PayloadLength(), len(ip)-40)
		}
		s.v6 = true
		s.proto, s.src, s.dst, s.l4 = ip.NextHeader(), ip.Src(), ip.Dst(), ip.Payload()
	default:
		return s, fmt.Errorf("ethertype %#x", eth.Type())
	}
	if s.proto != header.ProtocolTCP {
		return s, fmt.Errorf("protocol %d, want TCP", s.proto)
	}
	th := header.TCP(s.l4)
	if !th.IsValid() {
		return s, fmt.Errorf("invalid TCP header %x", s.l4)
	}
	ps := header.PseudoHeaderChecksum(header.ProtocolTCP, s.src.AsSlice(), s.dst.AsSlice(), uint32(len(s.l4)))
	if header.Checksum(s.l4, ps) != 0xffff {
		return s, fmt.Errorf("bad TCP checksum in %x", s.l4[:20])
	}
	s.sport, s.dport = th.SrcPort(), th.DstPort()
	s.seq, s.ack, s.flags, s.wnd = th.Seq(), th.Ack(), th.Flags(), th.Window()
	s.payload = append([]byte(nil), th.Payload()...)
	if !header.ParseTCPOptions(th.Options(), &s.opts) {
		return s, fmt.Errorf("malformed options %x", th.Options())
	}
	return s, nil
}

// tcpFrame builds a segment from the namespace with valid checksums.
func tcpFrame(src, dst netip.Addr, sport, dport uint16, seq, ack uint32, flags uint8, wnd uint16, opts, payload []byte) []byte {
	thLen := header.TCPMinimumSize + len(opts)
	l4len := thLen + len(payload)
	return ipFrame(header.ProtocolTCP, src, dst, l4len, func(l4 []byte, ps uint16) {
		th := header.TCP(l4)
		th.Encode(&header.TCPFields{SrcPort: sport, DstPort: dport, Seq: seq, Ack: ack,
			DataOffset: thLen, Flags: flags, Window: wnd})
		copy(l4[header.TCPMinimumSize:], opts)
		copy(l4[thLen:], payload)
		th.SetChecksum(th.CalculateChecksum(ps))
	})
}

// synOpts encodes MSS (0: none) and window scale (<0: none).
func synOpts(mss uint16, ws int) []byte {
	var b []byte
	if mss != 0 {
		b = append(b, 2, 4, byte(mss>>8), byte(mss))
	}
	if ws >= 0 {
		b = append(b, 1, 3, 3, byte(ws))
	}
	for len(b)%4 != 0 {
		b = append(b, 1)
	}
	return b
}

// nsConn plays the namespace's end of one connection.
type nsConn struct {
	h            *tcpHarness
	src, dst     netip.Addr
	sport, dport uint16
	iss          uint32 // our initial sequence number
	seq          uint32 // next sequence number we send
	irs          uint32 // the engine's initial sequence number
	ack          uint32 // next sequence number we expect
	wnd          uint16 // raw window we advertise
	ws           int    // the shift we announced (-1 none)
	peerWS       int    // the engine's shift (-1 none)
	mss          uint16 // what the engine announced
	idx          int32  // flow index
}

func (h *tcpHarness) nsConn(src, dst netip.Addr, sport, dport uint16) *nsConn {
	return &nsConn{h: h, src: src, dst: dst, sport: sport, dport: dport,
		iss: 1000000, seq: 1000000, wnd: 65535, ws: -1, peerWS: -1, idx: -1}
}

func (c *nsConn) frame(flags uint8, seq, ack uint32, payload []byte) []byte {
	return tcpFrame(c.src, c.dst, c.sport, c.dport, seq, ack, flags, c.wnd, nil, payload)
}

func (c *nsConn) mine(s *tcpSeg) bool {
	return s.src == c.dst && s.dst == c.src && s.sport == c.dport && s.dport == c.sport
}

// syn sends our SYN with the given options.
func (c *nsConn) syn(mss uint16, ws int) {
	c.ws = ws
	c.h.send(tcpFrame(c.src, c.dst, c.sport, c.dport, c.iss, 0, header.TCPFlagSYN, c.wnd, synOpts(mss, ws), nil))
	c.seq = c.iss + 1
}

// open completes a handshake from the namespace and returns the SYN-ACK.
func (c *nsConn) open(mss uint16, ws int) tcpSeg {
	t := c.h.t
	t.Helper()
	c.syn(mss, ws)
	sa := c.h.take("SYN-ACK", func(s *tcpSeg) bool { return c.mine(s) })
	if !sa.has(header.TCPFlagSYN | header.TCPFlagACK) {
		t.Fatalf("answer to SYN: %v, want SYN-ACK", sa)
	}
	if sa.ack != c.iss+1 {
		t.Fatalf("SYN-ACK ack %d, want %d", sa.ack, c.iss+1)
	}
	c.irs, c.ack, c.mss, c.peerWS = sa.seq, sa.seq+1, sa.opts.MSS, sa.opts.WS
	c.send(header.TCPFlagACK, nil)
	c.idx = c.flowIdx()
	return sa
}

func (c *nsConn) flowIdx() int32 {
	k := flowKey{proto: header.ProtocolTCP, nsPort: c.sport, dstPort: c.dport, ns: c.src.As16(), dst: c.dst.As16()}
	return c.h.e.ft.lookup(&k)
}

// send sends one segment at our current sequence number and advances it.
func (c *nsConn) send(flags uint8, payload []byte) {
	c.h.send(c.frame(flags, c.seq, c.ack, payload))
	c.seq += uint32(len(payload))
	if flags&header.TCPFlagFIN != 0 {
		c.seq++
	}
}

func (c *nsConn) conn() *tcpConn { return c.h.tr().conn(c.idx) }
func (c *nsConn) fd() int        { return c.h.e.flow(c.idx).Fd }

// window returns the engine's advertised window in bytes.
func (c *nsConn) window(s *tcpSeg) uint32 {
	if c.peerWS < 0 || s.has(header.TCPFlagSYN) {
		return uint32(s.wnd)
	}
	return uint32(s.wnd) << c.peerWS
}

// recv collects n bytes of in-order data from the engine, acknowledging
// each segment, and checks each against the window and MSS.
func (c *nsConn) recv(n int) []byte {
	t := c.h.t
	t.Helper()
	var got []byte
	wndBytes := uint32(c.wnd)
	if c.ws > 0 {
		wndBytes <<= c.ws
	}
	for len(got) < n {
		s := c.h.take("data", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
		if len(s.payload) > int(c.mss) {
			t.Errorf("segment of %d bytes, over the MSS %d", len(s.payload), c.mss)
		}
		if s.seq != c.ack {
			continue // a retransmission of what we have, or beyond a hole
		}
		got = append(got, s.payload...)
		c.ack += uint32(len(s.payload))
		c.send(header.TCPFlagACK, nil)
	}
	_ = wndBytes
	return got
}

// tcpServer listens on addr and hands accepted connections over.
type tcpServer struct {
	ln    *net.TCPListener
	port  uint16
	conns chan *net.TCPConn
}

func listenTCP(t *testing.T, addr string) *tcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	s := &tcpServer{ln: ln.(*net.TCPListener), port: uint16(ln.Addr().(*net.TCPAddr).Port), conns: make(chan *net.TCPConn, 16)}
	go func() {
		for {
			c, err := s.ln.AcceptTCP()
			if err != nil {
				close(s.conns)
				return
			}
			s.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range s.conns {
			c.Close()
		}
	})
	return s
}

func (s *tcpServer) accept(t *testing.T) *net.TCPConn {
	t.Helper()
	select {
	case c := <-s.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("host server accepted nothing within 5 s")
		return nil
	}
}

// readN reads exactly n bytes from c with a deadline.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("host read of %d bytes: %v", n, err)
	}
	return b
}

// pattern returns n bytes of a recognisable stream starting at offset off.
func pattern(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = patByte(off + i)
	}
	return b
}

func patByte(i int) byte { return byte(i*7 + i>>8 + 1) }

// fdOpen reports whether descriptor fd is open in this process.
func fdOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// inq returns the bytes waiting in a socket's receive queue.
func inq(t *testing.T, fd int) int {
	t.Helper()
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	if err != nil {
		t.Fatalf("SIOCINQ: %v", err)
	}
	return n
}

type tcpFamily struct {
	name, listen string
	ns, gw       netip.Addr
	hdr          int // IP + TCP header bytes
}

var tcpFamilies = []tcpFamily{
	{"ipv4", "127.0.0.1:0", ns4, gw4, 40},
	{"ipv6", "[::1]:0", ns6, gw6, 60},
}

func paramsMTU(mtu int) *NetParams {
	p := testParams()
	p.MTU = mtu
	return p
}

// TestTCPHandshake checks the SYN-ACK: sent only once the host connection
// is up, acknowledging the SYN, with an MSS no larger than the SYN's or the
// MTU allows and window scaling only when the SYN offered it.
func TestTCPHandshake(t *testing.T) {
	for _, fam := range tcpFamilies {
		for _, tc := range []struct {
			name    string
			mtu     int
			synMSS  uint16
			synWS   int
			wantMSS func(hdr int) uint16
		}{
			{"small SYN MSS", 65520, 1000, 5, func(int) uint16 { return 1000 }},
			{"MTU bound", 1500, 9000, 7, func(h int) uint16 { return uint16(1500 - h) }},
			{"no MSS option", 65520, 0, -1, func(h int) uint16 {
				if h == 60 {
					return 1220
				}
				return 536
			}},
		} {
			t.Run(fam.name+"/"+tc.name, func(t *testing.T) {
				h := newTCPHarness(t, paramsMTU(tc.mtu), Options{})
				srv := listenTCP(t, fam.listen)
				c := h.nsConn(fam.ns, fam.gw, 40001, srv.port)
				sa := c.open(tc.synMSS, tc.synWS)
				if got, want := sa.opts.MSS, tc.wantMSS(fam.hdr); got != want {
					t.Errorf("SYN-ACK MSS %d, want %d", got, want)
				}
				wantWS := -1
				if tc.synWS >= 0 {
					wantWS = tcpWindowScale
				}
				if sa.opts.WS != wantWS {
					t.Errorf("SYN-ACK window scale %d, want %d", sa.opts.WS, wantWS)
				}
				if sa.src != fam.gw || sa.dst != fam.ns || sa.sport != srv.port || sa.dport != 40001 {
					t.Errorf("SYN-ACK %v:%d -> %v:%d, want %v:%d -> %v:%d", sa.src, sa.sport, sa.dst, sa.dport,
						fam.gw, srv.port, fam.ns, 40001)
				}
				if sa.wnd == 0 {
					t.Errorf("SYN-ACK offers a zero window")
				}
				hc := srv.accept(t)
				if got := c.conn().state; got != tcpEstablished {
					t.Errorf("state after the ACK %d, want established (%d)", got, tcpEstablished)
				}
				if h.e.FlowCount() != 1 || h.e.Stats().FlowsTCP != 1 {
					t.Errorf("FlowCount %d, want 1", h.e.FlowCount())
				}
				// A retransmitted SYN after the handshake changes nothing.
				h.send(tcpFrame(c.src, c.dst, c.sport, c.dport, c.iss, 0, header.TCPFlagSYN, c.wnd, synOpts(1000, 5), nil))
				c.send(header.TCPFlagACK|header.TCPFlagPSH, []byte("ping"))
				if got := readN(t, hc, 4); string(got) != "ping" {
					t.Errorf("host read %q, want ping", got)
				}
			})
		}
	}
}

// TestTCPSynAckRetransmit: a lost SYN-ACK is sent again when the SYN is,
// and on the retransmission timer.
func TestTCPSynAckRetransmit(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	srv := listenTCP(t, "127.0.0.1:0")
	c := h.nsConn(ns4, gw4, 40002, srv.port)
	c.syn(1460, 7)
	first := h.take("SYN-ACK", c.mine)
	c.syn(1460, 7)
	again := h.take("SYN-ACK again", c.mine)
	if !again.has(header.TCPFlagSYN|header.TCPFlagACK) || again.seq != first.seq {
		t.Errorf("answer to a repeated SYN %v, want the same SYN-ACK as %v", again, first)
	}
	h.advance(300 * time.Millisecond)
	rto := h.take("SYN-ACK on timeout", c.mine)
	if !rto.has(header.TCPFlagSYN|header.TCPFlagACK) || rto.seq != first.seq {
		t.Errorf("after the RTO %v, want the SYN-ACK again", rto)
	}
}

// TestTCPConnectRefused: a refused connect() becomes RST|ACK for the SYN.
func TestTCPConnectRefused(t *testing.T) {
	for _, fam := range tcpFamilies {
		t.Run(fam.name, func(t *testing.T) {
			h := newTCPHarness(t, testParams(), Options{})
			port := nstest.FreePort(t, fam.listen)
			c := h.nsConn(fam.ns, fam.gw, 40003, port)
			c.syn(1460, 7)
			rst := h.take("reset", c.mine)
			if !rst.has(header.TCPFlagRST|header.TCPFlagACK) || rst.ack != c.iss+1 {
				t.Errorf("answer to a SYN to a closed port %v, want RST|ACK ack=%d", rst, c.iss+1)
			}
			h.cycle(0)
			if h.e.FlowCount() != 0 {
				t.Errorf("FlowCount %d after the refusal, want 0", h.e.FlowCount())
			}
		})
	}
}

// blackHole returns the port of a listener whose accept queue is full, so
// the kernel drops further SYNs to it: a connect() that never completes.
func blackHole(t *testing.T) uint16 {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	port := sa.(*unix.SockaddrInet4).Port
	// Backlog 0 holds one connection; fill it.
	for range 2 {
		c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	return uint16(port)
}

// TestTCPSynTimeout: when the host never answers, the attempt is given up
// after the SYN timeout (engine clock) without a reset, as a lost SYN: the
// flow and its host socket are gone, the namespace hears nothing (its own
// stack times out, or its next SYN tries again), and a retransmitted SYN
// after that opens a new attempt.
func TestTCPSynTimeout(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	port := blackHole(t)
	c := h.nsConn(ns4, gw4, 40004, port)
	c.syn(1460, 7)
	idx := c.flowIdx()
	if idx < 0 {
		t.Fatalf("no flow for the SYN")
	}
	fd := h.e.flow(idx).Fd
	h.none("answer before the host connected", c.mine)
	h.advance(time.Duration(tcpSynTimeout) - time.Second)
	h.none("answer before the SYN timeout", c.mine)
	// A retransmitted SYN must not push the timeout back.
	c.syn(1460, 7)
	h.advance(2 * time.Second)
	h.none("answer after the SYN timeout (a reset would say refused)", c.mine)
	if h.e.FlowCount() != 0 {
		t.Errorf("flows after the SYN timeout: got %d, want 0", h.e.FlowCount())
	}
	if fdOpen(fd) {
		t.Errorf("host socket %d still open after the SYN timeout", fd)
	}
	// The namespace's next retransmission is a new attempt.
	c.syn(1460, 7)
	if c.flowIdx() < 0 || h.e.FlowCount() != 1 {
		t.Errorf("SYN after the timeout: got %d flows, want a new attempt", h.e.FlowCount())
	}
}

// established opens a connection from the namespace to a fresh loopback
// server and returns both ends.
func established(t *testing.T, h *tcpHarness, fam tcpFamily, sport uint16, mss uint16, ws int) (*nsConn, *net.TCPConn) {
	t.Helper()
	srv := listenTCP(t, fam.listen)
	c := h.nsConn(fam.ns, fam.gw, sport, srv.port)
	c.open(mss, ws)
	return c, srv.accept(t)
}

// TestTCPToHost checks namespace-to-host data: in order, out of order
// (answered at once with a duplicate ACK, nothing delivered early) and
// overlapping retransmissions (only new bytes delivered).
func TestTCPToHost(t *testing.T) {
	for _, fam := range tcpFamilies {
		t.Run(fam.name, func(t *testing.T) {
			h := newTCPHarness(t, testParams(), Options{})
			c, hc := established(t, h, fam, 40010, 1460, 7)
			base := c.seq

			// In order, several segments in one batch: one ACK covers them.
			var batch [][]byte
			for i := range 4 {
				batch = append(batch, c.frame(header.TCPFlagACK, base+uint32(i*100), c.ack, pattern(i*100, 100)))
			}
			h.send(batch...)
			c.seq = base + 400
			if got := readN(t, hc, 400); !bytes.Equal(got, pattern(0, 400)) {
				t.Fatalf("host got %x, want the first 400 bytes", got)
			}
			a := h.take("ACK", c.mine)
			if a.ack != base+400 {
				t.Errorf("ACK %d, want %d", a.ack-base, 400)
			}

			// Out of order: 500..600 before 400..500.
			h.send(c.frame(header.TCPFlagACK, base+500, c.ack, pattern(500, 100)))
			dup := h.take("duplicate ACK", c.mine)
			if dup.ack != base+400 || len(dup.payload) != 0 {
				t.Errorf("answer to an out-of-order segment %v, want a duplicate ACK of %d", dup, 400)
			}
			hc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if n, _ := hc.Read(make([]byte, 10)); n != 0 {
				t.Errorf("host got %d bytes of out-of-order data", n)
			}
			h.send(c.frame(header.TCPFlagACK, base+400, c.ack, pattern(400, 100)))
			if a := h.take("ACK", c.mine); a.ack != base+500 {
				t.Errorf("ACK after filling the hole %d, want 500 (the segment beyond was not kept)", a.ack-base)
			}
			// Overlap: 450..650 brings 150 new bytes.
			h.send(c.frame(header.TCPFlagACK, base+450, c.ack, pattern(450, 200)))
			if a := h.take("ACK", c.mine); a.ack != base+650 {
				t.Errorf("ACK after an overlapping segment %d, want 650", a.ack-base)
			}
			// A pure retransmission of old data is re-acknowledged.
			h.send(c.frame(header.TCPFlagACK, base+100, c.ack, pattern(100, 100)))
			if a := h.take("re-ACK", c.mine); a.ack != base+650 {
				t.Errorf("re-ACK %d, want 650", a.ack-base)
			}
			if got := readN(t, hc, 250); !bytes.Equal(got, pattern(400, 250)) {
				t.Errorf("host got %x, want bytes 400..650 once", got)
			}
			hc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if n, _ := hc.Read(make([]byte, 10)); n != 0 {
				t.Errorf("host got %d extra bytes", n)
			}
		})
	}
}

// TestTCPRenoToLocalPeer: a connection to a peer on this host keeps the
// host's default congestion control until sock.RenoAfter bytes from the
// namespace have gone to it, and has reno from then on.
func TestTCPRenoToLocalPeer(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	def := nstest.CongestionNotReno(t)
	c, hc := established(t, h, tcpFamilies[0], 40012, 1460, 7)
	const seg, batch = 1000, 16
	for sent := 0; sent < sock.RenoAfter+seg*batch; sent += seg * batch {
		want := def
		if sent >= sock.RenoAfter {
			want = "reno"
		}
		if got, err := unix.GetsockoptString(c.fd(), unix.IPPROTO_TCP, unix.TCP_CONGESTION); got != want || err != nil {
			t.Fatalf("after %d bytes to the host: got congestion control %q (%v), want %q", sent, got, err, want)
		}
		var frames [][]byte
		for i := range batch {
			frames = append(frames, c.frame(header.TCPFlagACK, c.seq+uint32(i*seg), c.ack, pattern(sent+i*seg, seg)))
		}
		h.send(frames...)
		c.seq += seg * batch
		if got := readN(t, hc, seg*batch); !bytes.Equal(got, pattern(sent, seg*batch)) {
			t.Fatalf("host got %d bytes unlike those sent at %d", len(got), sent)
		}
		h.take("ACK", c.mine)
	}
}

// TestTCPSendBufferFull: when the host socket takes only part of a batch,
// the rest is not acknowledged, the window drops, and EPOLLOUT reopens it
// with a window update; the namespace's resend then completes the stream.
func TestTCPSendBufferFull(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	fam := tcpFamilies[0]
	srv := listenTCP(t, fam.listen)
	// A small receive buffer on the accepting side (set before the
	// connection exists, so the handshake's window reflects it).
	rc, _ := srv.ln.SyscallConn()
	rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	c := h.nsConn(fam.ns, fam.gw, 40011, srv.port)
	c.open(65000, 7)
	hc := srv.accept(t)
	if err := unix.SetsockoptInt(c.fd(), unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	base := c.seq
	const seg, total = 16384, 32 * 16384
	var frames [][]byte
	for off := 0; off < total; off += seg {
		frames = append(frames, c.frame(header.TCPFlagACK, base+uint32(off), c.ack, pattern(off, seg)))
	}
	h.send(frames...)
	a := h.take("ACK", c.mine)
	acked := int(a.ack - base)
	if acked <= 0 || acked >= total {
		t.Fatalf("ACK after a batch bigger than the send buffer covers %d of %d bytes, want part", acked, total)
	}
	if w := c.window(&a); w >= uint32(total) {
		t.Errorf("window %d with a full send buffer, want it small", w)
	}
	// Nothing beyond the ACK was passed on, and the rest arrives once the
	// namespace resends it as the window reopens.
	var got []byte
	updates := 0
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < total && time.Now().Before(deadline) {
		if len(got) < acked {
			hc.SetReadDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 65536)
			n, err := hc.Read(b)
			if err != nil {
				t.Fatalf("host read after %d bytes: %v", len(got), err)
			}
			got = append(got, b[:n]...)
			acked = max(acked, int(uint32(c.conn().seqFromNS)-base))
			if len(got) > acked {
				t.Fatalf("host got %d bytes, more than the %d acknowledged", len(got), acked)
			}
			if !bytes.Equal(got, pattern(0, len(got))) {
				t.Fatalf("host stream differs within the first %d bytes", len(got))
			}
			continue
		}
		// Everything acknowledged is delivered: the engine must reopen
		// the window now that the host reads; resend from the ACK.
		upd := h.take("window update", func(s *tcpSeg) bool {
			return c.mine(s) && c.window(s) > 0 && int(s.ack-base) >= acked
		})
		updates++
		if int(upd.ack-base) < acked {
			t.Fatalf("ACK went back from %d to %d", acked, upd.ack-base)
		}
		acked = int(upd.ack - base)
		end := min(acked+int(c.window(&upd)), total)
		var fr [][]byte
		for off := acked; off < end; off += seg {
			fr = append(fr, c.frame(header.TCPFlagACK, base+uint32(off), c.ack, pattern(off, min(seg, end-off))))
		}
		h.send(fr...)
	}
	if updates == 0 {
		t.Errorf("no window update seen")
	}
	if len(got) != total {
		t.Errorf("host got %d bytes, want %d", len(got), total)
	}
}

// TestTCPToNS checks host-to-namespace data: within the namespace's window
// and MSS, removed from the host socket only once acknowledged, sent again
// from the ACK point after three duplicate ACKs and after a timeout, and an
// ACK for more than was sent since a rewind.
func TestTCPToNS(t *testing.T) {
	for _, fam := range tcpFamilies {
		t.Run(fam.name, func(t *testing.T) {
			h := newTCPHarness(t, testParams(), Options{})
			c, hc := established(t, h, fam, 40020, 1000, 2)
			c.wnd = 2500 // << 2: 10000 bytes
			c.send(header.TCPFlagACK, nil)
			const total = 60000
			if _, err := hc.Write(pattern(0, total)); err != nil {
				t.Fatal(err)
			}
			base := c.irs + 1
			// Take what the window allows, without acknowledging.
			var inflight []tcpSeg
			h.until("a window of data", func() bool {
				for _, s := range h.seg {
					if c.mine(&s) && len(s.payload) > 0 {
						inflight = append(inflight, s)
					}
				}
				h.seg = h.seg[:0]
				n := 0
				for _, s := range inflight {
					n += len(s.payload)
				}
				return n >= 10000
			})
			end := uint32(0)
			for _, s := range inflight {
				if len(s.payload) > 1000 {
					t.Errorf("segment of %d bytes, MSS 1000", len(s.payload))
				}
				if e := s.seq + uint32(len(s.payload)) - base; e > 10000 {
					t.Errorf("segment ends at %d, beyond the window of 10000", e)
				}
				if !bytes.Equal(s.payload, pattern(int(s.seq-base), len(s.payload))) {
					t.Errorf("segment at %d: wrong content", s.seq-base)
				}
				end = max(end, s.seq+uint32(len(s.payload))-base)
			}
			h.none("data beyond the window", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
			if got := inq(t, c.fd()); got != total {
				t.Errorf("host socket holds %d bytes before any ACK, want all %d", got, total)
			}
			// ACK 3000: exactly that much leaves the host socket.
			c.ack = base + 3000
			c.send(header.TCPFlagACK, nil)
			if got := inq(t, c.fd()); got != total-3000 {
				t.Errorf("host socket holds %d bytes after an ACK of 3000, want %d", got, total-3000)
			}
			// The window slid by 3000: new data up to 13000, none beyond.
			h.until("data after the ACK", func() bool {
				for _, s := range h.seg {
					if c.mine(&s) && len(s.payload) > 0 && s.seq+uint32(len(s.payload))-base == 13000 {
						return true
					}
				}
				return false
			})
			for _, s := range h.seg {
				if c.mine(&s) && s.seq+uint32(len(s.payload))-base > 13000 {
					t.Errorf("segment %v beyond the window's edge 13000", s)
				}
			}
			h.seg = nil

			// Three duplicate ACKs: everything from 3000 comes again.
			rx := h.e.Stats().Retransmits
			for range 3 {
				c.send(header.TCPFlagACK, nil)
			}
			s := h.take("fast retransmission", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
			if s.seq-base != 3000 || !bytes.Equal(s.payload, pattern(3000, len(s.payload))) {
				t.Errorf("after 3 duplicate ACKs got %v at %d, want data from 3000", s, s.seq-base)
			}
			if h.e.Stats().Retransmits != rx+1 {
				t.Errorf("Retransmits %d, want %d", h.e.Stats().Retransmits, rx+1)
			}
			// The resent segments make the namespace ACK again for
			// each one it already had: echoes of the same loss, which
			// must not rewind again (RFC 6582's recovery point).
			for range 6 {
				c.send(header.TCPFlagACK, nil)
			}
			if h.e.Stats().Retransmits != rx+1 {
				t.Errorf("after 6 more duplicate ACKs in recovery: Retransmits %d, want %d", h.e.Stats().Retransmits, rx+1)
			}
			h.seg = nil

			// Timeout: again from 3000.
			h.advance(300 * time.Millisecond)
			s = h.take("retransmission on timeout", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
			if s.seq-base != 3000 || !bytes.Equal(s.payload, pattern(3000, len(s.payload))) {
				t.Errorf("after the RTO got %v at %d, want data from 3000", s, s.seq-base)
			}
			h.seg = nil

			// The namespace had it all: an ACK of 13000, beyond what went
			// out since the rewind, is taken and sending resumes there.
			c.ack = base + 13000
			c.send(header.TCPFlagACK, nil)
			h.none("reset", func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagRST) })
			if got := inq(t, c.fd()); got > total-13000 {
				t.Errorf("host socket holds %d bytes after an ACK of 13000, want at most %d", got, total-13000)
			}
			// Receive the rest in order and compare.
			c.wnd = 65535
			c.send(header.TCPFlagACK, nil)
			rest := c.recv(total - 13000)
			if !bytes.Equal(rest, pattern(13000, total-13000)) {
				t.Errorf("bytes 13000..%d differ", total)
			}
		})
	}
}

// TestTCPFinBothWays: a FIN from the namespace reaches the host as EOF
// while the host can still send; the host's EOF becomes our FIN after all
// its data; once both FINs are acknowledged the flow and its socket go.
func TestTCPFinBothWays(t *testing.T) {
	for _, nsFirst := range []bool{true, false} {
		name := "host first"
		if nsFirst {
			name = "namespace first"
		}
		t.Run(name, func(t *testing.T) {
			h := newTCPHarness(t, testParams(), Options{})
			c, hc := established(t, h, tcpFamilies[0], 40030, 1460, 7)
			fd := c.fd()
			if nsFirst {
				c.send(header.TCPFlagACK|header.TCPFlagFIN, []byte("bye"))
				if a := h.take("ACK of the FIN", c.mine); a.ack != c.seq {
					t.Errorf("ACK %d, want %d (data and FIN)", a.ack-c.iss, c.seq-c.iss)
				}
				hc.SetReadDeadline(time.Now().Add(5 * time.Second))
				b, err := io.ReadAll(hc)
				if err != nil || string(b) != "bye" {
					t.Fatalf("host read %q, %v; want \"bye\" and EOF", b, err)
				}
				// Half-closed: the host still sends.
				hc.Write([]byte("still here"))
				if got := c.recv(10); string(got) != "still here" {
					t.Errorf("namespace got %q after its FIN", got)
				}
			}
			hc.Write([]byte("last words"))
			hc.CloseWrite()
			if !nsFirst {
				if got := c.recv(10); string(got) != "last words" {
					t.Errorf("namespace got %q", got)
				}
			} else if got := c.recv(10); string(got) != "last words" {
				t.Errorf("namespace got %q", got)
			}
			fin := h.take("FIN", func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagFIN) })
			if fin.seq != c.ack {
				t.Errorf("FIN at %d, want right after the data at %d", fin.seq-c.irs, c.ack-c.irs)
			}
			c.ack++
			c.send(header.TCPFlagACK, nil)
			if !nsFirst {
				if h.e.FlowCount() != 1 {
					t.Fatalf("flow gone with the namespace's side still open")
				}
				c.send(header.TCPFlagACK|header.TCPFlagFIN, nil)
				hc.SetReadDeadline(time.Now().Add(5 * time.Second))
				if b, err := io.ReadAll(hc); err != nil || len(b) != 0 {
					t.Errorf("host read %q, %v; want EOF", b, err)
				}
			}
			if h.e.FlowCount() != 0 {
				t.Errorf("FlowCount %d after both FINs were acknowledged, want 0", h.e.FlowCount())
			}
			if fdOpen(fd) {
				t.Errorf("host socket %d still open", fd)
			}
		})
	}
}

// TestTCPFinAfterRewind: our FIN is acknowledged after a timeout rewound
// the stream: no second FIN, and the flow closes normally.
func TestTCPFinAfterRewind(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	c, hc := established(t, h, tcpFamilies[0], 40031, 1460, 7)
	hc.Write([]byte("hello"))
	h.take("data", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
	hc.CloseWrite() // a later edge: the FIN follows unacknowledged data
	fin := h.take("FIN", func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagFIN) })
	if fin.seq != c.ack+5 {
		t.Fatalf("FIN at %d, want %d", fin.seq-c.irs, c.ack+5-c.irs)
	}
	h.advance(300 * time.Millisecond) // no ACK yet: rewind and resend (the FIN too)
	h.seg = nil
	// The original data and FIN did arrive: ACK all of it. From here on,
	// no FIN may go out again.
	c.ack = fin.seq + 1
	c.send(header.TCPFlagACK, nil)
	c.send(header.TCPFlagACK|header.TCPFlagFIN, nil)
	for _, s := range h.seg {
		if c.mine(&s) && s.has(header.TCPFlagFIN) {
			t.Errorf("FIN sent again after it was acknowledged: %v (first at seq %d)", s, fin.seq)
		}
	}
	h.cycle(0)
	if h.e.FlowCount() != 0 {
		t.Errorf("FlowCount %d after both FINs were acknowledged, want 0", h.e.FlowCount())
	}
}

// TestTCPResets: a reset from the namespace in the window aborts the host
// connection, one outside it is ignored; a reset from the host peer is
// passed on as RST.
func TestTCPResets(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	c, hc := established(t, h, tcpFamilies[0], 40040, 1460, 7)
	h.send(c.frame(header.TCPFlagRST, c.seq+1<<30, 0, nil))
	if h.e.FlowCount() != 1 {
		t.Fatalf("an out-of-window reset closed the flow")
	}
	c.send(header.TCPFlagACK, []byte("alive"))
	if got := readN(t, hc, 5); string(got) != "alive" {
		t.Errorf("host read %q", got)
	}
	fd := c.fd()
	h.send(c.frame(header.TCPFlagRST, c.seq, 0, nil))
	if h.e.FlowCount() != 0 || fdOpen(fd) {
		t.Errorf("after an in-window reset: FlowCount %d, socket open %v; want 0, false", h.e.FlowCount(), fdOpen(fd))
	}
	hc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := hc.Read(make([]byte, 1)); !errors.Is(err, unix.ECONNRESET) {
		t.Errorf("host peer read: %v, want ECONNRESET", err)
	}

	// The host peer resets.
	c2, hc2 := established(t, h, tcpFamilies[0], 40041, 1460, 7)
	hc2.SetLinger(0)
	hc2.Close()
	rst := h.take("reset", func(s *tcpSeg) bool { return c2.mine(s) && s.has(header.TCPFlagRST) })
	if rst.seq != c2.ack {
		t.Errorf("RST seq %d, want %d", rst.seq, c2.ack)
	}
	h.cycle(0)
	if h.e.FlowCount() != 0 {
		t.Errorf("FlowCount %d after the host reset, want 0", h.e.FlowCount())
	}
}

// TestTCPForgedSegments: segments that a process in the namespace could
// forge without knowing a connection's sequence numbers leave the
// connection as it was: a reset in the window but not at the exact number
// gets a challenge ACK and closes nothing (the exact one then does); an
// ACK of data never sent is answered and its payload dropped; a segment
// further off than any window carries neither ACK nor window; and an
// older segment's window does not replace a newer one's.
func TestTCPForgedSegments(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	c, hc := established(t, h, tcpFamilies[0], 40050, 1460, 7)
	unacceptable := func() uint64 { return h.e.Stats().Drops[DropUnacceptable] }
	challenge := func(what string) {
		t.Helper()
		a := h.take("the answer to "+what, func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagACK) })
		if a.ack != c.seq || len(a.payload) != 0 || a.has(header.TCPFlagRST) {
			t.Fatalf("answer to %s: %v, want a bare ACK of %d", what, a, c.seq)
		}
		if h.e.FlowCount() != 1 {
			t.Fatalf("after %s: FlowCount %d, want 1", what, h.e.FlowCount())
		}
	}

	for i, off := range []uint32{1, 1000, 60000} {
		h.seg = nil
		before := unacceptable()
		h.send(c.frame(header.TCPFlagRST, c.seq+off, 0, nil))
		challenge(fmt.Sprintf("a reset %d past the next sequence number", off))
		if got := unacceptable(); got != before+1 {
			t.Errorf("reset %d: drops %d, want %d", i, got, before+1)
		}
	}

	h.seg = nil
	h.send(c.frame(header.TCPFlagACK|header.TCPFlagPSH, c.seq, c.ack+5000, []byte("forged")))
	challenge("an ACK of data never sent")

	// Data from the host in flight, then a segment 1 GiB ahead
	// acknowledging it: the data is still unacknowledged (sent again on
	// the retransmission timer), and the zero window it carried did not
	// shut the window.
	h.seg = nil
	hc.Write([]byte("in flight"))
	d := h.take("data", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
	end := d.seq + uint32(len(d.payload))
	h.seg = nil
	wnd := c.wnd
	c.wnd = 0
	h.send(c.frame(header.TCPFlagACK, c.seq+1<<30, end, nil))
	challenge("a segment 1 GiB ahead")
	if got := c.conn().seqAckedByNS; got == seqnum.Value(end) {
		t.Errorf("the segment 1 GiB ahead acknowledged the host's data")
	}
	if got := c.conn().wndFromNS; got == 0 {
		t.Errorf("the segment 1 GiB ahead shut the window with its zero window")
	}
	c.wnd = wnd
	c.ack = end
	c.send(header.TCPFlagACK, nil)
	if got := c.conn().seqAckedByNS; got != seqnum.Value(end) {
		t.Errorf("the namespace's own ACK: acknowledged up to %d, want %d", got, end)
	}
	// An older segment (a keepalive, one behind) with a zero window
	// after a newer one with an open window: the window stays open.
	c.wnd = 0
	h.send(c.frame(header.TCPFlagACK, c.seq-1, c.ack, nil))
	c.wnd = wnd
	h.seg = nil
	hc.Write([]byte("after"))
	if got := c.recv(5); string(got) != "after" {
		t.Fatalf("after an older segment's zero window the namespace got %q, want %q", got, "after")
	}

	// The flow is intact both ways, and the exact reset ends it.
	c.send(header.TCPFlagACK, []byte("alive"))
	if got := readN(t, hc, 5); string(got) != "alive" {
		t.Fatalf("host read %q, want %q", got, "alive")
	}
	h.send(c.frame(header.TCPFlagRST, c.seq, 0, nil))
	if h.e.FlowCount() != 0 {
		t.Errorf("after the exact reset: FlowCount %d, want 0", h.e.FlowCount())
	}
}

// hostPair returns a connected loopback pair: the accepted end as a raw
// non-blocking descriptor (what a forwarded port hands the engine) and the
// dialling end as the host peer.
func hostPair(t *testing.T, listen string) (fd int, peer *net.TCPConn, peerAddr netip.AddrPort) {
	t.Helper()
	srv := listenTCP(t, listen)
	d, err := net.Dial("tcp", srv.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	a := srv.accept(t)
	f, err := a.File()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	fd, err = unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	unix.SetNonblock(fd, true)
	return fd, d.(*net.TCPConn), d.LocalAddr().(*net.TCPAddr).AddrPort()
}

// TestTCPFromHost: a connection the host opens into the namespace: our SYN,
// the namespace's SYN-ACK, then data both ways — on a fresh engine that has
// not opened any connection of its own before. When the host peer wrote
// before the SYN-ACK came, the handshake's ACK is its first data segment,
// with no bare ACK ahead of it: that would complete the connection in the
// namespace on its own and wake the server to accept with nothing to read.
func TestTCPFromHost(t *testing.T) {
	for _, fam := range tcpFamilies {
		for _, early := range []bool{false, true} {
			name := fam.name + "/data after the handshake"
			if early {
				name = fam.name + "/data before the SYN-ACK"
			}
			t.Run(name, func(t *testing.T) {
				h := newTCPHarness(t, testParams(), Options{})
				fd, peer, _ := hostPair(t, fam.listen)
				from := netip.AddrPortFrom(fam.gw, 33333)
				to := netip.AddrPortFrom(fam.ns, 8080)
				if err := h.e.tcpFromHost(fd, from, to); err != nil {
					t.Fatalf("tcpFromHost: %v", err)
				}
				h.cycle(0)
				c := h.nsConn(fam.ns, fam.gw, 8080, 33333)
				syn := h.take("SYN", c.mine)
				if syn.flags != header.TCPFlagSYN || syn.opts.MSS == 0 || syn.opts.WS != tcpWindowScale {
					t.Fatalf("first segment %v (MSS %d, WS %d), want a SYN with MSS and WS", syn, syn.opts.MSS, syn.opts.WS)
				}
				if early {
					if _, err := peer.Write(pattern(0, 5000)); err != nil {
						t.Fatal(err)
					}
					h.until("the host socket to hold the data", func() bool {
						n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
						return err == nil && n == 5000
					})
				}
				c.irs, c.ack, c.peerWS, c.mss = syn.seq, syn.seq+1, syn.opts.WS, 1200
				c.ws = 0
				h.send(tcpFrame(c.src, c.dst, c.sport, c.dport, c.iss, c.ack, header.TCPFlagSYN|header.TCPFlagACK,
					c.wnd, synOpts(1200, 0), nil))
				c.seq = c.iss + 1
				c.idx = c.flowIdx()
				a := h.take("answer to the SYN-ACK", c.mine)
				if a.ack != c.seq || !a.has(header.TCPFlagACK) || a.seq != c.ack {
					t.Fatalf("answer to SYN-ACK %v, want ACK %d at seq %d", a, c.seq, c.ack)
				}
				if got, want := len(a.payload) > 0, early; got != want {
					t.Fatalf("answer to SYN-ACK %v: carries data %v, want %v", a, got, want)
				}
				if early {
					c.ack += uint32(len(a.payload))
					rest := c.recv(5000 - len(a.payload))
					if got := append(a.payload, rest...); !bytes.Equal(got, pattern(0, 5000)) {
						t.Errorf("namespace got wrong data from the host")
					}
				} else {
					if _, err := peer.Write(pattern(0, 5000)); err != nil {
						t.Fatal(err)
					}
					if got := c.recv(5000); !bytes.Equal(got, pattern(0, 5000)) {
						t.Errorf("namespace got wrong data from the host")
					}
				}
				c.send(header.TCPFlagACK|header.TCPFlagPSH, []byte("reply"))
				if got := readN(t, peer, 5); string(got) != "reply" {
					t.Errorf("host peer read %q, want reply", got)
				}
			})
		}
	}
}

// TestTCPFromHostRefused: the namespace answers our SYN with a reset: the
// host peer sees its connection reset.
func TestTCPFromHostRefused(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	fd, peer, _ := hostPair(t, "127.0.0.1:0")
	if err := h.e.tcpFromHost(fd, netip.AddrPortFrom(gw4, 33334), netip.AddrPortFrom(ns4, 8081)); err != nil {
		t.Fatal(err)
	}
	h.cycle(0)
	c := h.nsConn(ns4, gw4, 8081, 33334)
	syn := h.take("SYN", c.mine)
	h.send(c.frame(header.TCPFlagRST|header.TCPFlagACK, 0, syn.seq+1, nil))
	if h.e.FlowCount() != 0 {
		t.Errorf("FlowCount %d after the namespace refused, want 0", h.e.FlowCount())
	}
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, unix.ECONNRESET) {
		t.Errorf("host peer read: %v, want ECONNRESET", err)
	}
}

// TestTCPBadSegments: segments for no flow get a reset (unless they are
// resets); malformed ones are dropped and counted; an established flow in
// the same batches carries on undisturbed.
func TestTCPBadSegments(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	c, hc := established(t, h, tcpFamilies[0], 40050, 1460, 7)
	port := c.dport
	stray := func(flags uint8, seq, ack uint32, payload []byte) []byte {
		return tcpFrame(ns4, gw4, 40051, port, seq, ack, flags, 1000, nil, payload)
	}
	corrupt := func(b []byte, f func(th header.TCP)) []byte {
		th := header.TCP(b[34:])
		f(th)
		return b
	}
	cases := []struct {
		name  string
		frame []byte
		why   DropReason
		reset bool
	}{
		{"ACK without a flow", stray(header.TCPFlagACK, 5, 777, []byte("x")), DropNoFlow, true},
		{"FIN without a flow", stray(header.TCPFlagFIN|header.TCPFlagACK, 5, 778, nil), DropNoFlow, true},
		{"RST without a flow", stray(header.TCPFlagRST, 5, 0, nil), DropNoFlow, false},
		{"SYN+FIN", stray(header.TCPFlagSYN|header.TCPFlagFIN, 5, 0, nil), DropBadTransport, false},
		{"SYN+RST", stray(header.TCPFlagSYN|header.TCPFlagRST, 5, 0, nil), DropBadTransport, false},
		{"no ACK, SYN or RST", stray(header.TCPFlagPSH, 5, 0, []byte("x")), DropBadTransport, false},
		{"bad checksum", corrupt(stray(header.TCPFlagSYN, 5, 0, nil), func(th header.TCP) { th[16] ^= 0x55 }), DropBadChecksum, false},
		{"data offset beyond the segment", corrupt(stray(header.TCPFlagSYN, 5, 0, nil), func(th header.TCP) { th[12] = 0xf0 }), DropBadTransport, false},
		{"data offset below 5", corrupt(stray(header.TCPFlagSYN, 5, 0, nil), func(th header.TCP) { th[12] = 0x30 }), DropBadTransport, false},
		{"bad checksum on the flow", corrupt(c.frame(header.TCPFlagACK, c.seq, c.ack, []byte("evil")), func(th header.TCP) { th[20] ^= 1 }), DropBadChecksum, false},
		{"SYN+FIN on the flow", c.frame(header.TCPFlagSYN|header.TCPFlagFIN, c.seq, c.ack, nil), DropBadTransport, false},
	}
	// Truncated: an IP packet holding 12 bytes of TCP header.
	trunc := stray(header.TCPFlagSYN, 5, 0, nil)
	trunc = trunc[:14+20+12]
	header.IPv4(trunc[14:]).SetTotalLength(32)
	header.IPv4(trunc[14:]).SetChecksum(0)
	header.IPv4(trunc[14:]).SetChecksum(header.IPv4(trunc[14:]).CalculateChecksum())
	cases = append(cases, struct {
		name  string
		frame []byte
		why   DropReason
		reset bool
	}{"truncated header", trunc, DropTruncated, false})

	for i, tc := range cases {
		before := h.e.Stats().Drops[tc.why]
		msg := []byte(fmt.Sprintf("m%02d", i))
		good := c.frame(header.TCPFlagACK, c.seq, c.ack, msg)
		c.seq += uint32(len(msg))
		h.send(tc.frame, good)
		if got := h.e.Stats().Drops[tc.why]; got != before+1 {
			t.Errorf("%s: drops[%v] %d, want %d", tc.name, tc.why, got, before+1)
		}
		gotReset := false
		for _, s := range h.seg {
			if s.dport == 40051 {
				if !s.has(header.TCPFlagRST) {
					t.Errorf("%s: answered with %v, want nothing or RST", tc.name, s)
				}
				gotReset = true
				if s.seq != 777 && s.seq != 778 {
					t.Errorf("%s: RST seq %d, want the segment's ACK", tc.name, s.seq)
				}
			}
		}
		if gotReset != tc.reset {
			t.Errorf("%s: reset %v, want %v", tc.name, gotReset, tc.reset)
		}
		h.seg = nil
		if got := readN(t, hc, len(msg)); !bytes.Equal(got, msg) {
			t.Errorf("%s: flow's data %q, want %q", tc.name, got, msg)
		}
	}
	if h.e.FlowCount() != 1 {
		t.Errorf("FlowCount %d, want 1", h.e.FlowCount())
	}
}

// TestTCPTableFull: beyond the table's capacity new SYNs are reset while
// the existing flows carry on.
func TestTCPTableFull(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{FlowCapacity: 2})
	c1, hc1 := established(t, h, tcpFamilies[0], 40060, 1460, 7)
	c2, hc2 := established(t, h, tcpFamilies[0], 40061, 1460, 7)
	c3 := h.nsConn(ns4, gw4, 40062, c1.dport)
	c3.syn(1460, 7)
	rst := h.take("reset", c3.mine)
	if !rst.has(header.TCPFlagRST|header.TCPFlagACK) || rst.ack != c3.iss+1 {
		t.Errorf("SYN beyond capacity answered %v, want RST|ACK", rst)
	}
	if h.e.Stats().Drops[DropTableFull] != 1 {
		t.Errorf("table-full drops %d, want 1", h.e.Stats().Drops[DropTableFull])
	}
	c1.send(header.TCPFlagACK, []byte("one"))
	c2.send(header.TCPFlagACK, []byte("two"))
	if string(readN(t, hc1, 3)) != "one" || string(readN(t, hc2, 3)) != "two" {
		t.Errorf("existing flows disturbed")
	}
}

// rewoundTransfer sends total bytes host to namespace over c (what names
// it in errors), losing a segment a third of the way (three duplicate
// ACKs make the engine rewind), and checks the namespace got the stream
// intact.
func rewoundTransfer(t *testing.T, what string, h *tcpHarness, c *nsConn, hc *net.TCPConn, total int) {
	t.Helper()
	go hc.Write(pattern(0, total))
	got := c.recv(total / 3)
	h.seg = nil
	for range 3 {
		c.send(header.TCPFlagACK, nil)
	}
	got = append(got, c.recv(total-len(got))...)
	if !bytes.Equal(got, pattern(0, total)) {
		t.Errorf("%s: namespace got a different stream (%d bytes)", what, len(got))
	}
}

// TestTCPNoPeekOffset runs host-to-namespace data, with a rewind, as on
// kernels without SO_PEEK_OFF for TCP (before 6.10 for IPv4, 6.12 for
// IPv6): every peek starts at the head and skips what is in flight.
func TestTCPNoPeekOffset(t *testing.T) {
	for _, fam := range tcpFamilies {
		t.Run(fam.name, func(t *testing.T) {
			h := newTCPHarness(t, testParams(), Options{})
			tr := h.tr()
			tr.peekOff = [2]peekCap{peekUnsupported, peekUnsupported}
			tr.scratch = make([]byte, tcpMaxWindow)
			c, hc := established(t, h, fam, 40070, 1000, 0)
			rewoundTransfer(t, fam.name, h, c, hc, 200000)
			hc.CloseWrite()
			fin := h.take("FIN", func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagFIN) })
			if fin.seq != c.ack {
				t.Errorf("FIN at %d, want %d", fin.seq-c.irs, c.ack-c.irs)
			}
		})
	}
}

// peekOff4Only is the kernel as Linux 6.10 and 6.11 have it: SO_PEEK_OFF
// works on IPv4 TCP sockets and fails on IPv6 ones.
type peekOff4Only struct{ sysOps }

func (s peekOff4Only) setsockoptInt(fd, level, opt, val int) error {
	if level == unix.SOL_SOCKET && opt == unix.SO_PEEK_OFF {
		d, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
		if err != nil || d == unix.AF_INET6 {
			return unix.EOPNOTSUPP
		}
	}
	return s.sysOps.setsockoptInt(fd, level, opt, val)
}

// kernelPeekOff4 is what the running kernel says about SO_PEEK_OFF on an
// IPv4 TCP socket (before 6.10: unsupported).
func kernelPeekOff4(t *testing.T) peekCap {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	defer unix.Close(fd)
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEEK_OFF, 0) != nil {
		return peekUnsupported
	}
	return peekSupported
}

// TestTCPPeekOffsetPerFamily: on a kernel with SO_PEEK_OFF for one family
// only, flows of both families carry data (with a rewind), whichever
// family comes first; the capability is probed per family. With one probe
// for both, an IPv6 flow after an IPv4 one failed to open.
func TestTCPPeekOffsetPerFamily(t *testing.T) {
	for _, order := range [][]tcpFamily{
		{tcpFamilies[0], tcpFamilies[1]},
		{tcpFamilies[1], tcpFamilies[0]},
	} {
		t.Run(order[0].name+" first", func(t *testing.T) {
			h := newTCPHarness(t, testParams(), Options{})
			h.e.sys = peekOff4Only{h.e.sys}
			for i, fam := range order {
				c, hc := established(t, h, fam, uint16(40160+i), 1000, 0)
				rewoundTransfer(t, fam.name, h, c, hc, 100000)
			}
			want := [2]peekCap{kernelPeekOff4(t), peekUnsupported}
			if got := h.tr().peekOff; got != want {
				t.Errorf("peek offset per family %v, want %v", got, want)
			}
		})
	}
}

// TestTCPProbesAnswered: a zero-window or keepalive probe (a segment just
// before what we expect, carrying nothing) must be answered with an ACK,
// or the namespace's keepalive kills an idle connection and a lost window
// update stalls it.
func TestTCPProbesAnswered(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	c, _ := established(t, h, tcpFamilies[0], 40080, 1460, 7)
	h.seg = nil
	h.send(c.frame(header.TCPFlagACK, c.seq-1, c.ack, nil))
	a := h.take("ACK of a probe", c.mine)
	if a.ack != c.seq || len(a.payload) != 0 {
		t.Errorf("answer to a probe %v, want ACK %d", a, c.seq)
	}
}

// TestTCPZeroWindowProbe: with the namespace's window shut and its update
// lost, the retransmission timer sends a probe one byte behind, which a
// real stack answers with its window; the probe does not count as a retry.
func TestTCPZeroWindowProbe(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	c, hc := established(t, h, tcpFamilies[0], 40041, 1460, 7)
	c.wnd = 0
	c.send(header.TCPFlagACK, nil)
	hc.Write([]byte("waiting"))
	h.cycle(50)
	h.none("data into a zero window", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
	for i := range 3 {
		h.seg = nil
		h.advance(time.Duration(300<<i) * time.Millisecond)
		p := h.take("window probe", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) == 0 })
		if p.seq != c.ack-1 {
			t.Fatalf("probe at seq %d, want %d (one behind)", p.seq-c.irs, c.ack-1-c.irs)
		}
	}
	if h.e.FlowCount() != 1 {
		t.Fatal("flow closed while only the window was shut")
	}
	c.wnd = 65535
	c.send(header.TCPFlagACK, nil)
	if got := c.recv(7); string(got) != "waiting" {
		t.Errorf("after the window opened the namespace got %q, want %q", got, "waiting")
	}
}

// TestTCPBadHandshakeACK: an ACK that does not answer our SYN-ACK is
// refused with a reset, and its payload does not reach the host.
func TestTCPBadHandshakeACK(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	fam := tcpFamilies[0]
	srv := listenTCP(t, fam.listen)
	c := h.nsConn(fam.ns, fam.gw, 40051, srv.port)
	c.syn(1460, 7)
	sa := h.take("SYN-ACK", func(s *tcpSeg) bool { return c.mine(s) })
	bad := sa.seq + 1000
	h.send(c.frame(header.TCPFlagACK, c.seq, bad, []byte("smuggled")))
	rst := h.take("reset", func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagRST) })
	if rst.seq != bad {
		t.Errorf("reset seq %d, want the bad ACK %d", rst.seq, bad)
	}
	hc := srv.accept(t)
	hc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _ := hc.Read(make([]byte, 16)); n != 0 {
		t.Errorf("host got %d bytes of the refused segment, want 0", n)
	}
}

// TestTCPFromHostDuplicateTuple: a second host connection that the NAT
// would show the namespace as the same four-tuple is refused, and the first
// flow is left alone.
func TestTCPFromHostDuplicateTuple(t *testing.T) {
	fam := tcpFamilies[0]
	h := newTCPHarness(t, testParams(), Options{})
	from := netip.AddrPortFrom(fam.gw, 33334)
	to := netip.AddrPortFrom(fam.ns, 8080)
	fd1, _, _ := hostPair(t, fam.listen)
	if err := h.e.tcpFromHost(fd1, from, to); err != nil {
		t.Fatalf("first tcpFromHost: %v", err)
	}
	fd2, peer2, _ := hostPair(t, fam.listen)
	if err := h.e.tcpFromHost(fd2, from, to); !errors.Is(err, ErrFlowExists) {
		t.Fatalf("second connection with the same tuple: got %v, want ErrFlowExists", err)
	}
	if h.e.FlowCount() != 1 {
		t.Errorf("FlowCount %d, want 1 (the first flow only)", h.e.FlowCount())
	}
	peer2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := peer2.Read(make([]byte, 1)); err == nil {
		t.Error("refused host peer: read succeeded, want reset or EOF")
	}
}

// TestTCPBatchDataWithWindowOpening: in one batch, namespace data and an ACK
// that opens the window (so host data is peeked toward the namespace in the
// middle of gathering the batch's payload). The host must get exactly the
// namespace's bytes and the namespace exactly the host's: the two paths
// must not share scratch state (they once shared an iovec array, and
// simultaneous transfers both ways corrupted data).
func TestTCPBatchDataWithWindowOpening(t *testing.T) {
	for _, fam := range tcpFamilies {
		t.Run(fam.name, func(t *testing.T) {
			h := newTCPHarness(t, testParams(), Options{})
			c, hc := established(t, h, fam, 40061, 1460, 7)
			c.wnd = 0
			c.send(header.TCPFlagACK, nil)
			if _, err := hc.Write(pattern(0, 3000)); err != nil {
				t.Fatal(err)
			}
			h.cycle(50)
			h.seg = nil
			a := c.frame(header.TCPFlagACK|header.TCPFlagPSH, c.seq, c.ack, []byte("namespace-one,"))
			c.seq += uint32(len("namespace-one,"))
			c.wnd = 65535
			b := c.frame(header.TCPFlagACK|header.TCPFlagPSH, c.seq, c.ack, []byte("namespace-two"))
			c.seq += uint32(len("namespace-two"))
			h.send(a, b)
			if got := readN(t, hc, len("namespace-one,namespace-two")); string(got) != "namespace-one,namespace-two" {
				t.Errorf("host got %q, want %q", got, "namespace-one,namespace-two")
			}
			if got := c.recv(3000); !bytes.Equal(got, pattern(0, 3000)) {
				t.Errorf("namespace got wrong host data")
			}
		})
	}
}

// TestTimerArmedForEarliestDeadline drives the loop's timerfd path: when
// the timer fires, it must be armed again for the earliest deadline left,
// whether a timer hook just set it (a retransmission's backoff) or it was
// set while the timer was armed for an earlier one (a second flow's
// retransmission timer). Both once waited for the next 1 s tick: a hook's
// own wakeAt compared against the time that had just fired, and the timer
// was then armed for the tick.
func TestTimerArmedForEarliestDeadline(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	e := h.e
	e.updateClock()
	e.nextTick = e.now + tickInterval
	e.armTimer(e.nextTick)
	unacked := func(sport uint16) int32 {
		t.Helper()
		c, hc := established(t, h, tcpFamilies[0], sport, 1000, 0)
		if _, err := hc.Write(pattern(0, 500)); err != nil {
			t.Fatal(err)
		}
		h.take("data", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
		for _, idx := range e.ft.active {
			if e.flow(idx).NSPort == sport {
				return idx
			}
		}
		t.Fatalf("no flow for port %d", sport)
		return -1
	}
	tr := h.tr()
	a := unacked(40190)
	h.now = h.now.Add(50 * time.Millisecond)
	h.cycle(0)
	b := unacked(40191)
	rtoA, rtoB := tr.conn(a).rtoAt, tr.conn(b).rtoAt
	if rtoA == 0 || rtoB <= rtoA || rtoB >= e.nextTick {
		t.Fatalf("retransmission timers %d and %d ms, tick at %d ms: want a before b before the tick",
			rtoA/1e6, rtoB/1e6, e.nextTick/1e6)
	}

	fire := func(at int64) {
		h.now = e.start.Add(time.Duration(at))
		e.updateClock()
		e.timerfdFired()
	}
	// armedFor checks the timerfd expires at want (engine time), not
	// later (the tick) nor much earlier (a spin): what is left of it is
	// want less the real time since it was armed, microseconds here.
	armedFor := func(what string, want int64) {
		t.Helper()
		var its unix.ItimerSpec
		if err := unix.TimerfdGettime(e.timerfd, &its); err != nil {
			t.Fatal(err)
		}
		if got := e.now + its.Value.Nano(); got > want || got < want-int64(100*time.Millisecond) {
			t.Errorf("%s the timer is armed for %.1f ms, want %.1f ms", what, float64(got)/1e6, float64(want)/1e6)
		}
	}
	// a's timer fires; b's deadline, set while the timer waited for a's, is
	// the earliest left.
	fire(rtoA)
	armedFor("after a's retransmission", rtoB)
	// b's fires; a's backed-off timer, set by a's hook, is next.
	fire(rtoB)
	next := min(tr.conn(a).rtoAt, tr.conn(b).rtoAt)
	if next <= rtoB || next >= e.nextTick {
		t.Fatalf("backed-off timers %d and %d ms, tick at %d ms", tr.conn(a).rtoAt/1e6, tr.conn(b).rtoAt/1e6, e.nextTick/1e6)
	}
	armedFor("after b's retransmission", next)
}

// noMemInfo is a kernel without SO_MEMINFO (before 4.12).
type noMemInfo struct{ *streamSys }

func (noMemInfo) sendSpace(int) (int, error) { return 0, unix.ENOPROTOOPT }

// TestTCPNoSendSpaceWarnsOnce: when the host socket's send buffer cannot
// be read, the namespace is offered no window, and the log says why once.
func TestTCPNoSendSpaceWarnsOnce(t *testing.T) {
	fs := newFakeStream(t, true)
	var lb nstest.SyncBuffer
	fs.e.log = slog.New(slog.NewTextHandler(&lb, nil))
	fs.e.sys = noMemInfo{fs.ss}
	seq := fs.iss + 1
	for i := range 3 {
		fs.seg(header.TCPFlagACK, seq, uint32(fs.c.isn)+1, 1000, nil, pattern(i*10, 10))
		seq += 10
	}
	fs.e.flush()
	if n := strings.Count(lb.String(), "SO_MEMINFO"); n != 1 {
		t.Errorf("warning logged %d times, want once:\n%s", n, lb.String())
	}
	if fs.c.wndToNS != 0 {
		t.Errorf("window offered %d, want 0", fs.c.wndToNS)
	}
}
