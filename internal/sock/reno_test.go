package sock

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

func TestLocalPeer(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		dst, src netip.Addr
		want     bool
	}{
		{a("127.0.0.1"), a("127.0.0.1"), true},
		{a("127.0.0.5"), a("127.0.0.1"), true},
		{a("::1"), a("::1"), true},
		{a("192.0.2.1"), a("192.0.2.1"), true},
		{a("192.0.2.1"), a("::ffff:192.0.2.1"), true},
		{a("2001:db8::1"), a("2001:db8::1"), true},
		{a("192.0.2.7"), a("192.0.2.1"), false},
		{a("2001:db8::7"), a("2001:db8::1"), false},
		{netip.Addr{}, netip.Addr{}, false},
	} {
		if got := localPeer(tc.dst, tc.src); got != tc.want {
			t.Errorf("localPeer(%v, %v): got %v, want %v", tc.dst, tc.src, got, tc.want)
		}
	}
}

// TestRenoCount: Add reports the count reaching RenoAfter once, however
// the bytes come.
func TestRenoCount(t *testing.T) {
	for _, tc := range []struct {
		name  string
		adds  []int
		which int // the Add that reports true; -1: none
	}{
		{"small", []int{100, 200, 4096}, -1},
		{"exactly", []int{RenoAfter - 1, 1, 1}, 1},
		{"in one", []int{10 * RenoAfter, 5, RenoAfter}, 0},
		{"in halves", []int{RenoAfter / 2, RenoAfter / 2, RenoAfter / 2}, 1},
		{"huge first", []int{1 << 40}, 0},
	} {
		var r RenoCount
		for i, n := range tc.adds {
			if got, want := r.Add(n), i == tc.which; got != want {
				t.Errorf("%s: Add #%d (%d): got %v, want %v", tc.name, i, n, got, want)
			}
		}
	}
}

// TestLocalReno: a socket connected over loopback gets reno; told that its
// peer is an address it does not have as its source, it keeps the host's
// default.
func TestLocalReno(t *testing.T) {
	// A namespace of the test's own where it may, so that its default
	// can be set to other than reno.
	if fresh, err := nstest.UnshareNetns(); fresh && err != nil {
		t.Fatal(err)
	}
	def := nstest.CongestionNotReno(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	var a Acceptor
	for _, tc := range []struct {
		dst  netip.Addr
		want string
		set  bool
	}{
		{netip.MustParseAddr("127.0.0.1"), "reno", true},
		{netip.MustParseAddr("192.0.2.7"), def, false},
	} {
		fd, err := Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := ConnectSA(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil && err != unix.EINPROGRESS {
			t.Fatal(err)
		}
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		set := LocalReno(fd, tc.dst, &a)
		got, err := unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		if set != tc.set || got != tc.want || err != nil {
			t.Errorf("LocalReno told the peer is %v: got %v and %q (%v), want %v and %q", tc.dst, set, got, err, tc.set, tc.want)
		}
	}
}
