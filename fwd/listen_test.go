package fwd

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/sock"
)

// Listener tests: real host sockets in the test's namespace, the namespace
// played by the test through the fake link.

// listenFd opens a bound socket on 127.0.0.1 (TCP listening) and returns
// its fd and port.
func listenFd(t *testing.T, udp bool) (int, uint16) {
	t.Helper()
	typ := unix.SOCK_STREAM
	if udp {
		typ = unix.SOCK_DGRAM
	}
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	if !udp {
		if err := unix.Listen(fd, 16); err != nil {
			t.Fatalf("listen: %v", err)
		}
	}
	sa, _ := unix.Getsockname(fd)
	return fd, uint16(sa.(*unix.SockaddrInet4).Port)
}

// tcpSegment builds a segment from the namespace.
func tcpSegment(src, dst netip.AddrPort, seq, ack uint32, flags uint8, payload []byte) []byte {
	l4len := header.TCPMinimumSize + len(payload)
	return ipFrame(header.ProtocolTCP, src.Addr(), dst.Addr(), l4len, func(l4 []byte, ps uint16) {
		th := header.TCP(l4)
		th.Encode(&header.TCPFields{SrcPort: src.Port(), DstPort: dst.Port(), Seq: seq, Ack: ack,
			DataOffset: header.TCPMinimumSize, Flags: flags, Window: 65535})
		copy(l4[header.TCPMinimumSize:], payload)
		th.SetChecksum(^header.Checksum(l4, ps))
	})
}

func isTCP(b []byte) bool { return isIPv4Proto(b, header.ProtocolTCP) }
func isUDP(b []byte) bool { return isIPv4Proto(b, header.ProtocolUDP) }

func isIPv4Proto(b []byte, proto uint8) bool {
	eth := header.Ethernet(b)
	return eth.IsValid() && eth.Type() == header.EtherTypeIPv4 && header.IPv4(b[14:]).Protocol() == proto
}

func tcpOf(t *testing.T, b []byte) (parsed, header.TCP) {
	p := parseOut(t, b)
	return p, header.TCP(p.l4)
}

// dialLoopback connects to 127.0.0.1:port; the connection closes with the
// test.
func dialLoopback(t *testing.T, port uint16) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(loop4, port).String(), 2*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runEngine runs e until the test ends.
func runEngine(t *testing.T, e *Engine) {
	ctx, cancel := testContext(t)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestListenerTCPToTap: a host connection on a forwarded port becomes a
// SYN into the namespace from the mapped peer, and once the namespace
// answers, the bytes the host peer sent arrive as data — including when
// this is the engine's very first TCP connection (the SO_PEEK_OFF probe).
func TestListenerTCPToTap(t *testing.T) {
	e, link := newTestEngine(t, Options{})
	fd, port := listenFd(t, false)
	if _, err := e.AddListener(Listener{Fd: fd, ToAddr: netip.MustParseAddr("10.0.2.100"), ToPort: 80, Local: netip.AddrPortFrom(loop4, port)}); err != nil {
		t.Fatalf("AddListener: %v", err)
	}
	runEngine(t, e)

	c := dialLoopback(t, port)
	c.Write([]byte("hello"))

	syn := link.next(t, 2*time.Second, isTCP)
	p, th := tcpOf(t, syn)
	gw := testParams().Gateway4
	if p.src != gw || p.dst != testParams().Addr4 || th.DstPort() != 80 {
		t.Fatalf("got SYN %v:%d -> %v:%d, want from %v (host loopback mapped) to %v:80",
			p.src, th.SrcPort(), p.dst, th.DstPort(), gw, testParams().Addr4)
	}
	if th.Flags() != header.TCPFlagSYN {
		t.Fatalf("got flags %#x, want SYN", th.Flags())
	}
	nsSide := netip.AddrPortFrom(p.dst, 80)
	peer := netip.AddrPortFrom(p.src, th.SrcPort())
	link.inject(tcpSegment(nsSide, peer, 1000, th.Seq()+1, header.TCPFlagSYN|header.TCPFlagACK, nil))
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		f := link.next(t, time.Until(deadline), isTCP)
		_, th := tcpOf(t, f)
		if pl := th.Payload(); len(pl) > 0 {
			if !bytes.Equal(pl, []byte("hello")) {
				t.Fatalf("got payload %q, want %q", pl, "hello")
			}
			return
		}
	}
	t.Fatalf("got no data segment within 2s, want %q", "hello")
}

// TestListenerUDPBurst: large datagrams from new host peers, which the
// listener reads, reach the namespace intact, and once the listener has
// seen their size it reads at most three (64 KiB) of them at a time.
func TestListenerUDPBurst(t *testing.T) {
	e, link := newTestEngine(t, Options{})
	rec := &recvRecorder{sysOps: e.sys}
	e.sys = rec
	fd, port := listenFd(t, true)
	if _, err := e.AddListener(Listener{Fd: fd, UDP: true, ToAddr: netip.MustParseAddr("10.0.2.100"), ToPort: 53, Local: netip.AddrPortFrom(loop4, port)}); err != nil {
		t.Fatalf("AddListener: %v", err)
	}
	runEngine(t, e)
	const size, peers = 20000, 6
	// The others queue up while the engine waits in its next read of
	// the listener: a peer's socket takes no other peer's datagrams in
	// the moment between its bind and its connect (sock.Reply), it drops
	// them, so peers that send while the engine makes sockets could lose
	// one.
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	for i := range peers {
		if i == 1 {
			rec.mu.Lock()
			rec.hold, rec.holdFd = release, fd
			rec.mu.Unlock()
		}
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(loop4, port)))
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		if _, err := c.Write(bytes.Repeat([]byte{byte(i)}, size)); err != nil {
			t.Fatalf("peer %d: %v", i, err)
		}
		if i == 0 {
			// The first one alone, so the listener learns the size
			// before the rest queue up.
			p := parseOut(t, link.next(t, 2*time.Second, isUDP))
			if pay := header.UDP(p.l4).Payload(); len(pay) != size || pay[0] != 0 {
				t.Fatalf("datagram 0: got %d bytes, want %d of 0", len(pay), size)
			}
		}
	}
	close(release)
	got := map[byte]bool{}
	for range peers - 1 {
		p := parseOut(t, link.next(t, 2*time.Second, isUDP))
		pay := header.UDP(p.l4).Payload()
		if len(pay) != size || pay[0] != pay[size-1] {
			t.Fatalf("got a datagram of %d bytes, want %d of one value", len(pay), size)
		}
		got[pay[0]] = true
	}
	if len(got) != peers-1 {
		t.Errorf("got datagrams from peers %v, want %d distinct", got, peers-1)
	}
	rec.check(t, fd, 3) // 64 KiB of 20000-byte datagrams
}

// TestListenerUDPToTap: a datagram on a forwarded UDP port goes to the
// namespace from the mapped peer, and the namespace's reply reaches the
// host peer from the port it talked to.
func TestListenerUDPToTap(t *testing.T) {
	e, link := newTestEngine(t, Options{})
	fd, port := listenFd(t, true)
	if _, err := e.AddListener(Listener{Fd: fd, UDP: true, ToAddr: netip.MustParseAddr("10.0.2.100"), ToPort: 53, Local: netip.AddrPortFrom(loop4, port)}); err != nil {
		t.Fatalf("AddListener: %v", err)
	}
	runEngine(t, e)

	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(loop4, port)))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	c.Write([]byte("ping"))
	p := parseOut(t, link.next(t, 2*time.Second, isUDP))
	if p.src != testParams().Gateway4 || p.dst != testParams().Addr4 || p.dport != 53 {
		t.Fatalf("got %v:%d -> %v:%d, want from %v to %v:53", p.src, p.sport, p.dst, p.dport, testParams().Gateway4, testParams().Addr4)
	}
	if got := header.UDP(p.l4).Payload(); string(got) != "ping" {
		t.Fatalf("got payload %q, want ping", got)
	}
	link.inject(udpFrame(p.dst, p.src, 53, p.sport, []byte("pong")))
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 100)
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	if string(buf[:n]) != "pong" || from.Port() != port {
		t.Fatalf("got %q from %v, want pong from port %d", buf[:n], from, port)
	}
	// A second datagram takes the flow's own socket.
	c.Write([]byte("again"))
	p = parseOut(t, link.next(t, 2*time.Second, isUDP))
	if got := header.UDP(p.l4).Payload(); string(got) != "again" {
		t.Fatalf("got payload %q, want again", got)
	}
	if got := e.Stats().FlowsUDP; got != 1 {
		t.Fatalf("got %d UDP flows, want 1", got)
	}
}

// TestListenerSpliceHook: loopback peers of a splicing listener go to the
// hook, never to the link; removal closes the socket.
func TestListenerSpliceHook(t *testing.T) {
	e, link := newTestEngine(t, Options{})
	got := make(chan SpliceConn, 4)
	e.SetSpliceHook(func(c *SpliceConn) bool { got <- *c; return true })
	fd, port := listenFd(t, false)
	// The TAP's target is the namespace's address; the rule names none
	// for spliced connections, so the hook gets none and picks.
	id, err := e.AddListener(Listener{Fd: fd, ToAddr: netip.MustParseAddr("10.0.2.100"), ToPort: 80, Splice: true})
	if err != nil {
		t.Fatalf("AddListener: %v", err)
	}
	runEngine(t, e)

	dialLoopback(t, port)
	select {
	case sc := <-got:
		if sc.UDP || sc.ToPort != 80 || !sc.Peer.Addr().IsLoopback() || sc.ToAddr.IsValid() {
			t.Errorf("got %+v, want a TCP connection from loopback to port 80, no target address", sc)
		}
		unix.Close(sc.Fd)
	case <-time.After(2 * time.Second):
		t.Fatal("got no splice hand-over within 2s")
	}
	select {
	case f := <-link.out:
		t.Errorf("got a frame on the link (%d bytes), want none for a spliced connection", len(f))
	default:
	}
	if n := e.ListenerCount(); n != 1 {
		t.Errorf("got %d listeners, want 1", n)
	}
	e.RemoveListener(id)
	e.RemoveListener(id)
	if n := e.ListenerCount(); n != 0 {
		t.Errorf("got %d listeners after removal, want 0", n)
	}
	if _, err := net.DialTimeout("tcp4", netip.AddrPortFrom(loop4, port).String(), time.Second); err == nil {
		t.Errorf("dial after removal succeeded, want refused")
	}
}

// TestListenerSpliceHookLocal: a splicing listener bound to any address
// tells the hook which loopback address each peer connected to, so that
// the connection can keep it on the other side; one bound to an address
// tells that address.
func TestListenerSpliceHookLocal(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	got := make(chan SpliceConn, 4)
	e.SetSpliceHook(func(c *SpliceConn) bool { got <- *c; return true })
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	port := uint16(sa.(*unix.SockaddrInet4).Port)
	if _, err := e.AddListener(Listener{Fd: fd, Local: netip.AddrPortFrom(netip.IPv4Unspecified(), port),
		ToAddr: netip.MustParseAddr("10.0.2.100"), ToPort: 80, Splice: true}); err != nil {
		t.Fatalf("AddListener: %v", err)
	}
	lfd, lport := listenFd(t, false)
	if _, err := e.AddListener(Listener{Fd: lfd, Local: netip.AddrPortFrom(loop4, lport),
		ToAddr: netip.MustParseAddr("10.0.2.100"), ToPort: 81, Splice: true}); err != nil {
		t.Fatalf("AddListener: %v", err)
	}
	runEngine(t, e)
	for _, to := range []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.6"), port),
		netip.AddrPortFrom(loop4, port),
		netip.AddrPortFrom(loop4, lport),
	} {
		c, err := net.DialTimeout("tcp4", to.String(), 2*time.Second)
		if err != nil {
			t.Fatalf("dial %v: %v", to, err)
		}
		select {
		case sc := <-got:
			if sc.Local != to {
				t.Errorf("connection to %v: got Local %v, want %v", to, sc.Local, to)
			}
			unix.Close(sc.Fd)
		case <-time.After(2 * time.Second):
			t.Fatalf("connection to %v: got no splice hand-over within 2s", to)
		}
		c.Close()
	}
}

// TestTCPFromHostFirstConnection: the engine's first TCP connection comes
// from the host (a forwarded port), so nothing probed SO_PEEK_OFF before
// tcpFromHost: host data must still reach the namespace.
func TestTCPFromHostFirstConnection(t *testing.T) {
	e, link := newTestEngine(t, Options{})
	lfd, port := listenFd(t, false)
	defer unix.Close(lfd)
	c, err := net.Dial("tcp4", netip.AddrPortFrom(loop4, port).String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	c.Write([]byte("hello"))
	fd, _, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	peer := netip.AddrPortFrom(testParams().Gateway4, 40000)
	nsSide := netip.AddrPortFrom(testParams().Addr4, 80)
	ctx, cancel := testContext(t)
	done := make(chan error, 1)
	go func() {
		runtimeLockedRun := func() error {
			if err := e.tcpFromHost(fd, peer, nsSide); err != nil {
				return err
			}
			return e.Run(ctx)
		}
		done <- runtimeLockedRun()
	}()
	t.Cleanup(func() { cancel(); <-done })
	_, th := tcpOf(t, link.next(t, 2*time.Second, isTCP))
	link.inject(tcpSegment(nsSide, peer, 1000, th.Seq()+1, header.TCPFlagSYN|header.TCPFlagACK, nil))
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		_, th := tcpOf(t, link.next(t, time.Until(deadline), isTCP))
		if len(th.Payload()) > 0 {
			return
		}
	}
	t.Fatal("got no data segment: tcpFromHost without a prior SO_PEEK_OFF probe never sends host data")
}

// TestListenerTargetFamily: a target address (for the TAP or for spliced
// connections) of the other family than the socket's is refused, and the
// socket closed.
func TestListenerTargetFamily(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	for _, l := range []Listener{
		{ToAddr: netip.MustParseAddr("2001:db8::1"), ToPort: 80},
		{ToAddr: netip.MustParseAddr("10.0.2.100"), SpliceTo: netip.MustParseAddr("::1"), ToPort: 80, Splice: true},
	} {
		fd, _ := listenFd(t, false)
		l.Fd = fd
		if _, err := e.AddListener(l); !errors.Is(err, ErrListenFamily) {
			t.Errorf("AddListener(%v, %v): got %v, want ErrListenFamily", l.ToAddr, l.SpliceTo, err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			t.Errorf("AddListener(%v, %v) left the socket open", l.ToAddr, l.SpliceTo)
		}
	}
}

// TestListenerOutOfDescriptors: a connection queued on a forwarded port
// while the process has no descriptor left is reset with the engine's
// spare descriptor and counted as refused; without a spare, the listener
// pauses and takes the connection once descriptors are back, instead of
// spinning on the level-triggered listener. Either way the next
// connection reaches the namespace.
func TestListenerOutOfDescriptors(t *testing.T) {
	for _, spare := range []bool{true, false} {
		t.Run(map[bool]string{true: "spare", false: "no spare"}[spare], func(t *testing.T) {
			refusals := &limit.Refusals{}
			e, link := newTestEngine(t, Options{Refusals: refusals})
			if !spare {
				e.reserve.Close()
				e.reserve = sock.NewSpare(-1) // a spare it can never hold
			}
			fd, port := listenFd(t, false)
			if _, err := e.AddListener(Listener{Fd: fd, ToAddr: netip.MustParseAddr("10.0.2.100"), ToPort: 80, Local: netip.AddrPortFrom(loop4, port)}); err != nil {
				t.Fatalf("AddListener: %v", err)
			}
			cfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(cfd)
			runEngine(t, e)
			var rerr error
			nstest.RunOutOfDescriptors(t, func() {
				err = unix.Connect(cfd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}})
				if err == nil && spare {
					tv := unix.NsecToTimeval(int64(2 * time.Second))
					unix.SetsockoptTimeval(cfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
					_, rerr = unix.Read(cfd, make([]byte, 1))
				} else if err == nil {
					time.Sleep(50 * time.Millisecond) // the listener fails and pauses
				}
			})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			if spare {
				if rerr != unix.ECONNRESET {
					t.Errorf("the queued connection: got read error %v, want ECONNRESET", rerr)
				}
				// The loop counts the refusal after the reset, which the client
				// may have read first.
				err := nstest.WaitFor(2*time.Second, func() error {
					if n := refusals.Totals()[limit.TCP]; n != 1 {
						return fmt.Errorf("refused TCP connections: got %d, want 1", n)
					}
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				dialLoopback(t, port)
			}
			// spare: the next connection; no spare: the queued one.
			syn := link.next(t, 2*time.Second, isTCP)
			if _, th := tcpOf(t, syn); th.Flags() != header.TCPFlagSYN || th.DstPort() != 80 {
				t.Errorf("got a segment with flags %#x to port %d, want a SYN to port 80", th.Flags(), th.DstPort())
			}
		})
	}
}
