package dnstest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	testA    = netip.MustParseAddr("198.51.100.7")
	testAAAA = netip.MustParseAddr("2001:db8:53::7")
)

func newServer() *Server {
	return &Server{Name: "gopasta.test", A: testA, AAAA: testAAAA}
}

func TestAnswer(t *testing.T) {
	tests := []struct {
		name      string
		qname     string
		qtype     uint16
		wantRCode int
		want      []netip.Addr
	}{
		{"A", "gopasta.test", TypeA, RCodeOK, []netip.Addr{testA}},
		{"AAAA", "gopasta.test", TypeAAAA, RCodeOK, []netip.Addr{testAAAA}},
		{"case and dot", "GoPasta.Test.", TypeA, RCodeOK, []netip.Addr{testA}},
		{"other type", "gopasta.test", 16, RCodeOK, nil},
		{"other name", "example.test", TypeA, RCodeNXDomain, nil},
	}
	s := newServer()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.Answer(NewQuery(0x1234, tc.qname, tc.qtype))
			r, err := ParseResponse(resp)
			if err != nil {
				t.Fatalf("ParseResponse: got %v, want nil", err)
			}
			if r.ID != 0x1234 || r.RCode != tc.wantRCode || !slices.Equal(r.Addrs, tc.want) {
				t.Errorf("response: got id %#x rcode %d addrs %v, want id 0x1234 rcode %d addrs %v",
					r.ID, r.RCode, r.Addrs, tc.wantRCode, tc.want)
			}
		})
	}
}

func TestAnswerBadInput(t *testing.T) {
	s := newServer()
	tests := []struct {
		name      string
		msg       []byte
		wantNil   bool
		wantRCode int
	}{
		{"short", []byte{1, 2, 3}, true, 0},
		{"response", func() []byte { b := NewQuery(1, "x", TypeA); b[2] |= 0x80; return b }(), true, 0},
		{"truncated question", NewQuery(1, "gopasta.test", TypeA)[:20], false, RCodeFormErr},
		{"two questions", func() []byte { b := NewQuery(1, "x", TypeA); b[5] = 2; return b }(), false, RCodeFormErr},
		{"opcode status", func() []byte { b := NewQuery(1, "gopasta.test", TypeA); b[2] |= 2 << 3; return b }(), false, RCodeNotImp},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.Answer(tc.msg)
			if tc.wantNil {
				if resp != nil {
					t.Errorf("Answer: got %x, want nil", resp)
				}
				return
			}
			r, err := ParseResponse(resp)
			if err != nil || r.RCode != tc.wantRCode {
				t.Errorf("Answer: got rcode %d (err %v), want %d", r.RCode, err, tc.wantRCode)
			}
		})
	}
}

func TestParseQueryErrors(t *testing.T) {
	for _, msg := range [][]byte{nil, make([]byte, 11), NewQuery(1, "a.b", TypeA)[:14]} {
		if _, err := ParseQuery(msg); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseQuery(%x): got %v, want ErrMalformed", msg, err)
		}
	}
}

// TestServeUDPAndTCP runs the server on loopback and queries it both ways.
func TestServeUDPAndTCP(t *testing.T) {
	s := newServer()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ServeUDP(pc)
	s.ServeTCP(l)
	t.Cleanup(func() { s.Close() })

	u, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := u.Write(NewQuery(7, "gopasta.test", TypeA)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := u.Read(buf)
	if err != nil {
		t.Fatalf("UDP read: %v", err)
	}
	if r, err := ParseResponse(buf[:n]); err != nil || !slices.Equal(r.Addrs, []netip.Addr{testA}) {
		t.Errorf("UDP answer: got %+v (%v), want %v", r, err, testA)
	}

	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	for i := 0; i < 2; i++ { // two messages on one connection
		q := NewQuery(uint16(8+i), "gopasta.test", TypeAAAA)
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
			t.Fatal(err)
		}
		var hdr [2]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			t.Fatalf("TCP read: %v", err)
		}
		resp := make([]byte, binary.BigEndian.Uint16(hdr[:]))
		if _, err := io.ReadFull(c, resp); err != nil {
			t.Fatal(err)
		}
		if r, err := ParseResponse(resp); err != nil || r.ID != uint16(8+i) || !slices.Equal(r.Addrs, []netip.Addr{testAAAA}) {
			t.Errorf("TCP answer %d: got %+v (%v), want id %d and %v", i, r, err, 8+i, testAAAA)
		}
	}
	if got := s.QueriesUDP(); got != 1 {
		t.Errorf("QueriesUDP: got %d, want 1", got)
	}
	if got := s.QueriesTCP(); got != 2 {
		t.Errorf("QueriesTCP: got %d, want 2", got)
	}
}

func FuzzParseQuery(f *testing.F) {
	f.Add(NewQuery(1, "gopasta.test", TypeA))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		q, err := ParseQuery(msg)
		if err != nil {
			return
		}
		// A parsed query, rebuilt, parses to the same question (labels
		// holding dots or nothing do not survive the dotted form).
		if strings.Contains(q.Name, "..") || strings.HasPrefix(q.Name, ".") || strings.HasSuffix(q.Name, ".") {
			return
		}
		if len(appendName(nil, q.Name)) != len(q.Name)+2 && q.Name != "" {
			return
		}
		q2, err := ParseQuery(NewQuery(q.ID, q.Name, q.Type))
		if err != nil || q2.Type != q.Type || q2.ID != q.ID || q2.Name != q.Name {
			t.Errorf("round trip: got %+v (%v), want %+v", q2, err, q)
		}
	})
}

func FuzzParseResponse(f *testing.F) {
	f.Add(newServer().Answer(NewQuery(1, "gopasta.test", TypeA)))
	f.Add([]byte{0, 1, 0x80, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0xc0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		_, _ = ParseResponse(msg)
	})
}

// FuzzAnswer: whatever arrives, the server answers with a well-formed
// response or nothing.
func FuzzAnswer(f *testing.F) {
	f.Add(NewQuery(1, "gopasta.test", TypeAAAA))
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff})
	s := newServer()
	f.Fuzz(func(t *testing.T, msg []byte) {
		resp := s.Answer(msg)
		if resp == nil {
			return
		}
		if _, err := ParseResponse(resp); err != nil {
			t.Errorf("Answer(%x) = %x: ParseResponse: %v", msg, resp, err)
		}
	})
}
