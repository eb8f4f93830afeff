package fwd

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/nstest"
)

// fakeLink is an in-memory Link: frames injected by the test are readable
// through an eventfd (so the engine's epoll sees them), frames the engine
// writes land on a channel.
type fakeLink struct {
	mu  sync.Mutex
	in  [][]byte
	out chan []byte
	efd int
}

func newFakeLink(t testing.TB) *fakeLink {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatalf("eventfd: %v", err)
	}
	l := &fakeLink{out: make(chan []byte, 4096), efd: efd}
	t.Cleanup(func() { unix.Close(efd) })
	return l
}

func (l *fakeLink) inject(frames ...[]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range frames {
		l.in = append(l.in, append([]byte(nil), f...))
	}
	one := [8]byte{1}
	unix.Write(l.efd, one[:])
}

func (l *fakeLink) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for n < len(bufs) && len(l.in) > 0 {
		sizes[n] = copy(bufs[n], l.in[0])
		l.in = l.in[1:]
		n++
	}
	if len(l.in) == 0 {
		var b [8]byte
		unix.Read(l.efd, b[:])
	}
	return n, nil
}

func (l *fakeLink) WriteBatch(bufs [][]byte) (int, error) {
	for i, b := range bufs {
		select {
		case l.out <- append([]byte(nil), b...):
		default:
			return i, nil
		}
	}
	return len(bufs), nil
}

func (l *fakeLink) Fd() int      { return l.efd }
func (l *fakeLink) Close() error { return nil }

// next returns the next frame the engine wrote that passes keep, failing
// the test after timeout.
func (l *fakeLink) next(t *testing.T, timeout time.Duration, keep func([]byte) bool) []byte {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f := <-l.out:
			if keep == nil || keep(f) {
				return f
			}
		case <-deadline:
			t.Fatalf("no frame from the engine within %v", timeout)
			return nil
		}
	}
}

// discardLink drops whatever the engine writes (benchmarks, fuzzing).
type discardLink struct{ *fakeLink }

func (l *discardLink) WriteBatch(bufs [][]byte) (int, error) { return len(bufs), nil }

var (
	nsMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	ourMAC = net.HardwareAddr{0x9a, 0x55, 0x9a, 0x55, 0x9a, 0x55}
)

func testParams() *NetParams {
	return &NetParams{
		OurMAC: ourMAC, MTU: 65520,
		Addr4: netip.MustParseAddr("10.0.2.100"), Prefix4: 24, Gateway4: netip.MustParseAddr("10.0.2.2"),
		Addr6: netip.MustParseAddr("fd00::100"), Prefix6: 64, Gateway6: netip.MustParseAddr("fe80::1"),
		OurLL6: netip.MustParseAddr("fe80::1"),
	}
}

// fakeSys pretends to be the kernel's socket layer: every socket succeeds
// and swallows what is sent, nothing is ever received. It counts open
// descriptors so tests can check flows release theirs.
type fakeSys struct {
	next int
	open map[int]bool
	sent int // datagrams sent (a segmentation offload message holds several)
	// replies is how many 1-byte datagrams recvmmsg hands out, as if the
	// host answered on a flow's socket.
	replies int
	// fdLimit, when set, is how many sockets may be open at once: more
	// fail with EMFILE.
	fdLimit int
}

func newFakeSys() *fakeSys { return &fakeSys{next: 1 << 20, open: map[int]bool{}} }

func (s *fakeSys) socket(d, t, p int) (int, error) {
	if s.fdLimit > 0 && len(s.open) >= s.fdLimit {
		return -1, unix.EMFILE
	}
	s.next++
	s.open[s.next] = true
	return s.next, nil
}
func (s *fakeSys) bind(int, unix.Sockaddr) error          { return nil }
func (s *fakeSys) connect(int, unix.Sockaddr) error       { return nil }
func (s *fakeSys) setsockoptInt(int, int, int, int) error { return nil }
func (s *fakeSys) bindToDevice(int, string) error         { return nil }
func (s *fakeSys) sendmmsg(fd int, m []unix.Mmsghdr) (int, error) {
	for _, msg := range m {
		s.sent += int(msg.Hdr.Iovlen)
	}
	return len(m), nil
}
func (s *fakeSys) recvmmsg(_ int, m []unix.Mmsghdr) (int, error) {
	n := min(s.replies, len(m))
	if n == 0 {
		return 0, unix.EAGAIN
	}
	s.replies -= n
	for i := range n {
		m[i].Len, m[i].Hdr.Flags = 1, 0
	}
	return n, nil
}
func (s *fakeSys) watch(int, int32, uint32, uint32) error { return nil }
func (s *fakeSys) recvmsg(int, []byte, []byte, int) (int, int, int, error) {
	return 0, 0, 0, unix.EAGAIN
}
func (s *fakeSys) recvmsgIov(int, []unix.Iovec, int) (int, error) { return 0, unix.EAGAIN }
func (s *fakeSys) sendmsgIov(_ int, iov []unix.Iovec) (int, error) {
	n := 0
	for _, v := range iov {
		n += int(v.Len)
	}
	s.sent++
	return n, nil
}
func (s *fakeSys) discard(_ int, n int) (int, error)        { return n, nil }
func (s *fakeSys) getsockoptInt(int, int, int) (int, error) { return 0, nil }
func (s *fakeSys) sendSpace(int) (int, error)               { return 1 << 20, nil }
func (s *fakeSys) shutdown(int, int) error                  { return nil }
func (s *fakeSys) wantSpace(int)                            {}
func (s *fakeSys) abort(int) error                          { return nil }
func (s *fakeSys) localReno(int, netip.Addr)                {}
func (s *fakeSys) close(fd int) error {
	delete(s.open, fd)
	return nil
}

// Frame builders.

func ethHdr(typ uint16) []byte {
	b := make([]byte, header.EthernetMinimumSize)
	header.Ethernet(b).Encode(ourMAC, nsMAC, typ)
	return b
}

// udpFrame builds a namespace-to-host UDP frame with valid checksums.
func udpFrame(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	return nstest.UDPFrame(ourMAC, nsMAC, netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport), payload)
}

// echoFrame builds an ICMP or ICMPv6 echo request.
func echoFrame(src, dst netip.Addr, id, seq uint16, payload []byte) []byte {
	v6 := src.Is6()
	l4len := header.ICMPv4MinimumSize + len(payload)
	proto := header.ProtocolICMPv4
	if v6 {
		proto = header.ProtocolICMPv6
	}
	return ipFrame(proto, src, dst, l4len, func(l4 []byte, ps uint16) {
		copy(l4[8:], payload)
		if v6 {
			ic := header.ICMPv6(l4)
			ic.SetType(header.ICMPv6EchoRequest)
			ic.SetIdent(id)
			ic.SetSeq(seq)
			ic.SetChecksum(ic.CalculateChecksum(ps))
		} else {
			ic := header.ICMPv4(l4)
			ic.SetType(header.ICMPv4Echo)
			ic.SetIdent(id)
			ic.SetSeq(seq)
			ic.SetChecksum(ic.CalculateChecksum())
		}
	})
}

// ipFrame builds a namespace-to-host IP frame (nstest.IPFrame).
func ipFrame(proto uint8, src, dst netip.Addr, l4len int, fill func(l4 []byte, pseudo uint16)) []byte {
	return nstest.IPFrame(ourMAC, nsMAC, proto, src, dst, l4len, fill)
}

// parsed is what tests check of a frame from the engine.
type parsed struct {
	v6           bool
	proto        uint8
	src, dst     netip.Addr
	sport, dport uint16
	l4           []byte
}

// parseOut validates a frame the engine wrote (headers, lengths and every
// checksum) and returns its fields.
func parseOut(t *testing.T, b []byte) parsed {
	t.Helper()
	eth := header.Ethernet(b)
	if !eth.IsValid() {
		t.Fatalf("short frame %x", b)
	}
	if got := net.HardwareAddr(eth.Src()); got.String() != ourMAC.String() {
		t.Errorf("eth src %v, want %v", got, ourMAC)
	}
	var p parsed
	var ps uint16
	switch eth.Type() {
	case header.EtherTypeIPv4:
		ip := header.IPv4(b[14:])
		if !ip.IsValid(len(ip)) || !ip.IsChecksumValid() {
			t.Fatalf("bad IPv4 header %x", b[14:34])
		}
		p.proto, p.src, p.dst = ip.Protocol(), ip.Src(), ip.Dst()
		p.l4 = ip.Payload()
		ps = header.PseudoHeaderChecksum(p.proto, ip.SrcSlice(), ip.DstSlice(), uint32(len(p.l4)))
	case header.EtherTypeIPv6:
		ip := header.IPv6(b[14:])
		if !ip.IsValid(len(ip)) {
			t.Fatalf("bad IPv6 header %x", b[14:54])
		}
		p.v6 = true
		p.proto, p.src, p.dst = ip.NextHeader(), ip.Src(), ip.Dst()
		p.l4 = ip.Payload()
		ps = header.PseudoHeaderChecksum(p.proto, ip.SrcSlice(), ip.DstSlice(), uint32(len(p.l4)))
	default:
		t.Fatalf("ethertype %#x", eth.Type())
	}
	switch p.proto {
	case header.ProtocolUDP, header.ProtocolICMPv6:
		if header.Checksum(p.l4, ps) != 0xffff {
			t.Errorf("bad transport checksum in %x", p.l4)
		}
	case header.ProtocolICMPv4:
		if header.Checksum(p.l4, 0) != 0xffff {
			t.Errorf("bad ICMP checksum in %x", p.l4)
		}
	}
	if p.proto == header.ProtocolUDP {
		u := header.UDP(p.l4)
		p.sport, p.dport = u.SrcPort(), u.DstPort()
	}
	return p
}

// hostNS runs the test's host side in a fresh network namespace when the
// test may create one (root), so loopback servers and sysctls are its own;
// otherwise in the current namespace. do runs f on that namespace's
// thread; run starts the engine there (after all do calls).
type hostNS struct {
	t     *testing.T
	th    *nstest.NetnsThread
	isNew bool
}

func newHostNS(t *testing.T) *hostNS {
	th := nstest.NewNetnsThread(t)
	return &hostNS{t: t, th: th, isNew: th.Fresh() == nil}
}

func (h *hostNS) do(f func()) { h.th.Do(f) }

// udpEcho starts a UDP echo server on addr (in the namespace) and returns
// its port and a channel of the source addresses it saw.
func (h *hostNS) udpEcho(addr string) (uint16, chan netip.AddrPort) {
	seen := make(chan netip.AddrPort, 64)
	port := h.udpServe(addr, func(pc *net.UDPConn, msg []byte, from netip.AddrPort) {
		select {
		case seen <- from:
		default:
		}
		pc.WriteToUDPAddrPort(msg, from)
	})
	return port, seen
}

// udpServe runs a UDP server on addr in the namespace, answer called for
// every datagram until the test ends, and returns its port.
func (h *hostNS) udpServe(addr string, answer func(pc *net.UDPConn, msg []byte, from netip.AddrPort)) uint16 {
	pc := h.listenUDP(addr)
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			answer(pc, buf[:n], from)
		}
	}()
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

// listenUDP opens a UDP socket on addr in the namespace, closed when the
// test ends.
func (h *hostNS) listenUDP(addr string) *net.UDPConn {
	var pc *net.UDPConn
	var err error
	h.do(func() { pc, err = listenUDPHere(addr) })
	if err != nil {
		h.t.Skipf("cannot listen on %s here: %v", addr, err)
	}
	h.t.Cleanup(func() { pc.Close() })
	return pc
}

// listenUDPHere creates the socket with raw syscalls so it is made by this
// very thread (in its namespace), then hands it to the net package.
func listenUDPHere(addr string) (*net.UDPConn, error) {
	ap := netip.MustParseAddrPort(addr)
	dom := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
	if ap.Addr().Is4() {
		dom = unix.AF_INET
		sa = &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	fd, err := unix.Socket(dom, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "udp")
	defer f.Close()
	c, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	return c.(*net.UDPConn), nil
}

// start runs e in the namespace until the test ends.
func (h *hostNS) start(e *Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go h.do(func() { done <- e.Run(ctx) })
	h.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				h.t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			h.t.Errorf("Run did not return within 5s of cancel")
		}
	})
}

func newTestEngine(t *testing.T, opts Options) (*Engine, *fakeLink) {
	t.Helper()
	l := newFakeLink(t)
	e, err := New(l, testParams(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e, l
}

func testContext(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, cancel
}

// replyOf runs responder r on frame, checks that it answers exactly when
// want says so, and returns the reply buffer, its length, and whether
// there is a reply to look at.
func replyOf(t *testing.T, name string, r responder, p *NetParams, frame []byte, want bool) ([]byte, int, bool) {
	t.Helper()
	out := bytes.Repeat([]byte{0xee}, 1514)
	n := r(p, frame, out)
	switch {
	case !want && n != 0:
		t.Errorf("%s: got a %d-byte reply, want none", name, n)
	case want && n == 0:
		t.Errorf("%s: no reply", name)
	}
	return out, n, want && n != 0
}

// fuzzResponder feeds arbitrary frames to r, with a full-size output
// buffer and with one short bytes long: no input may make it panic or
// write out of bounds.
func fuzzResponder(f *testing.F, r responder, short int) {
	p := respParams()
	out := make([]byte, 1514)
	f.Fuzz(func(t *testing.T, frame []byte) {
		_ = r(p, frame, out)
		_ = r(p, frame, out[:short])
	})
}
