package fwd

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/header"
)

// TestUDPEcho sends datagrams from the "namespace" to the gateway address,
// which maps to host loopback, through a real host socket to a real echo
// server, and checks the reply frames: addresses and ports swapped back to
// what the namespace used, checksums valid, source port preserved.
func TestUDPEcho(t *testing.T) {
	for _, tc := range []struct {
		name, listen string
		ns, gw       netip.Addr
	}{
		{"ipv4", "127.0.0.1:0", netip.MustParseAddr("10.0.2.100"), netip.MustParseAddr("10.0.2.2")},
		{"ipv6", "[::1]:0", netip.MustParseAddr("fd00::100"), netip.MustParseAddr("fe80::1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostNS(t)
			port, seen := h.udpEcho(tc.listen)
			e, l := newTestEngine(t, Options{})
			h.start(e)
			const nsPort = 47113
			for i := range 3 {
				msg := []byte(fmt.Sprintf("hello %d", i))
				l.inject(udpFrame(tc.ns, tc.gw, nsPort, port, msg))
				p := parseOut(t, l.next(t, 5*time.Second, nil))
				if p.proto != header.ProtocolUDP {
					t.Fatalf("reply protocol %d, want UDP", p.proto)
				}
				if p.src != tc.gw || p.dst != tc.ns || p.sport != port || p.dport != nsPort {
					t.Errorf("reply %v:%d -> %v:%d, want %v:%d -> %v:%d",
						p.src, p.sport, p.dst, p.dport, tc.gw, port, tc.ns, nsPort)
				}
				if got := header.UDP(p.l4).Payload(); !bytes.Equal(got, msg) {
					t.Errorf("payload %q, want %q", got, msg)
				}
			}
			from := <-seen
			if h.isNew && from.Port() != nsPort {
				// In a fresh namespace the port is certainly free.
				t.Errorf("server saw source port %d, want %d (preserved)", from.Port(), nsPort)
			}
			if got := e.FlowCount(); got != 1 {
				t.Errorf("FlowCount = %d, want 1", got)
			}
		})
	}
}

// TestUDPBatchAndFlows sends several flows' datagrams in one batch, mixed
// with malformed frames, and checks every good datagram is answered and
// every bad one counted.
func TestUDPBatchAndFlows(t *testing.T) {
	h := newHostNS(t)
	port, _ := h.udpEcho("127.0.0.1:0")
	e, l := newTestEngine(t, Options{})
	h.start(e)
	ns, gw := netip.MustParseAddr("10.0.2.100"), netip.MustParseAddr("10.0.2.2")
	var frames [][]byte
	want := map[string]bool{}
	for i := range 8 {
		sp := uint16(40000 + i%4)
		msg := fmt.Sprintf("m%d", i)
		want[fmt.Sprintf("%d/%s", sp, msg)] = true
		frames = append(frames, udpFrame(ns, gw, sp, port, []byte(msg)))
		bad := udpFrame(ns, gw, sp, port, []byte("bad"))
		bad[len(bad)-1] ^= 0xff // breaks the UDP checksum
		frames = append(frames, bad)
	}
	trunc := udpFrame(ns, gw, 1, port, []byte("x"))
	frames = append(frames, trunc[:20], []byte{1, 2, 3})
	l.inject(frames...)
	for range 8 {
		p := parseOut(t, l.next(t, 5*time.Second, nil))
		k := fmt.Sprintf("%d/%s", p.dport, header.UDP(p.l4).Payload())
		if !want[k] {
			t.Errorf("unexpected reply %s", k)
		}
		delete(want, k)
	}
	st := e.Stats()
	if st.Drops[DropBadChecksum] != 8 {
		t.Errorf("bad-checksum drops = %d, want 8", st.Drops[DropBadChecksum])
	}
	if st.Drops[DropTruncated] != 2 {
		t.Errorf("truncated drops = %d, want 2", st.Drops[DropTruncated])
	}
	if got := e.FlowCount(); got != 4 {
		t.Errorf("FlowCount = %d, want 4", got)
	}
}
