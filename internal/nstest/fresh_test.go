package nstest

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
)

func netnsIno(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestEnterNetns: the thread moves to a namespace of its own and back.
func TestEnterNetns(t *testing.T) {
	RequireRoot(t)
	before := netnsIno(t)
	restore := EnterNetns(t)
	if in := netnsIno(t); in == before {
		t.Errorf("EnterNetns: still in namespace %d", in)
	}
	restore()
	if after := netnsIno(t); after != before {
		t.Errorf("restore: got namespace %d, want %d", after, before)
	}
}

// TestNetnsThread: Do runs in a fresh namespace whose loopback is up, and
// a socket made there stays there.
func TestNetnsThread(t *testing.T) {
	RequireRoot(t)
	n := NewNetnsThread(t)
	if err := n.Fresh(); err != nil {
		t.Fatalf("Fresh: %v", err)
	}
	var ino uint64
	var l net.Listener
	var err error
	n.Do(func() {
		ino = netnsIno(t)
		l, err = net.Listen("tcp", "127.0.0.1:0")
	})
	if err != nil {
		t.Fatalf("listen on the thread's loopback: %v", err)
	}
	defer l.Close()
	if ino != n.Ino() || ino == netnsIno(t) {
		t.Errorf("Do ran in namespace %d; the thread's is %d, the test's %d", ino, n.Ino(), netnsIno(t))
	}
	if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Errorf("the thread's listener %v answered from the test's namespace", l.Addr())
	}
}

// TestWaitReadable: nil once readable, a deadline error after the time.
func TestWaitReadable(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	start := time.Now()
	if err := WaitReadable(p[0], 50*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("empty pipe: got %v, want a deadline error", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("empty pipe: waited %v, want 50ms", d)
	}
	if err := WaitReadable(p[0], 0); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("empty pipe, no wait: got %v, want a deadline error", err)
	}
	unix.Write(p[1], []byte("x"))
	if err := WaitReadable(p[0], time.Second); err != nil {
		t.Errorf("pipe with a byte: got %v, want nil", err)
	}
	if err := WaitReadable(p[0], 0); err != nil {
		t.Errorf("pipe with a byte, no wait: got %v, want nil", err)
	}
}

// TestReadDatagrams: every datagram queued, in order, and none when none
// comes within the first wait.
func TestReadDatagrams(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if got := ReadDatagrams(t, fds[0], 20*time.Millisecond, 0); len(got) != 0 {
		t.Errorf("nothing sent: got %q", got)
	}
	for _, d := range []string{"one", "", "three"} {
		unix.Write(fds[1], []byte(d))
	}
	got := ReadDatagrams(t, fds[0], time.Second, 0)
	if len(got) != 3 || string(got[0]) != "one" || len(got[1]) != 0 || string(got[2]) != "three" {
		t.Errorf("got %q, want [one  three]", got)
	}
}

// TestPorts: FreePort's port takes a listener, LocalAddr names it.
func TestPorts(t *testing.T) {
	port := FreePort(t, "127.0.0.1:0")
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: int(port)}); err != nil {
		t.Fatalf("bind the free port %d: %v", port, err)
	}
	if got, want := LocalAddr(t, fd), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port); got != want {
		t.Errorf("LocalAddr: got %v, want %v", got, want)
	}
}

// TestUDPFrame: both families, with addresses, ports, lengths and every
// checksum as a receiver checks them.
func TestUDPFrame(t *testing.T) {
	dstMAC := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	srcMAC := net.HardwareAddr{2, 0, 0, 0, 0, 2}
	for _, tc := range []struct{ src, dst string }{
		{"192.0.2.1:1000", "192.0.2.2:53"},
		{"[2001:db8::1]:1000", "[2001:db8::2]:53"},
	} {
		src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
		f := UDPFrame(dstMAC, srcMAC, src, dst, []byte("payload"))
		eth := header.Ethernet(f)
		if string(eth.Dst()) != string(dstMAC) || string(eth.Src()) != string(srcMAC) {
			t.Errorf("%s: MACs %v > %v, want %v > %v", tc.src, net.HardwareAddr(eth.Src()), net.HardwareAddr(eth.Dst()), srcMAC, dstMAC)
		}
		var l4 []byte
		var ps uint16
		var from, to netip.Addr
		if src.Addr().Is6() {
			ip := header.IPv6(eth.Payload())
			if eth.Type() != header.EtherTypeIPv6 || !ip.IsValid(len(ip)) || ip.NextHeader() != header.ProtocolUDP {
				t.Fatalf("%s: not an IPv6 UDP packet: %x", tc.src, f)
			}
			l4, from, to = ip.Payload(), ip.Src(), ip.Dst()
			ps = header.PseudoHeaderChecksum(header.ProtocolUDP, ip.SrcSlice(), ip.DstSlice(), uint32(len(l4)))
		} else {
			ip := header.IPv4(eth.Payload())
			if eth.Type() != header.EtherTypeIPv4 || !ip.IsValid(len(ip)) || !ip.IsChecksumValid() || ip.Protocol() != header.ProtocolUDP {
				t.Fatalf("%s: not a valid IPv4 UDP packet: %x", tc.src, f)
			}
			l4, from, to = ip.Payload(), ip.Src(), ip.Dst()
			ps = header.PseudoHeaderChecksum(header.ProtocolUDP, ip.SrcSlice(), ip.DstSlice(), uint32(len(l4)))
		}
		u := header.UDP(l4)
		got := [2]netip.AddrPort{netip.AddrPortFrom(from, u.SrcPort()), netip.AddrPortFrom(to, u.DstPort())}
		if got != [2]netip.AddrPort{src, dst} || string(u.Payload()) != "payload" || header.Checksum(l4, ps) != 0xffff {
			t.Errorf("%s: got %v > %v %q (checksum ok %v), want %v > %v \"payload\"",
				tc.src, got[0], got[1], u.Payload(), header.Checksum(l4, ps) == 0xffff, src, dst)
		}
	}
}

// TestReadFlow: the datagrams of one sender, in order, and that sender.
func TestReadFlow(t *testing.T) {
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, d := range []string{"a", "", "b"} {
		c.Write([]byte(d))
	}
	if got, want := ReadFlow(t, srv, "a", "", "b"), c.LocalAddr().(*net.UDPAddr).AddrPort(); got != want {
		t.Errorf("got source %v, want %v", got, want)
	}
}
