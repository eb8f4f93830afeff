package splice

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/sock"
)

// tcpListenerTo serves a loopback listener on r's forwarder whose
// connections go to dst, and returns its address.
func tcpListenerTo(t *testing.T, r *rig, dst netip.AddrPort) (netip.AddrPort, ListenerID) {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	fd, err := sock.Listen{Addr: lo}.Open()
	if err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	id, err := r.f.AddTCPListener(TCPListener{Fd: fd, Dial: func(netip.AddrPort) (int, error) { return sock.Dial(false, dst) }})
	if err != nil {
		t.Fatalf("AddTCPListener: %v", err)
	}
	return netip.AddrPortFrom(lo, uint16(sa.(*unix.SockaddrInet4).Port)), id
}

// echoBack serves l: every connection gets back what it sent. It outlives
// accept failures (TestTCPListenerRefusesOutOfDescriptors starves the
// process of descriptors) and ends when l is closed.
func echoBack(l net.Listener) {
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}

func roundTrip(addr netip.AddrPort, msg string) error {
	c, err := net.DialTimeout("tcp", addr.String(), testTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(deadlineIn())
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if string(got) != msg {
		return fmt.Errorf("got %q back, want %q", got, msg)
	}
	return nil
}

// TestTCPListener: the forwarder's own listener accepts, dials and splices
// on its loop; once removed, the port refuses and can be bound again.
func TestTCPListener(t *testing.T) {
	r := newRig(t, Options{})
	go echoBack(r.back)
	addr, id := tcpListenerTo(t, r, addrPort(t, r.back.Addr()))
	for i := range 20 {
		if err := roundTrip(addr, fmt.Sprintf("hello %d", i)); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	if got := r.f.ListenerCount(); got != 1 {
		t.Errorf("ListenerCount: got %d, want 1", got)
	}
	r.f.RemoveListener(id)
	r.f.RemoveListener(id) // twice is harmless
	if got := r.f.ListenerCount(); got != 0 {
		t.Errorf("ListenerCount after removal: got %d, want 0", got)
	}
	if c, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		c.Close()
		t.Errorf("dial after RemoveListener: got a connection, want refused")
	}
	l, err := net.Listen("tcp", addr.String())
	if err != nil {
		t.Fatalf("rebinding the removed listener's port: %v", err)
	}
	l.Close()
}

// TestTCPListenerBurst: connections queued at the listener all at once
// (one accept per event at first, then batches) are all served, and so are
// connections one after another.
func TestTCPListenerBurst(t *testing.T) {
	r := newRig(t, Options{})
	go echoBack(r.back)
	addr, _ := tcpListenerTo(t, r, addrPort(t, r.back.Addr()))
	const n = 100
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- roundTrip(addr, fmt.Sprintf("burst %d", i)) }()
	}
	for i := range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("burst connection: %v", err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("burst: %d of %d connections done after %v", i, n, testTimeout)
		}
	}
	for i := range 20 {
		if err := roundTrip(addr, fmt.Sprintf("after %d", i)); err != nil {
			t.Fatalf("connection %d after the burst: %v", i, err)
		}
	}
}

// TestTCPListenerDialFails: a connection whose other side cannot be
// reached is reset, and the listener goes on serving.
func TestTCPListenerDialFails(t *testing.T) {
	r := newRig(t, Options{})
	var fails atomic.Bool
	fails.Store(true)
	fd, err := sock.Listen{Addr: netip.MustParseAddr("127.0.0.1")}.Open()
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(sa.(*unix.SockaddrInet4).Port))
	back := addrPort(t, r.back.Addr())
	go echoBack(r.back)
	if _, err := r.f.AddTCPListener(TCPListener{Fd: fd, Dial: func(netip.AddrPort) (int, error) {
		if fails.Load() {
			return -1, unix.ECONNREFUSED
		}
		return sock.Dial(false, back)
	}}); err != nil {
		t.Fatal(err)
	}
	// The reset may come before the client's connect has returned.
	c, err := net.DialTimeout("tcp", addr.String(), testTimeout)
	if err == nil {
		c.SetReadDeadline(deadlineIn())
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if !isReset(err) {
		t.Errorf("connection with the target unreachable: got %v, want a reset", err)
	}
	fails.Store(false)
	if err := roundTrip(addr, "again"); err != nil {
		t.Errorf("after a failed dial: %v", err)
	}
}

// TestTCPListenerRefusesOutOfDescriptors: a connection that waits on a
// listener while the process has no descriptor left is refused with a
// reset (the loop's spare descriptor takes it off the queue), counted as
// a refusal, and the listener serves the next connection once descriptors
// are back, rather than leaving the port bound and dead or spinning.
func TestTCPListenerRefusesOutOfDescriptors(t *testing.T) {
	refusals := &limit.Refusals{}
	r := newRig(t, Options{Refusals: refusals})
	go echoBack(r.back)
	addr, _ := tcpListenerTo(t, r, addrPort(t, r.back.Addr()))
	if err := roundTrip(addr, "before"); err != nil {
		t.Fatalf("before: %v", err)
	}

	// The client socket exists before the descriptors run out; its
	// connect completes in the kernel, and the accept fails.
	cfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got [1]byte
	var rerr error
	nstest.RunOutOfDescriptors(t, func() {
		err = unix.Connect(cfd, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()})
		if err == nil {
			tv := unix.NsecToTimeval(int64(testTimeout))
			unix.SetsockoptTimeval(cfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
			_, rerr = unix.Read(cfd, got[:])
		}
	})
	unix.Close(cfd)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if rerr != unix.ECONNRESET {
		t.Errorf("a connection that waited while accept failed with EMFILE: got read error %v, want ECONNRESET", rerr)
	}
	// The loop counts the refusal after the reset, which the client
	// may have read first.
	err = nstest.WaitFor(2*time.Second, func() error {
		if n := refusals.Totals()[limit.TCP]; n != 1 {
			return fmt.Errorf("refused TCP connections: got %d, want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if err := roundTrip(addr, "after"); err != nil {
		t.Errorf("once descriptors are back: %v (%+v)", err, r.f.Stats())
	}
}

// udpListenerTo serves a loopback UDP listener whose peers' datagrams go to
// dst; it returns the listener's address.
func udpListenerTo(t *testing.T, r *rig, lo netip.Addr, dst netip.AddrPort) netip.AddrPort {
	t.Helper()
	fd, err := sock.Listen{UDP: true, V6: lo.Is6(), Addr: lo}.Open()
	if err != nil {
		t.Fatal(err)
	}
	local := nstest.LocalAddr(t, fd)
	if _, err := r.f.AddUDPListener(UDPListener{Fd: fd, V6: lo.Is6(), Local: local,
		Dial: func(_, peer netip.AddrPort) (int, error) { return sock.DialUDPFrom(dst, peer) }}); err != nil {
		t.Fatalf("AddUDPListener: %v", err)
	}
	return local
}

// TestUDPListener: a burst from one peer, sent before its flow exists and
// ending in an empty datagram, arrives whole and in order as one flow, and
// the server's replies reach the peer from the address it sent to; IPv4
// and IPv6.
func TestUDPListener(t *testing.T) {
	for _, fam := range []string{"127.0.0.1", "::1"} {
		t.Run(fam, func(t *testing.T) {
			lo := netip.MustParseAddr(fam)
			r := newRig(t, Options{})
			srv, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			addr := udpListenerTo(t, r, lo, addrPort(t, srv.LocalAddr()))
			cl, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			const burst = 50
			for i := range burst {
				cl.Write(bytes.Repeat([]byte{byte(i)}, 100+i))
			}
			cl.Write(nil)
			srv.SetDeadline(deadlineIn())
			buf := make([]byte, 2048)
			var from netip.AddrPort
			for i := 0; i <= burst; i++ {
				n, peer, err := srv.ReadFromUDPAddrPort(buf)
				if err != nil {
					t.Fatalf("datagram %d: %v (%+v)", i, err, r.f.Stats())
				}
				if i > 0 && peer != from {
					t.Fatalf("datagram %d came from %v, want %v: one flow per peer", i, peer, from)
				}
				from = peer
				want := 100 + i
				if i == burst {
					want = 0
				}
				if n != want {
					t.Fatalf("datagram %d: got %d bytes, want %d", i, n, want)
				}
			}
			if got := r.f.Stats().UDPTotal; got != 1 {
				t.Errorf("flows: got %d, want 1", got)
			}
			if _, err := srv.WriteToUDPAddrPort([]byte("reply"), from); err != nil {
				t.Fatal(err)
			}
			cl.SetDeadline(deadlineIn())
			n, err := cl.Read(buf)
			if err != nil || string(buf[:n]) != "reply" {
				t.Errorf("reply: got %q, %v; want \"reply\"", buf[:n], err)
			}
		})
	}
}
