package fwd

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
)

// keepaliveOpts reads a host socket's keepalive settings.
func keepaliveOpts(t *testing.T, fd int) (on bool, idle int) {
	t.Helper()
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
	if err != nil {
		t.Fatalf("SO_KEEPALIVE: %v", err)
	}
	idle, err = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	if err != nil {
		t.Fatalf("TCP_KEEPIDLE: %v", err)
	}
	return v != 0, idle
}

// TestTCPKeepaliveFromNS: a keepalive probe from the namespace (one
// sequence number behind, with no data or one byte) is answered and turns
// keepalives on for the host socket, with the idle time the namespace
// waited before it; a zero-window probe, which looks the same, does not.
func TestTCPKeepaliveFromNS(t *testing.T) {
	for _, tc := range []struct {
		name     string
		payload  []byte
		idle     time.Duration
		wndShut  bool
		wantOn   bool
		wantIdle int
	}{
		{"no data", nil, 45 * time.Second, false, true, 45},
		{"one byte", []byte{0}, 7 * time.Second, false, true, 7},
		{"under a second", nil, 300 * time.Millisecond, false, true, 1},
		{"zero-window probe", nil, 5 * time.Second, true, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTCPHarness(t, testParams(), Options{})
			c, _ := established(t, h, tcpFamilies[0], 40100, 1460, 7)
			fd := c.fd()
			on, defIdle := keepaliveOpts(t, fd)
			if on {
				t.Fatalf("SO_KEEPALIVE on before any probe")
			}
			if tc.wndShut {
				c.conn().flags |= tcpWndClosed
			}
			h.now = h.now.Add(tc.idle)
			h.seg = nil
			h.send(c.frame(header.TCPFlagACK, c.seq-1, c.ack, tc.payload))
			a := h.take("ACK of the probe", c.mine)
			if !a.has(header.TCPFlagACK) || a.ack != c.seq || len(a.payload) != 0 {
				t.Errorf("answer to the probe: got %v, want an ACK of %d", a, c.seq)
			}
			on, idle := keepaliveOpts(t, fd)
			if on != tc.wantOn {
				t.Fatalf("SO_KEEPALIVE: got %v, want %v", on, tc.wantOn)
			}
			if !tc.wantOn {
				tc.wantIdle = defIdle
			}
			if idle != tc.wantIdle {
				t.Errorf("TCP_KEEPIDLE: got %d, want %d", idle, tc.wantIdle)
			}
		})
	}
}

// TestTCPKeepaliveToNS: a connection the namespace has been silent on for
// tcpKeepaliveIdle gets a probe one sequence number behind; an answer puts
// the next one as far off again; data in flight holds probes back (the
// retransmission timer watches then); and a reset in answer, from a
// namespace that forgot the connection, resets the host's side.
func TestTCPKeepaliveToNS(t *testing.T) {
	h := newTCPHarness(t, testParams(), Options{})
	c, hc := established(t, h, tcpFamilies[0], 40101, 1460, 7)
	isProbe := func(s *tcpSeg) bool {
		return c.mine(s) && s.flags == header.TCPFlagACK && len(s.payload) == 0 && s.seq == c.ack-1
	}
	// due is when a probe is due after silence since engine time now.
	base := h.e.start
	due := func() time.Duration { return time.Duration(keepaliveAt(int64(h.now.Sub(base)))) }
	first := due()
	if d := first - h.now.Sub(base); d < time.Duration(tcpKeepaliveIdle) || d > time.Duration(tcpKeepaliveIdle)+time.Second {
		t.Fatalf("first probe due %v after the handshake, want 30-31 s", d)
	}
	p := h.expectAt(base, first, "keepalive probe", isProbe)
	if p.ack != c.seq {
		t.Errorf("probe: got ack %d, want %d", p.ack, c.seq)
	}
	// The namespace answers (a duplicate ACK): the next probe comes a
	// whole idle time after the answer.
	h.now = base.Add(first + 10*time.Second + 300*time.Millisecond)
	c.send(header.TCPFlagACK, nil)
	h.expectAt(base, due(), "second probe", isProbe)

	// Data in flight, unacknowledged: no probe, retransmissions instead.
	if _, err := hc.Write([]byte("in flight")); err != nil {
		t.Fatal(err)
	}
	h.take("data", func(s *tcpSeg) bool { return c.mine(s) && len(s.payload) > 0 })
	c.send(header.TCPFlagACK, nil) // activity, but not an ACK of the data
	h.seg = nil
	for range 20 {
		h.advance(5 * time.Second)
		if c.conn().state == 0 {
			break
		}
	}
	for _, s := range h.seg {
		if c.mine(&s) && s.flags == header.TCPFlagACK && len(s.payload) == 0 && s.seq == c.ack-1 {
			t.Errorf("keepalive probe %v with data in flight, want none", s)
		}
	}

	// A namespace that forgot the connection: its reset ends it.
	h2 := newTCPHarness(t, testParams(), Options{})
	c2, hc2 := established(t, h2, tcpFamilies[0], 40102, 1460, 7)
	probe := h2.expectAt(h2.e.start, time.Duration(keepaliveAt(int64(h2.now.Sub(h2.e.start)))), "keepalive probe", func(s *tcpSeg) bool {
		return c2.mine(s) && s.flags == header.TCPFlagACK && len(s.payload) == 0 && s.seq == c2.ack-1
	})
	h2.send(c2.frame(header.TCPFlagRST, probe.ack, 0, nil))
	if n := h2.e.FlowCount(); n != 0 {
		t.Errorf("flows after the namespace's reset: got %d, want 0", n)
	}
	hc2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := hc2.Read(make([]byte, 1)); !errors.Is(err, unix.ECONNRESET) {
		t.Errorf("host peer read: got %v, want ECONNRESET", err)
	}
}

// TestKeepaliveAt: a probe is due 30 s after the silence began, to the
// next whole second, so that probes of many connections share timer runs.
func TestKeepaliveAt(t *testing.T) {
	for _, now := range []time.Duration{0, time.Nanosecond, 999 * time.Millisecond, time.Second, 12345678901} {
		at := time.Duration(keepaliveAt(int64(now)))
		if at%time.Second != 0 || at-now < 30*time.Second || at-now >= 31*time.Second {
			t.Errorf("keepaliveAt(%v): got %v, want a whole second 30-31 s later", now, at)
		}
	}
}
