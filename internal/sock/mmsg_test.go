package sock

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// udpPair is an unconnected UDP socket on addr that reports each
// datagram's destination (RecvPktInfo), and a socket sending to it.
func udpPair(t *testing.T, addr netip.Addr) (recv int, to netip.AddrPort, send *net.UDPConn) {
	t.Helper()
	v6 := addr.Is6()
	fd, err := socket(v6, unix.SOCK_DGRAM)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, new(Addr).Of(addr, 0, v6)); err != nil {
		t.Skipf("cannot bind %v: %v", addr, err)
	}
	if err := RecvPktInfo(fd, v6); err != nil {
		t.Fatalf("RecvPktInfo: %v", err)
	}
	to = nstest.LocalAddr(t, fd)
	send, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatalf("dial %v: %v", to, err)
	}
	t.Cleanup(func() { send.Close() })
	return fd, to, send
}

// TestRecvBatch: a batch with addresses takes each datagram's length,
// source and destination, marks one cut short, and a Set message after it
// asks for no addresses again; Mmsg sends from a batch too.
func TestRecvBatch(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "::1"} {
		t.Run(a, func(t *testing.T) {
			fd, to, send := udpPair(t, netip.MustParseAddr(a))
			from := netip.MustParseAddrPort(send.LocalAddr().String())
			dgrams := [][]byte{[]byte("one"), []byte("twotwo"), []byte("three, longer than its buffer")}
			for _, d := range dgrams {
				if _, err := send.Write(d); err != nil {
					t.Fatalf("write: %v", err)
				}
			}
			r := NewRecvBatch(4, true)
			bufs := make([][]byte, len(r.Msgs))
			for i := range bufs {
				bufs[i] = make([]byte, 8)
				r.SetFrom(i, bufs[i])
			}
			n, err := Mmsg(unix.SYS_RECVMMSG, fd, r.Msgs, unix.MSG_DONTWAIT)
			if n != len(dgrams) || err != nil {
				t.Fatalf("recvmmsg: got %d, %v; want %d, nil", n, err, len(dgrams))
			}
			for i, d := range dgrams {
				m := r.Msgs[i]
				trunc := m.Hdr.Flags&unix.MSG_TRUNC != 0
				got := bufs[i][:min(int(m.Len), len(bufs[i]))]
				if want := d[:min(len(d), 8)]; !bytes.Equal(got, want) || trunc != (len(d) > 8) {
					t.Errorf("datagram %d: got %q (truncated %v), want %q (truncated %v)", i, got, trunc, want, len(d) > 8)
				}
				if got := r.From(i); got != from {
					t.Errorf("datagram %d: From got %v, want %v", i, got, from)
				}
				if got := r.To(i, netip.Addr{}); got != to.Addr() {
					t.Errorf("datagram %d: To got %v, want %v", i, got, to.Addr())
				}
			}
			r.Set(0, bufs[0])
			if h := r.Msgs[0].Hdr; h.Name != nil || h.Namelen != 0 || h.Control != nil || h.Controllen != 0 || r.Msgs[0].Len != 0 {
				t.Errorf("Set after SetFrom: got header %+v, want no name, no control", h)
			}

			// Sent from a batch without addresses.
			s := NewRecvBatch(2, false)
			s.Set(0, []byte("four"))
			s.Set(1, []byte("five!"))
			out, err := Dial(true, to)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			defer unix.Close(out)
			if n, err := Mmsg(unix.SYS_SENDMMSG, out, s.Msgs, unix.MSG_DONTWAIT); n != 2 || err != nil {
				t.Fatalf("sendmmsg: got %d, %v; want 2, nil", n, err)
			}
			b := make([]byte, 16)
			for _, want := range []string{"four", "five!"} {
				k, err := unix.Read(fd, b)
				if err != nil || string(b[:max(k, 0)]) != want {
					t.Errorf("read: got %q, %v; want %q", b[:max(k, 0)], err, want)
				}
			}
		})
	}
}

// TestRecvBatchNoPktInfo: without packet information To is the default.
func TestRecvBatchNoPktInfo(t *testing.T) {
	r := NewRecvBatch(1, true)
	r.SetFrom(0, make([]byte, 8))
	r.Msgs[0].Hdr.SetControllen(0)
	def := netip.MustParseAddr("192.0.2.1")
	if got := r.To(0, def); got != def {
		t.Errorf("got %v, want %v", got, def)
	}
}

// TestMmsgNone: no messages is no system call (a closed descriptor would
// fail it).
func TestMmsgNone(t *testing.T) {
	if n, err := Mmsg(unix.SYS_RECVMMSG, -1, nil, 0); n != 0 || err != nil {
		t.Errorf("got %d, %v; want 0, nil", n, err)
	}
	if _, err := Mmsg(unix.SYS_RECVMMSG, -1, make([]unix.Mmsghdr, 1), 0); err != unix.EBADF {
		t.Errorf("one message on descriptor -1: got %v, want EBADF", err)
	}
}

// TestRecvBatchAllocs: setting a batch, reading it and its addresses
// allocate nothing.
func TestRecvBatchAllocs(t *testing.T) {
	fd, _, _ := udpPair(t, netip.MustParseAddr("127.0.0.1"))
	r := NewRecvBatch(4, true)
	buf := make([]byte, 64)
	allocs := testing.AllocsPerRun(100, func() {
		for i := range r.Msgs {
			r.SetFrom(i, buf)
		}
		Mmsg(unix.SYS_RECVMMSG, fd, r.Msgs, unix.MSG_DONTWAIT)
		_, _ = r.From(0), r.To(0, netip.Addr{})
		r.Set(0, buf)
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per batch, want 0", allocs)
	}
}
