package fwd

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
)

// TestHandshakeRTO: the kernel's SYN schedule: 1 s for the first
// transmission and the linear retransmissions, then doubling, capped.
func TestHandshakeRTO(t *testing.T) {
	max := int64(120 * time.Second)
	for _, tc := range []struct {
		k, linear int
		rtoMax    int64
		want      time.Duration
	}{
		{0, 0, max, time.Second},
		{1, 0, max, 2 * time.Second},
		{5, 0, max, 32 * time.Second},
		{7, 0, max, 120 * time.Second},
		{0, 4, max, time.Second},
		{4, 4, max, time.Second},
		{5, 4, max, 2 * time.Second},
		{10, 4, max, 64 * time.Second},
		{200, 4, max, 120 * time.Second},
		{3, 0, int64(time.Second), time.Second},
		{3, 0, int64(5 * time.Second), 5 * time.Second},
	} {
		if got := time.Duration(handshakeRTO(tc.k, tc.linear, tc.rtoMax)); got != tc.want {
			t.Errorf("handshakeRTO(%d, %d, %v): got %v, want %v", tc.k, tc.linear, time.Duration(tc.rtoMax), got, tc.want)
		}
	}
}

// TestTimeoutsClamp: settings come within the kernel's bounds, and a UDP
// timeout the host does not have takes its default.
func TestTimeoutsClamp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in, out Timeouts
	}{
		{"defaults", DefaultTimeouts(), DefaultTimeouts()},
		{"zero", Timeouts{}, Timeouts{SynRetries: 1, RTOMax: time.Second, UDP: 30 * time.Second, UDPStream: 120 * time.Second}},
		{"too large", Timeouts{SynRetries: 1000, SynLinear: 1000, SynAckRetries: 1000, RTOMax: time.Hour, UDP: time.Hour, UDPStream: time.Hour},
			Timeouts{SynRetries: 127, SynLinear: 127, SynAckRetries: 255, RTOMax: 120 * time.Second, UDP: time.Hour, UDPStream: time.Hour}},
		{"negative", Timeouts{SynRetries: -1, SynLinear: -1, SynAckRetries: -1, RTOMax: -1, UDP: -1, UDPStream: -1},
			Timeouts{SynRetries: 1, RTOMax: time.Second, UDP: 30 * time.Second, UDPStream: 120 * time.Second}},
	} {
		if got := tc.in.clamp(); got != tc.out {
			t.Errorf("%s: clamp(%+v): got %+v, want %+v", tc.name, tc.in, got, tc.out)
		}
	}
}

// hostTimeouts are timeouts with the given handshake counts and bound.
func hostTimeouts(syn, linear, synAck int, rtoMax time.Duration) *Timeouts {
	to := DefaultTimeouts()
	to.SynRetries, to.SynLinear, to.SynAckRetries, to.RTOMax = syn, linear, synAck, rtoMax
	return &to
}

// expectAt advances the fake clock to just before at (since start) and
// checks that no segment matching keep came, then to at, and returns the
// one that must come then.
func (h *tcpHarness) expectAt(start time.Time, at time.Duration, what string, keep func(*tcpSeg) bool) tcpSeg {
	h.t.Helper()
	h.seg = nil
	h.now = start.Add(at - 50*time.Millisecond)
	h.cycle(0)
	for _, s := range h.seg {
		if keep(&s) {
			h.t.Fatalf("%s: got %v %v early, want it at %v", what, s, h.now.Sub(start), at)
		}
	}
	h.seg = nil
	h.now = start.Add(at)
	h.cycle(0)
	for _, s := range h.seg {
		if keep(&s) {
			return s
		}
	}
	h.t.Fatalf("%s: got none at %v, want one", what, at)
	return tcpSeg{}
}

// TestTCPSynRetriesFromHost: our SYN toward the namespace is sent again
// as the host's tcp_syn_retries and tcp_syn_linear_timeouts say (1 s apart
// for the linear ones, then doubling), and after the last goes unanswered
// as long again the host's peer gets a reset.
func TestTCPSynRetriesFromHost(t *testing.T) {
	for _, tc := range []struct {
		name        string
		syn, linear int
		rtoMax      time.Duration
		resends     []time.Duration // since the first SYN
		reset       time.Duration
	}{
		{"one retry", 1, 0, 120 * time.Second, []time.Duration{time.Second}, 3 * time.Second},
		{"linear then doubling", 2, 1, 120 * time.Second, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, 8 * time.Second},
		{"capped by rto_max", 3, 0, 2 * time.Second, []time.Duration{time.Second, 3 * time.Second, 5 * time.Second}, 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTCPHarness(t, testParams(), Options{Timeouts: hostTimeouts(tc.syn, tc.linear, 5, tc.rtoMax)})
			fd, peer, _ := hostPair(t, "127.0.0.1:0")
			if err := h.e.tcpFromHost(fd, netip.AddrPortFrom(gw4, 33335), netip.AddrPortFrom(ns4, 8082)); err != nil {
				t.Fatal(err)
			}
			start := h.now
			h.cycle(0)
			c := h.nsConn(ns4, gw4, 8082, 33335)
			first := h.take("SYN", c.mine)
			isSyn := func(s *tcpSeg) bool { return c.mine(s) && s.flags == header.TCPFlagSYN }
			for i, at := range tc.resends {
				s := h.expectAt(start, at, "SYN again", isSyn)
				if s.seq != first.seq {
					t.Errorf("retransmission %d: got seq %d, want the first SYN's %d", i+1, s.seq, first.seq)
				}
			}
			rst := h.expectAt(start, tc.reset, "reset", func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagRST) })
			_ = rst
			if n := h.e.FlowCount(); n != 0 {
				t.Errorf("flows after the handshake timed out: got %d, want 0", n)
			}
			peer.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, unix.ECONNRESET) {
				t.Errorf("host peer read: got %v, want ECONNRESET", err)
			}
		})
	}
}

// TestTCPSynAckRetries: our SYN-ACK is sent again as the host's
// tcp_synack_retries says, 1 s after it and doubling; then the namespace
// gets a reset and the host connection goes.
func TestTCPSynAckRetries(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{Timeouts: hostTimeouts(6, 4, 2, 120*time.Second)})
	srv := listenTCP(t, "127.0.0.1:0")
	c := h.nsConn(ns4, gw4, 40090, srv.port)
	c.syn(1460, 7)
	first := h.take("SYN-ACK", c.mine)
	start := h.now
	isSynAck := func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagSYN|header.TCPFlagACK) }
	for _, at := range []time.Duration{time.Second, 3 * time.Second} {
		if s := h.expectAt(start, at, "SYN-ACK again", isSynAck); s.seq != first.seq {
			t.Errorf("SYN-ACK again: got seq %d, want %d", s.seq, first.seq)
		}
	}
	h.expectAt(start, 7*time.Second, "reset", func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagRST) })
	if n := h.e.FlowCount(); n != 0 {
		t.Errorf("flows after the handshake timed out: got %d, want 0", n)
	}
}

// TestTCPRTOMax: data retransmissions toward a namespace that stopped
// acknowledging double from 200 ms up to the host's tcp_rto_max_ms, and
// the connection is reset after tcpMaxRetries of them.
func TestTCPRTOMax(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{Timeouts: hostTimeouts(6, 4, 5, time.Second)})
	c, hc := established(t, h, tcpFamilies[0], 40091, 1460, 7)
	if _, err := hc.Write([]byte("unacknowledged")); err != nil {
		t.Fatal(err)
	}
	data := h.take("data", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
	start := h.now
	isData := func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 }
	at := time.Duration(0)
	rto := 200 * time.Millisecond
	for i := range tcpMaxRetries {
		at += rto
		if s := h.expectAt(start, at, "retransmission", isData); s.seq != data.seq {
			t.Fatalf("retransmission %d: got seq %d, want %d", i+1, s.seq, data.seq)
		}
		rto = min(2*rto, time.Second)
	}
	h.expectAt(start, at+rto, "reset", func(s *tcpSeg) bool { return c.mine(s) && s.has(header.TCPFlagRST) })
	hc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := hc.Read(make([]byte, 1)); !errors.Is(err, unix.ECONNRESET) {
		t.Errorf("host peer read: got %v, want ECONNRESET", err)
	}
}

// TestUDPTimeoutsFromHost: UDP flows live as long as the host's conntrack
// timeouts say, the shorter one until the flow is a stream.
func TestUDPTimeoutsFromHost(t *testing.T) {
	to := DefaultTimeouts()
	to.UDP, to.UDPStream = 3*time.Second, 7*time.Second
	d := newDriven(t, Options{Timeouts: &to})
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("q")))
	d.hostAnswers()
	d.advance(2 * time.Second)
	if got := d.e.FlowCount(); got != 1 {
		t.Fatalf("answered query after 2 s: got %d flows, want 1", got)
	}
	d.advance(2 * time.Second)
	if got := d.e.FlowCount(); got != 0 {
		t.Fatalf("answered query after 4 s: got %d flows, want 0 (udp timeout 3 s)", got)
	}
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("q")))
	d.hostAnswers()
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("q")))
	d.advance(6 * time.Second)
	if got := d.e.FlowCount(); got != 1 {
		t.Fatalf("stream after 6 s: got %d flows, want 1 (stream timeout 7 s)", got)
	}
	d.advance(2 * time.Second)
	if got := d.e.FlowCount(); got != 0 {
		t.Fatalf("stream after 8 s: got %d flows, want 0", got)
	}
}
