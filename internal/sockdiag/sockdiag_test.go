package sockdiag

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

func collect(t *testing.T, c *Conn, proto, state uint8) map[uint16]bool {
	t.Helper()
	got := map[uint16]bool{}
	if err := c.Ports(proto, state, func(p uint16) { got[p] = true }); err != nil {
		if errors.Is(err, ErrNotSupported) {
			t.Skipf("inet_diag not available: %v", err)
		}
		t.Fatalf("Ports(%d, %d): %v", proto, state, err)
	}
	return got
}

func port(a net.Addr) uint16 {
	switch a := a.(type) {
	case *net.TCPAddr:
		return uint16(a.Port)
	case *net.UDPAddr:
		return uint16(a.Port)
	}
	return 0
}

// Against the kernel: listeners and bound UDP sockets of both families are
// reported, a connected TCP client is not a listener.
func TestPorts(t *testing.T) {
	c, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l4.Close()
	want := []uint16{port(l4.Addr())}
	if l6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		defer l6.Close()
		want = append(want, port(l6.Addr()))
	}
	u4, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer u4.Close()
	client, err := net.Dial("tcp4", l4.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	tcp := collect(t, c, unix.IPPROTO_TCP, StateListen)
	for _, p := range want {
		if !tcp[p] {
			t.Errorf("listening port %d not reported (got %d ports)", p, len(tcp))
		}
	}
	if cp := port(client.LocalAddr()); tcp[cp] {
		t.Errorf("connected client port %d reported as listening", cp)
	}
	udp := collect(t, c, unix.IPPROTO_UDP, StateClose)
	if p := port(u4.LocalAddr()); !udp[p] {
		t.Errorf("bound UDP port %d not reported (got %d ports)", p, len(udp))
	}
	// The socket is reusable: a second round gives the same answer.
	if again := collect(t, c, unix.IPPROTO_TCP, StateListen); len(again) != len(tcp) {
		t.Errorf("second dump: %d ports, first %d", len(again), len(tcp))
	}
	c.Close()
	if err := c.Ports(unix.IPPROTO_TCP, StateListen, func(uint16) {}); !errors.Is(err, unix.EBADF) {
		t.Errorf("Ports after Close: got %v, want EBADF", err)
	}
}

// nlmsg builds one netlink message (header and body), 4-byte padded.
func nlmsg(typ uint16, seq uint32, body []byte) []byte {
	b := make([]byte, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint32(b[8:], seq)
	copy(b[nlmsgHdrLen:], body)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func diagMsg(state uint8, sport uint16) []byte {
	m := make([]byte, msgLen)
	m[0], m[msgStateOff] = unix.AF_INET, state
	binary.BigEndian.PutUint16(m[msgSportOff:], sport)
	return m
}

func errMsg(errno unix.Errno) []byte {
	b := make([]byte, 4+nlmsgHdrLen)
	binary.NativeEndian.PutUint32(b, uint32(-int32(errno)))
	return b
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestParseDump(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []byte
		ports   []uint16
		done    bool
		wantErr error // nil: no error; errAny: some error
	}{
		{"two sockets then done", cat(nlmsg(20, 7, diagMsg(StateListen, 80)), nlmsg(20, 7, diagMsg(StateListen, 443)), nlmsg(nlmsgDone, 7, make([]byte, 4))), []uint16{80, 443}, true, nil},
		{"other state skipped", nlmsg(20, 7, diagMsg(1, 22)), nil, false, nil},
		{"stale sequence skipped", cat(nlmsg(20, 6, diagMsg(StateListen, 1)), nlmsg(nlmsgDone, 6, nil)), nil, false, nil},
		{"more to come", nlmsg(20, 7, diagMsg(StateListen, 53)), []uint16{53}, false, nil},
		{"ENOENT is not supported", nlmsg(nlmsgError, 7, errMsg(unix.ENOENT)), nil, false, ErrNotSupported},
		{"EPERM", nlmsg(nlmsgError, 7, errMsg(unix.EPERM)), nil, false, unix.EPERM},
		{"ack", nlmsg(nlmsgError, 7, errMsg(0)), nil, false, nil},
		{"short header", []byte{1, 2, 3}, nil, false, errAny},
		{"length beyond data", func() []byte {
			b := nlmsg(20, 7, diagMsg(StateListen, 1))
			binary.NativeEndian.PutUint32(b, 500)
			return b
		}(), nil, false, errAny},
		{"length below header", func() []byte { b := nlmsg(20, 7, nil); binary.NativeEndian.PutUint32(b, 8); return b }(), nil, false, errAny},
		{"short inet_diag_msg", nlmsg(20, 7, make([]byte, 10)), nil, false, errAny},
		{"short error", nlmsg(nlmsgError, 7, []byte{1}), nil, false, errAny},
	} {
		var got []uint16
		done, err := ParseDump(tc.in, 7, StateListen, func(p uint16) { got = append(got, p) })
		switch {
		case tc.wantErr == nil && err != nil:
			t.Errorf("%s: got error %v, want none", tc.name, err)
		case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
			t.Errorf("%s: got error %v, want %v", tc.name, err, tc.wantErr)
		}
		if done != tc.done || len(got) != len(tc.ports) {
			t.Errorf("%s: got done=%v ports %v, want done=%v ports %v", tc.name, done, got, tc.done, tc.ports)
			continue
		}
		for i := range got {
			if got[i] != tc.ports[i] {
				t.Errorf("%s: got ports %v, want %v", tc.name, got, tc.ports)
			}
		}
	}
}

var errAny = errors.New("any error")

func FuzzParseDump(f *testing.F) {
	f.Add(cat(nlmsg(20, 7, diagMsg(StateListen, 80)), nlmsg(nlmsgDone, 7, nil)))
	f.Add(nlmsg(nlmsgError, 7, errMsg(unix.ENOENT)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		ParseDump(b, 7, StateListen, func(uint16) { n++ })
		if n > len(b)/(nlmsgHdrLen+msgLen) {
			t.Errorf("%d ports from %d bytes", n, len(b))
		}
	})
}
