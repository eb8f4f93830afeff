package splice

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/sock"
)

// udpRig: client <-> a (host side, connected to the client) ~ Forwarder ~
// b (dialled to the server) <-> server.
type udpRig struct {
	f              *Forwarder
	client, server *net.UDPConn
	front          *net.UDPAddr // where the client sends
}

func newUDPRig(t *testing.T, opts Options) *udpRig {
	t.Helper()
	r := &udpRig{f: newRig(t, opts).f}
	var err error
	if r.client, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatalf("client: %v", err)
	}
	if r.server, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatalf("server: %v", err)
	}
	t.Cleanup(func() { r.client.Close(); r.server.Close() })
	deadline := time.Now().Add(testTimeout)
	r.client.SetDeadline(deadline)
	r.server.SetDeadline(deadline)
	a, err := sock.Reply(netipMust("127.0.0.1:0"), "", addrPort(t, r.client.LocalAddr()))
	if err != nil {
		t.Fatalf("sock.Reply: %v", err)
	}
	b, err := sock.Dial(true, addrPort(t, r.server.LocalAddr()))
	if err != nil {
		t.Fatalf("sock.Dial: %v", err)
	}
	if err := r.f.AddUDP(a, b); err != nil {
		t.Fatalf("AddUDP: %v", err)
	}
	sa, err := unix.Getsockname(a)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	r.front = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port}
	return r
}

func TestUDPBothWays(t *testing.T) {
	r := newUDPRig(t, Options{})
	buf := make([]byte, 70000)
	var back *net.UDPAddr
	for i, size := range []int{1, 100, 1400, 8000, 65000, 0, 512} {
		up := randomBytes(t, size)
		if _, err := r.client.WriteToUDP(up, r.front); err != nil {
			t.Fatalf("client send %d: %v", i, err)
		}
		n, from, err := r.server.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("server receive %d: %v", i, err)
		}
		if !bytes.Equal(buf[:n], up) {
			t.Fatalf("datagram %d up: got %d bytes, want %d intact", i, n, size)
		}
		back = from
		down := randomBytes(t, size/2+1)
		if _, err := r.server.WriteToUDP(down, back); err != nil {
			t.Fatalf("server send %d: %v", i, err)
		}
		n, from, err = r.client.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("client receive %d: %v", i, err)
		}
		if !bytes.Equal(buf[:n], down) || from.Port != r.front.Port {
			t.Fatalf("datagram %d down: got %d bytes from %v, want %d intact from %v", i, n, from, len(down), r.front)
		}
	}
	// A burst larger than one recvmmsg batch arrives complete and in order.
	const burst = 100
	for i := 0; i < burst; i++ {
		if _, err := r.client.WriteToUDP([]byte(fmt.Sprintf("msg %03d", i)), r.front); err != nil {
			t.Fatalf("burst send: %v", err)
		}
	}
	for i := 0; i < burst; i++ {
		n, _, err := r.server.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("burst receive %d: %v", i, err)
		}
		if got, want := string(buf[:n]), fmt.Sprintf("msg %03d", i); got != want {
			t.Fatalf("burst datagram %d: got %q, want %q", i, got, want)
		}
	}
	// The forwarder counts a datagram after sendmmsg returns, which can be
	// after the server has read it: wait (bounded) for the count to settle.
	st := r.f.Stats()
	for deadline := time.Now().Add(2 * time.Second); st.UDPDatagrams != 14+burst && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		st = r.f.Stats()
	}
	if st.UDPActive != 1 || st.UDPDatagrams != 14+burst || st.UDPDrops != 0 {
		t.Errorf("got active %d datagrams %d drops %d, want 1, %d, 0", st.UDPActive, st.UDPDatagrams, st.UDPDrops, 14+burst)
	}
}

// TestUDPTimeout: a flow lives UDPTimeout without traffic, one way or a
// single exchange (a DNS query and its answer) alike, and UDPStreamTimeout
// once it is a stream: answered, and either side sent more than once.
func TestUDPTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pings   int
		reply   bool
		min, to time.Duration
	}{
		{"one way", 1, false, 900 * time.Millisecond, 3500 * time.Millisecond},
		{"one way twice", 2, false, 900 * time.Millisecond, 3500 * time.Millisecond},
		{"one exchange", 1, true, 900 * time.Millisecond, 3500 * time.Millisecond},
		{"stream", 2, true, 2900 * time.Millisecond, 5500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newUDPRig(t, Options{UDPTimeout: time.Second, UDPStreamTimeout: 3 * time.Second})
			buf := make([]byte, 100)
			var from *net.UDPAddr
			for range tc.pings {
				r.client.WriteToUDP([]byte("ping"), r.front)
				var err error
				if _, from, err = r.server.ReadFromUDP(buf); err != nil {
					t.Fatalf("server receive: %v", err)
				}
			}
			if tc.reply {
				r.server.WriteToUDP([]byte("pong"), from)
				if _, _, err := r.client.ReadFromUDP(buf); err != nil {
					t.Fatalf("client receive: %v", err)
				}
			}
			start := time.Now()
			waitFor(t, "flow expiry", tc.to, func() bool { return r.f.Stats().UDPActive == 0 })
			if d := time.Since(start); d < tc.min {
				t.Errorf("flow expired after %v, want at least %v", d, tc.min)
			}
		})
	}
}

func TestUDPLimit(t *testing.T) {
	f := newRig(t, Options{MaxUDP: 1}).f
	mk := func() int {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	if err := f.AddUDP(mk(), mk()); err != nil {
		t.Fatalf("first flow: %v", err)
	}
	err := f.AddUDP(mk(), mk())
	if le, ok := err.(*LimitError); !ok || le.Limit != 1 {
		t.Errorf("second flow: got %v, want *LimitError with limit 1", err)
	}
	tcp, _ := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err := f.AddUDP(tcp, mk()); err == nil {
		t.Errorf("AddUDP with a TCP socket: got nil error, want one")
	}
}

// readBurst reads one burst of count datagrams from srv, each "B:S" (burst
// B, sequence S) padded to size, then an empty one, and wants them all
// from one source, in order. It returns that source.
func readBurst(srv *net.UDPConn, burst, count, size int) (netip.AddrPort, error) {
	buf := make([]byte, 70000)
	var from netip.AddrPort
	for i := 0; i <= count; i++ {
		n, peer, err := srv.ReadFromUDPAddrPort(buf)
		if err != nil {
			return from, fmt.Errorf("burst %d, datagram %d: %w", burst, i, err)
		}
		if i > 0 && peer != from {
			return from, fmt.Errorf("burst %d, datagram %d came from %v, want %v: one flow per peer", burst, i, peer, from)
		}
		from = peer
		if i == count {
			if n != 0 {
				return from, fmt.Errorf("burst %d: got %d bytes (%q) where the empty datagram belongs", burst, n, buf[:min(n, 16)])
			}
			break
		}
		if want := burstDatagram(burst, i, size); string(buf[:n]) != string(want) {
			return from, fmt.Errorf("burst %d, datagram %d: got %d bytes %q, want %d bytes %q", burst, i, n, buf[:min(n, 12)], len(want), want[:12])
		}
	}
	return from, nil
}

// burstDatagram is datagram seq of a burst: "burst:seq" padded with dots.
func burstDatagram(burst, seq, size int) []byte {
	b := bytes.Repeat([]byte{'.'}, size)
	copy(b, fmt.Sprintf("%04d:%04d", burst, seq))
	return b
}

// TestUDPListenerBursts: fifty peers in turn, each with a burst of two
// recvmmsg batches and then an empty datagram, all sent before the peer's
// flow exists: every burst arrives whole, in order and as one flow, its
// empty datagram last. The datagrams that reach the listener before the
// flow's own socket is connected must go out before what that socket
// receives.
func TestUDPListenerBursts(t *testing.T) {
	for _, fam := range []string{"127.0.0.1", "::1"} {
		t.Run(fam, func(t *testing.T) {
			lo := netip.MustParseAddr(fam)
			r := newRig(t, Options{UDPBatch: 8})
			srv, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			srv.SetDeadline(deadlineIn())
			addr := udpListenerTo(t, r, lo, addrPort(t, srv.LocalAddr()))
			const bursts, count, size = 50, 16, 200
			// The kernel may give a later client the port of an earlier
			// one, whose flow is still open: that burst is the same
			// peer's and rightly joins its flow.
			peers := map[netip.AddrPort]bool{}
			for b := range bursts {
				cl, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
				if err != nil {
					t.Fatal(err)
				}
				peers[addrPort(t, cl.LocalAddr())] = true
				for i := range count {
					if _, err := cl.Write(burstDatagram(b, i, size)); err != nil {
						t.Fatalf("burst %d: send %d: %v", b, i, err)
					}
				}
				if _, err := cl.Write(nil); err != nil {
					t.Fatalf("burst %d: send the empty datagram: %v", b, err)
				}
				_, err = readBurst(srv, b, count, size)
				cl.Close()
				if err != nil {
					t.Fatalf("%v (%+v)", err, r.f.Stats())
				}
			}
			if st := r.f.Stats(); st.UDPTotal != uint64(len(peers)) || st.UDPDrops != 0 {
				t.Errorf("flows %d, drops %d: want %d flows (one per client port) and no drop", st.UDPTotal, st.UDPDrops, len(peers))
			}
		})
	}
}

// udpPair: a client and a server on loopback, a (the client's own
// socket, as a listener's peer gets) and b (dialled to the server), and
// front, where the client sends to reach a.
type udpPair struct {
	client, srv *net.UDPConn
	a, b        int
	front       *net.UDPAddr
}

// newHandDriven returns a Forwarder whose loop the test does not run, for
// a test that drives a flow's events itself, and a udpPair to forward.
func newHandDriven(t *testing.T) (*Forwarder, *udpPair) {
	t.Helper()
	f, err := NewForwarder(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, newUDPPair(t)
}

func newUDPPair(t *testing.T) *udpPair {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	p := &udpPair{}
	var err error
	if p.client, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.client.Close() })
	if p.srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.srv.Close() })
	p.srv.SetDeadline(deadlineIn())
	if p.a, err = sock.Reply(netipMust("127.0.0.1:0"), "", addrPort(t, p.client.LocalAddr())); err != nil {
		t.Fatal(err)
	}
	if p.b, err = sock.Dial(true, addrPort(t, p.srv.LocalAddr())); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(p.a)
	if err != nil {
		t.Fatal(err)
	}
	p.front = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port}
	return p
}

// TestUDPEarlyDatagrams: the datagrams a caller read before the flow had
// its own socket (AddUDP's early ones, an empty one among them) go out
// first, then what the flow's socket holds already.
func TestUDPEarlyDatagrams(t *testing.T) {
	f := newRig(t, Options{}).f
	p := newUDPPair(t)
	// Waiting on a already when the flow starts.
	for _, m := range []string{"late 1", "", "late 2"} {
		if _, err := p.client.WriteToUDP([]byte(m), p.front); err != nil {
			t.Fatal(err)
		}
	}
	srv := p.srv
	if err := f.AddUDP(p.a, p.b, []byte("early 1"), nil, []byte("early 2")); err != nil {
		t.Fatalf("AddUDP: %v", err)
	}
	buf := make([]byte, 100)
	for i, want := range []string{"early 1", "", "early 2", "late 1", "", "late 2"} {
		n, err := srv.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("datagram %d: got %q, %v; want %q", i, buf[:n], err, want)
		}
	}
}

// TestUDPLateDatagrams: datagrams handed over as late (LateUDP) go out on
// the flow of their name, after its early ones, in the order given; those
// named for no flow, or for a closed one, are counted as dropped and sent
// nowhere.
func TestUDPLateDatagrams(t *testing.T) {
	f := newRig(t, Options{UDPTimeout: time.Second, UDPStreamTimeout: time.Second})
	p := newUDPPair(t)
	srv := p.srv
	key := UDPKey{Local: netipMust("127.0.0.1:4000"), Peer: addrPort(t, p.client.LocalAddr())}
	other := UDPKey{Local: key.Local, Peer: netipMust("127.0.0.1:1")}
	if err := f.f.AddUDPPeer(key, p.a, p.b, []byte("early")); err != nil {
		t.Fatalf("AddUDPPeer: %v", err)
	}
	for _, late := range [][][]byte{{[]byte("late 1"), nil}, {[]byte("late 2")}} {
		if err := f.f.LateUDP(key, late...); err != nil {
			t.Fatalf("LateUDP: %v", err)
		}
	}
	if err := f.f.LateUDP(other, []byte("nobody's")); err != nil {
		t.Fatalf("LateUDP: %v", err)
	}
	nstest.ReadFlow(t, srv, "early", "late 1", "", "late 2")
	buf := make([]byte, 100)
	waitFor(t, "the drop of the datagram of no flow", testTimeout, func() bool { return f.f.Stats().UDPDrops == 1 })
	// Once the flow timed out, its name takes no more datagrams.
	waitFor(t, "the flow's timeout", testTimeout, func() bool { return f.f.Stats().UDPActive == 0 })
	if err := f.f.LateUDP(key, []byte("after")); err != nil {
		t.Fatalf("LateUDP: %v", err)
	}
	waitFor(t, "the drop of the datagram after the flow", testTimeout, func() bool { return f.f.Stats().UDPDrops == 2 })
	srv.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := srv.Read(buf); err == nil {
		t.Fatalf("after the flow closed: got %q, want nothing", buf[:n])
	}
}

// TestUDPLateClose: late datagrams still queued when the forwarder closes
// hold no descriptor to close and no flow reservation to give back.
func TestUDPLateClose(t *testing.T) {
	f, err := NewForwarder(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(0, unix.F_GETFD, 0); err != nil {
		// Nothing at descriptor 0 in this process: put a pipe's end
		// there, so that a Close that closed it would show.
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		if err := unix.Dup2(p[0], 0); err != nil {
			t.Fatal(err)
		}
		unix.Close(p[0])
		t.Cleanup(func() { unix.Close(0); unix.Close(p[1]) })
	}
	if err := f.LateUDP(UDPKey{Peer: netipMust("127.0.0.1:1")}, []byte("late")); err != nil {
		t.Fatalf("LateUDP: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := f.reservedUDP.Load(); got != 0 {
		t.Errorf("UDP flows reserved after Close: got %d, want 0", got)
	}
	if _, err := unix.FcntlInt(0, unix.F_GETFD, 0); err != nil {
		t.Errorf("descriptor 0 closed by Close: %v", err)
	}
}

// TestUDPFullSendBuffer: a socket whose send buffer fills (a slow link,
// here a token bucket on the loopback of a namespace of the test's own)
// makes the flow wait instead of dropping: every datagram arrives, in
// order, and the flow held some.
func TestUDPFullSendBuffer(t *testing.T) {
	ns := newNSThread(t)
	var tid int
	ns.Do(func() { tid = unix.Gettid() })
	tc := exec.Command("nsenter", fmt.Sprintf("--net=/proc/%d/task/%d/ns/net", os.Getpid(), tid),
		"tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "20mbit", "burst", "4k", "limit", "4m")
	if out, err := tc.CombinedOutput(); err != nil {
		t.Skipf("no token bucket on the namespace's loopback (tc, sch_tbf): %v: %s", err, out)
	}
	var client, srv *net.UDPConn
	var a, b int
	var err error
	ns.Do(func() {
		lo := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
		if client, err = net.ListenUDP("udp", lo); err != nil {
			return
		}
		if srv, err = net.ListenUDP("udp", lo); err != nil {
			return
		}
		if a, err = sock.Reply(netipMust("127.0.0.1:0"), "", addrPort(t, client.LocalAddr())); err != nil {
			return
		}
		b, err = sock.Dial(true, addrPort(t, srv.LocalAddr()))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	defer srv.Close()
	// Room for the whole transfer where the test reads and where the
	// forwarder reads, so that only b's small send buffer can lose data.
	for _, fd := range []int{a, sysFd(t, srv)} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.SetsockoptInt(b, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(a)
	if err != nil {
		t.Fatal(err)
	}
	front := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port}
	f := newRig(t, Options{}).f
	if err := f.AddUDP(a, b); err != nil {
		t.Fatalf("AddUDP: %v", err)
	}
	const count, size = 400, 1200
	go func() {
		for i := range count {
			client.WriteToUDP(burstDatagram(0, i, size), front)
		}
		client.WriteToUDP(nil, front)
	}()
	srv.SetDeadline(deadlineIn())
	if _, err := readBurst(srv, 0, count, size); err != nil {
		t.Fatalf("%v (%+v)", err, f.Stats())
	}
	st := f.Stats()
	if st.UDPDrops != 0 || st.UDPHeld == 0 {
		t.Errorf("drops %d, held %d: want no drop, and some datagrams held for the full send buffer", st.UDPDrops, st.UDPHeld)
	}
}

// sysFd is c's descriptor, for socket options.
func sysFd(t *testing.T, c *net.UDPConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	rc.Control(func(s uintptr) { fd = int(s) })
	return fd
}

// TestUDPBurstBound: once a flow has carried a large datagram, a readiness
// event reads the next ones one per recvmmsg (udpRounds of them; the rest
// wait for the next event), so that a batch of them neither floods the
// receiving socket nor spreads over 2 MiB of buffers; small datagrams still
// go in one batch. The Forwarder's loop does not run: the test drives the
// flow itself, with every datagram already queued on a (loopback delivers
// during sendto).
func TestUDPBurstBound(t *testing.T) {
	tests := []struct {
		name           string
		size, queued   int
		want           int // datagrams moved by one event
		wantLeftQueued bool
	}{
		{"65000 bytes", 65000, udpRounds + 2, udpRounds, true},
		{"1400 bytes", 1400, udpRounds + 2, udpRounds + 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, p := newHandDriven(t)
			for _, fd := range []int{p.a, p.b} {
				if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20); err != nil {
					t.Fatal(err)
				}
				if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.srv.SetReadBuffer(4 << 20); err != nil {
				t.Fatal(err)
			}
			slot, err := f.openUDP(p.a, p.b)
			if err != nil {
				t.Fatal(err)
			}
			seq := 0
			send := func(n int) {
				t.Helper()
				for range n {
					if _, err := p.client.WriteToUDP(burstDatagram(0, seq, tt.size), p.front); err != nil {
						t.Fatal(err)
					}
					seq++
				}
			}
			// The first datagram sets the size that bounds the next batch.
			send(1)
			f.udpEvent(slot, 0, unix.EPOLLIN)
			before := f.Stats().UDPDatagrams
			send(tt.queued)
			f.udpEvent(slot, 0, unix.EPOLLIN)
			if got := f.Stats().UDPDatagrams - before; got != uint64(tt.want) {
				t.Errorf("one event moved %d datagrams of %d queued, want %d", got, tt.queued, tt.want)
			}
			left, err := unix.IoctlGetInt(p.a, unix.SIOCINQ)
			if err != nil {
				t.Fatal(err)
			}
			if (left > 0) != tt.wantLeftQueued {
				t.Errorf("next datagram waiting on a: %d bytes, want some: %v", left, tt.wantLeftQueued)
			}
			// What moved arrives whole and in order: the first datagram,
			// then the event's.
			buf := make([]byte, 65536)
			for i := range 1 + tt.want {
				n, err := p.srv.Read(buf)
				if err != nil {
					t.Fatalf("server read %d: %v", i, err)
				}
				if want := burstDatagram(0, i, tt.size); !bytes.Equal(buf[:n], want) {
					t.Fatalf("server read %d: got %d bytes starting %q, want %d starting %q", i, n, buf[:min(n, 9)], len(want), want[:9])
				}
			}
		})
	}
}

// TestUDPSegmentation drives a flow by hand: one readiness event forwards a
// batch of mixed sizes (an empty datagram among them) that the client
// queued. Runs of one size leave b as one UDP_SEGMENT message each, which
// a server that asked for UDP_GRO receives as one coalesced read, the
// segment size in its control message; a server that did not gets every
// datagram whole and in order. With checksums off on b (SO_NO_CHECK), the
// kernel refuses offload, and the datagrams go singly, none dropped.
func TestUDPSegmentation(t *testing.T) {
	sizes := []int{1000, 1000, 1000, 1000, 1000, 600, 1000, 1000, 1000, 0, 1200, 1200, 1300}
	for _, tc := range []struct {
		name           string
		gro, noCheck   bool
		wantFirstRead  int // bytes of the server's first read
		wantGSOSize    int // its UDP_GRO segment size (0: none)
		wantRefusedGSO bool
	}{
		{"coalesced", true, false, 5600, 1000, false},
		{"whole", false, false, 1000, 0, false},
		{"refused", true, true, 1000, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, p := newHandDriven(t)
			if tc.noCheck {
				if err := unix.SetsockoptInt(p.b, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); err != nil {
					t.Fatal(err)
				}
			}
			srv := sysFd(t, p.srv)
			if tc.gro {
				// Linux 5.0; the proof that runs went as one
				// message rests on it, so no skip.
				if err := unix.SetsockoptInt(srv, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
					t.Fatalf("UDP_GRO on the server: %v", err)
				}
			}
			slot, err := f.openUDP(p.a, p.b)
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range sizes {
				if _, err := p.client.WriteToUDP(burstDatagram(0, i, n), p.front); err != nil {
					t.Fatal(err)
				}
			}
			f.udpEvent(slot, 0, unix.EPOLLIN)
			if got := f.Stats().UDPDatagrams; got != uint64(len(sizes)) {
				t.Errorf("one event forwarded %d datagrams, want %d", got, len(sizes))
			}
			if got := f.Stats().UDPDrops; got != 0 {
				t.Errorf("drops: got %d, want 0", got)
			}
			if got := f.udp.Items[slot].noGSO[1]; got != tc.wantRefusedGSO {
				t.Errorf("offload refused on b: got %v, want %v", got, tc.wantRefusedGSO)
			}
			buf := make([]byte, 65536)
			oob := make([]byte, 64)
			for i := 0; i < len(sizes); {
				// unix.Recvmsg, for the control message; the fd is
				// blocking, and the read deadline does not bound it.
				waitFor(t, "a datagram at the server", testTimeout, func() bool {
					n, _ := unix.IoctlGetInt(srv, unix.SIOCINQ)
					return n > 0 || sizes[i] == 0
				})
				n, oobn, _, _, err := unix.Recvmsg(srv, buf, oob, unix.MSG_DONTWAIT)
				if err != nil {
					t.Fatalf("server read at datagram %d: %v", i, err)
				}
				seg := groSize(t, oob[:oobn])
				if i == 0 && (n != tc.wantFirstRead || seg != tc.wantGSOSize) {
					t.Errorf("first read: got %d bytes in segments of %d, want %d in segments of %d", n, seg, tc.wantFirstRead, tc.wantGSOSize)
				}
				// A coalesced read holds several datagrams, each
				// seg bytes but the last; any other holds one.
				got := [][]byte{buf[:n]}
				if seg > 0 {
					got = got[:0]
					for off := 0; off < n; off += seg {
						got = append(got, buf[off:min(off+seg, n)])
					}
				}
				for _, d := range got {
					if i == len(sizes) {
						t.Fatalf("server read %d bytes more than the %d datagrams sent", len(d), len(sizes))
					}
					if want := burstDatagram(0, i, sizes[i]); !bytes.Equal(d, want) {
						t.Fatalf("datagram %d: got %d bytes starting %q, want %d starting %q", i, len(d), d[:min(len(d), 9)], len(want), want[:min(len(want), 9)])
					}
					i++
				}
			}
		})
	}
}

// groSize returns the segment size a UDP_GRO control message in oob gives,
// 0 for none.
func groSize(t *testing.T, oob []byte) int {
	t.Helper()
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		t.Fatalf("control messages: %v", err)
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 2 {
			return int(binary.NativeEndian.Uint16(m.Data))
		}
	}
	return 0
}
