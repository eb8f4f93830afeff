package sock

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestListenFreebind: with --freebind a forwarded port binds an address
// the host does not have (yet); without it the kernel refuses. The IPv6
// row is IP_FREEBIND on an IPv6 socket, which every kernel takes.
func TestListenFreebind(t *testing.T) {
	for _, a := range []string{"198.51.100.77", "2001:db8:77::1"} {
		addr := netip.MustParseAddr(a)
		l := Listen{V6: addr.Is6(), Addr: addr}
		if fd, err := l.Open(); err == nil {
			unix.Close(fd)
			t.Fatalf("%s: bind without --freebind succeeded, want EADDRNOTAVAIL", a)
		}
		l.Freebind = true
		fd, err := l.Open()
		if err != nil {
			t.Fatalf("%s: bind with --freebind: %v", a, err)
		}
		unix.Close(fd)
	}
}

func TestDialErrors(t *testing.T) {
	for _, dst := range []netip.AddrPort{{}, netip.MustParseAddrPort("127.0.0.1:0")} {
		if fd, err := Dial(false, dst); err == nil {
			unix.Close(fd)
			t.Errorf("Dial(%v): got fd %d, want an error", dst, fd)
		}
	}
}

// TestReplyZeroLength: a peer's reply socket is bound where the listener is
// and connected to the peer, so the peer's later datagrams reach it rather
// than the listener; it carries an empty datagram both ways.
func TestReplyZeroLength(t *testing.T) {
	for _, fam := range []string{"127.0.0.1", "::1"} {
		lo := netip.MustParseAddr(fam)
		lfd, err := Listen{UDP: true, V6: lo.Is6(), Addr: lo}.Open()
		if err != nil {
			t.Fatalf("%s: listen: %v", fam, err)
		}
		defer unix.Close(lfd)
		local := nstest.LocalAddr(t, lfd)
		peer, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		rfd, err := Reply(local, "", netip.MustParseAddrPort(peer.LocalAddr().String()))
		if err != nil {
			t.Fatalf("%s: Reply: %v", fam, err)
		}
		defer unix.Close(rfd)
		if _, err := peer.WriteToUDPAddrPort(nil, local); err != nil {
			t.Fatal(err)
		}
		var fds = []unix.PollFd{{Fd: int32(rfd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 5000); n != 1 {
			t.Fatalf("%s: the reply socket got nothing, want the empty datagram", fam)
		}
		n, _, err := unix.Recvfrom(rfd, make([]byte, 16), unix.MSG_DONTWAIT)
		if err != nil || n != 0 {
			t.Fatalf("%s: recv: got %d, %v, want 0 bytes", fam, n, err)
		}
	}
}

// TestReplyFreebind: a reply socket binds where the listener's peer sent
// to, which with --freebind may be an address the host does not have (an
// IPv6 address of a local route, which bind(2) refuses without it).
func TestReplyFreebind(t *testing.T) {
	local := netip.MustParseAddrPort("[2001:db8:77::1]:5353")
	peer := netip.MustParseAddrPort("[::1]:5354")
	if fd, err := ReplyWith(local, peer, ReplyOptions{}); err == nil {
		unix.Close(fd)
		t.Fatalf("ReplyWith(%v) without Freebind: got a socket, want EADDRNOTAVAIL", local)
	} else if !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Fatalf("ReplyWith(%v) without Freebind: got %v, want EADDRNOTAVAIL", local, err)
	}
	fd, err := ReplyWith(local, peer, ReplyOptions{Freebind: true})
	if err != nil {
		t.Fatalf("ReplyWith(%v) with Freebind: %v", local, err)
	}
	defer unix.Close(fd)
	if got := nstest.LocalAddr(t, fd); got != local {
		t.Errorf("bound to %v, want %v", got, local)
	}
}

// TestAddrPortOf: kernel socket addresses, IPv4-mapped ones unmapped.
func TestAddrPortOf(t *testing.T) {
	var in4 unix.RawSockaddrAny
	r4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&in4))
	r4.Family, r4.Addr = unix.AF_INET, [4]byte{192, 0, 2, 1}
	r4.Port = 0x5000 // network order: port 80
	var in6 unix.RawSockaddrAny
	r6 := (*unix.RawSockaddrInet6)(unsafe.Pointer(&in6))
	r6.Family, r6.Addr = unix.AF_INET6, netip.MustParseAddr("::ffff:192.0.2.2").As16()
	r6.Port = 0x3500 // 53
	for _, tc := range []struct {
		rsa  *unix.RawSockaddrAny
		want string
	}{{&in4, "192.0.2.1:80"}, {&in6, "192.0.2.2:53"}, {&unix.RawSockaddrAny{}, "invalid AddrPort"}} {
		if got := AddrPortOf(tc.rsa).String(); got != tc.want {
			t.Errorf("AddrPortOf: got %s, want %s", got, tc.want)
		}
	}
}

func TestAcceptBudget(t *testing.T) {
	for _, tc := range []struct {
		last, now uint64
		want      int
	}{
		{0, 1, 1},           // never accepted
		{5, 9, 1},           // a connection after a pause
		{8, 9, AcceptBatch}, // reported again the next cycle: a queue
		{9, 9, AcceptBatch}, // twice in one cycle
		{1 << 63, 1<<63 + 1, AcceptBatch},
	} {
		if got := AcceptBudget(tc.last, tc.now); got != tc.want {
			t.Errorf("AcceptBudget(%d, %d): got %d, want %d", tc.last, tc.now, got, tc.want)
		}
	}
}

// TestListenReserve: a listener that would take one of the descriptors kept
// for connections is refused with EMFILE (so port forwarding warns and
// retries as for any descriptor shortage) and leaves no socket open.
func TestListenReserve(t *testing.T) {
	lowest := func() int {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		return fd
	}
	n := lowest()
	saved := listenCeiling
	listenCeiling = n + 1
	defer func() { listenCeiling = saved }()

	first, err := Listen{Addr: netip.MustParseAddr("127.0.0.1")}.Open()
	if err != nil {
		t.Fatalf("listener below the ceiling: got %v, want it open", err)
	}
	defer unix.Close(first)
	if _, err := (Listen{Addr: netip.MustParseAddr("127.0.0.1")}).Open(); !errors.Is(err, unix.EMFILE) || !errors.Is(err, ErrListenReserve) {
		t.Errorf("listener at the ceiling: got %v, want EMFILE (ErrListenReserve)", err)
	}
	if got := lowest(); got != n+1 {
		t.Errorf("lowest free descriptor after the refusal: got %d, want %d (the refused socket closed)", got, n+1)
	}
}

// TestDialUDPFrom: the socket keeps the port asked for, shared with a
// socket that holds it with SO_REUSEADDR (a forwarded port's listener),
// and falls back to an ephemeral port when the port's holder does not
// share it.
func TestDialUDPFrom(t *testing.T) {
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dst := srv.LocalAddr().(*net.UDPAddr).AddrPort()
	shared, err := Listen{UDP: true, Addr: netip.MustParseAddr("127.0.0.1")}.Open() // SO_REUSEADDR
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(shared)
	exclusive, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer exclusive.Close()
	port := func(fd int) uint16 { return nstest.LocalAddr(t, fd).Port() }
	exclusivePort := uint16(exclusive.LocalAddr().(*net.UDPAddr).Port)
	for _, tc := range []struct {
		name     string
		addr     string
		port     uint16
		wantSame bool
		wantAddr string // the source address: kept when a loopback one
	}{
		{"shared with a listener", "", port(shared), true, "127.0.0.1"},
		{"held without SO_REUSEADDR", "", exclusivePort, false, "127.0.0.1"},
		{"a loopback address kept", "127.0.0.6", port(shared), true, "127.0.0.6"},
		{"not a loopback address", "192.0.2.77", port(shared), true, "127.0.0.1"},
		{"another family", "::1", port(shared), true, "127.0.0.1"},
	} {
		var a netip.Addr
		if tc.addr != "" {
			a = netip.MustParseAddr(tc.addr)
		}
		fd, err := DialUDPFrom(dst, netip.AddrPortFrom(a, tc.port))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		local := nstest.LocalAddr(t, fd)
		if got := local.Port(); (got == tc.port) != tc.wantSame || got == 0 {
			t.Errorf("%s: got source port %d, want %d kept: %v", tc.name, got, tc.port, tc.wantSame)
		}
		if got := local.Addr().String(); got != tc.wantAddr {
			t.Errorf("%s: got source address %s, want %s", tc.name, got, tc.wantAddr)
		}
		unix.Close(fd)
	}
}

// TestAcceptorLocal: the address a connection accepted on a listener bound
// to any address reached, without allocating.
func TestAcceptorLocal(t *testing.T) {
	lfd, err := Listen{Addr: netip.IPv4Unspecified()}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	port := nstest.LocalAddr(t, lfd).Port()
	for _, dst := range []string{"127.0.0.1", "127.0.0.6"} {
		c, err := net.Dial("tcp4", netip.AddrPortFrom(netip.MustParseAddr(dst), port).String())
		if err != nil {
			t.Fatal(err)
		}
		var acc Acceptor
		var fd int
		for range 100 {
			if fd, _, err = acc.Accept(lfd); err != unix.EAGAIN {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		got, err := acc.Local(fd)
		if err != nil || got != netip.AddrPortFrom(netip.MustParseAddr(dst), port) {
			t.Errorf("Local of a connection to %s: got %v (%v), want %s:%d", dst, got, err, dst, port)
		}
		if n := testing.AllocsPerRun(10, func() { acc.Local(fd) }); n != 0 {
			t.Errorf("Local: got %v allocations, want 0", n)
		}
		unix.Close(fd)
		c.Close()
	}
	var acc Acceptor
	if _, err := acc.Local(-1); err == nil {
		t.Errorf("Local(-1): got no error, want EBADF")
	}
}

// TestOnlyFrom: a socket bound to a listener's port takes the port's
// datagrams from every sender until it is connected (the test shows it
// without the filter); with onlyFrom it takes its peer's only, over IPv4
// and IPv6, and after Reply's connect the filter is gone.
func TestOnlyFrom(t *testing.T) {
	for _, lo := range []string{"127.0.0.1", "::1"} {
		t.Run(lo, func(t *testing.T) {
			addr := netip.MustParseAddr(lo)
			v6 := addr.Is6()
			lfd, err := socket(v6, unix.SOCK_DGRAM)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(lfd)
			unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			var sa Addr
			if err := unix.Bind(lfd, sa.Of(netip.Addr{}, 0, v6)); err != nil {
				t.Fatal(err)
			}
			port := nstest.LocalAddr(t, lfd).Port()
			to := netip.AddrPortFrom(addr, port)
			peer, stranger := udpClient(t, lo), udpClient(t, lo)
			peerAddr := netip.MustParseAddrPort(peer.LocalAddr().String())

			for _, filter := range []bool{false, true} {
				fd, err := socket(v6, unix.SOCK_DGRAM)
				if err != nil {
					t.Fatal(err)
				}
				unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
				if filter {
					if err := onlyFrom(fd, peerAddr); err != nil {
						t.Fatalf("onlyFrom: %v", err)
					}
				}
				if err := unix.Bind(fd, sa.Of(addr, port, v6)); err != nil {
					t.Fatal(err)
				}
				stranger.WriteToUDPAddrPort([]byte("stranger"), to)
				peer.WriteToUDPAddrPort([]byte("peer"), to)
				got := readAll(t, fd)
				unix.Close(fd)
				want := "[stranger peer]"
				if filter {
					want = "[peer]"
				}
				switch {
				case fmt.Sprint(got) == want:
				case !filter:
					// The kernel no longer hands the bound socket every
					// sender's datagrams; the filter's check below still
					// holds.
					t.Logf("without a filter the bound socket got %v, want %v (the case the filter is for)", got, want)
				default:
					t.Fatalf("filter %v: got %v, want %v", filter, got, want)
				}
				readAll(t, lfd)
			}

			// Reply detaches the filter once connected.
			fd, err := Reply(to, "", peerAddr)
			if err != nil {
				t.Fatalf("Reply: %v", err)
			}
			defer unix.Close(fd)
			// SO_GET_FILTER with no buffer reports the number of
			// instructions attached.
			var n uint32
			_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_GET_FILTER, 0, uintptr(unsafe.Pointer(&n)), 0)
			if e != 0 || n != 0 {
				t.Fatalf("after Reply: %d filter instructions attached (%v), want 0", n, e)
			}
			peer.WriteToUDPAddrPort([]byte("again"), to)
			if got := readAll(t, fd); fmt.Sprint(got) != "[again]" {
				t.Fatalf("Reply's socket: got %v, want [again]", got)
			}
		})
	}
}

// TestOnlyFromAllocs: the filter is built on the stack. A new UDP peer of
// a forwarded port costs a socket and its filter; it need not cost garbage
// too.
func TestOnlyFromAllocs(t *testing.T) {
	for _, peer := range []string{"127.0.0.1:5000", "[::1]:5000", "[::ffff:127.0.0.1]:5000"} {
		ap := netip.MustParseAddrPort(peer)
		fd, err := socket(ap.Addr().Is6() && !ap.Addr().Is4In6(), unix.SOCK_DGRAM)
		if err != nil {
			t.Fatal(err)
		}
		var ferr error
		allocs := testing.AllocsPerRun(20, func() { ferr = onlyFrom(fd, ap) })
		unix.Close(fd)
		if ferr != nil {
			t.Fatalf("%s: onlyFrom: %v", peer, ferr)
		}
		if allocs != 0 {
			t.Errorf("%s: got %v allocations per filter, want 0", peer, allocs)
		}
	}
}

func udpClient(t *testing.T, lo string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(lo), 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readAll is what fd holds once a datagram sent just now had time to
// arrive.
func readAll(t *testing.T, fd int) []string {
	t.Helper()
	var out []string
	for _, d := range nstest.ReadDatagrams(t, fd, 200*time.Millisecond, 20*time.Millisecond) {
		out = append(out, string(d))
	}
	return out
}

func TestBurst(t *testing.T) {
	tests := []struct{ batch, last, want int }{
		{64, 0, 64}, // nothing read yet
		{64, 1, 64},
		{64, 1400, 46},
		{32, 1400, 32},
		{64, 20000, 3},
		{64, 32768, 2},
		{64, 65000, 1},
		{64, 65507, 1},
		{64, 1 << 20, 1},
		{1, 1, 1},
	}
	for _, tt := range tests {
		if got := Burst(tt.batch, tt.last); got != tt.want {
			t.Errorf("Burst(%d, %d): got %d, want %d", tt.batch, tt.last, got, tt.want)
		}
	}
}
