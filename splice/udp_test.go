package splice

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

func TestUDPTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reply   bool
		min, to time.Duration
	}{
		{"one way", false, 900 * time.Millisecond, 3500 * time.Millisecond},
		{"answered", true, 1900 * time.Millisecond, 4500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newUDPRig(t, Options{UDPTimeout: time.Second, UDPReplyTimeout: 2 * time.Second})
			buf := make([]byte, 100)
			r.client.WriteToUDP([]byte("ping"), r.front)
			_, from, err := r.server.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("server receive: %v", err)
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
