package splice

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/sock"
)

// TestListenerAnyLoopbackAddress: listeners bound to any address on lo (as
// -T and -U bind them) take connections and datagrams to every address of
// 127.0.0.0/8, and Dial learns which one each reached, so that the other
// side goes to the same loopback address: a server there listening on
// 127.0.0.6 only is reached through 127.0.0.6 and no other address, and a
// UDP peer's loopback address and port are kept.
func TestListenerAnyLoopbackAddress(t *testing.T) {
	r := newRig(t, Options{})
	at := netip.MustParseAddr("127.0.0.6")

	// TCP.
	back, err := net.Listen("tcp4", netip.AddrPortFrom(at, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	go echoBack(back)
	backPort := addrPort(t, back.Addr()).Port()
	fd, err := sock.Listen{Addr: netip.IPv4Unspecified(), Ifname: "lo"}.Open()
	if err != nil {
		t.Skipf("a listener bound to lo: %v", err)
	}
	port := nstest.LocalAddr(t, fd).Port()
	reached := make(chan netip.AddrPort, 4)
	dial := func(local netip.AddrPort) (int, error) {
		reached <- local
		return sock.Dial(false, netip.AddrPortFrom(local.Addr(), backPort))
	}
	if _, err := r.f.AddTCPListener(TCPListener{Fd: fd, Local: netip.AddrPortFrom(netip.IPv4Unspecified(), port), Dial: dial}); err != nil {
		t.Fatalf("AddTCPListener: %v", err)
	}
	if err := roundTrip(netip.AddrPortFrom(at, port), "to 127.0.0.6"); err != nil {
		t.Errorf("TCP through 127.0.0.6: %v", err)
	}
	if got := <-reached; got != netip.AddrPortFrom(at, port) {
		t.Errorf("TCP: Dial got local %v, want %v", got, netip.AddrPortFrom(at, port))
	}
	if err := roundTrip(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), "to 127.0.0.1"); err == nil {
		t.Errorf("TCP through 127.0.0.1: got a round trip, want none (the server is on 127.0.0.6 only)")
	}
	if got := <-reached; got.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("TCP: Dial got local %v, want 127.0.0.1", got)
	}

	// UDP: the peer sends from 127.0.0.7.
	srv, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(at, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srvPort := addrPort(t, srv.LocalAddr()).Port()
	ufd, err := sock.Listen{UDP: true, Addr: netip.IPv4Unspecified(), Ifname: "lo"}.Open()
	if err != nil {
		t.Fatal(err)
	}
	ulocal := nstest.LocalAddr(t, ufd)
	udial := func(local, peer netip.AddrPort) (int, error) {
		reached <- local
		return sock.DialUDPFrom(netip.AddrPortFrom(local.Addr(), srvPort), peer)
	}
	if _, err := r.f.AddUDPListener(UDPListener{Fd: ufd, Local: ulocal, Ifname: "lo", Dial: udial}); err != nil {
		t.Fatalf("AddUDPListener: %v", err)
	}
	// The peer shares its port (SO_REUSEADDR) with the socket that keeps
	// it on the other side, which here is the same namespace.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", "127.0.0.7:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := pc.(*net.UDPConn)
	defer cl.Close()
	deadline := time.Now().Add(testTimeout)
	cl.SetDeadline(deadline)
	srv.SetDeadline(deadline)
	if _, err := cl.WriteToUDPAddrPort([]byte("ping"), netip.AddrPortFrom(at, ulocal.Port())); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, from, err := srv.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("UDP server: got %q (%v), want ping", buf[:n], err)
	}
	if want := addrPort(t, cl.LocalAddr()); from != want {
		t.Errorf("UDP server: got a datagram from %v, want from %v (the peer's address and port kept)", from, want)
	}
	if got := <-reached; got != netip.AddrPortFrom(at, ulocal.Port()) {
		t.Errorf("UDP: Dial got local %v, want %v", got, netip.AddrPortFrom(at, ulocal.Port()))
	}
	if _, err := srv.WriteToUDPAddrPort([]byte("pong"), from); err != nil {
		t.Fatal(err)
	}
	n, rfrom, err := cl.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("UDP peer: got %q (%v), want pong", buf[:n], err)
	}
	if want := netip.AddrPortFrom(at, ulocal.Port()); rfrom != want {
		t.Errorf("UDP peer: got the answer from %v, want from %v", rfrom, want)
	}
}
