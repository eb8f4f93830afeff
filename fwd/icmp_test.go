package fwd

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/header"
)

// allowPing lets every group open ping sockets in the test's own network
// namespace (the sysctl is per namespace), or skips when that is not
// possible and the current setting forbids our group.
func (h *hostNS) allowPing() {
	t := h.t
	if h.isNew {
		var err error
		h.do(func() {
			err = os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0)
		})
		if err == nil {
			return
		}
		t.Logf("cannot widen ping_group_range in the test namespace: %v", err)
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ping_group_range")
	var lo, hi int
	if err == nil {
		fmt.Sscan(string(b), &lo, &hi)
	}
	gid := os.Getgid()
	if err != nil || gid < lo || gid > hi {
		t.Skipf("ping sockets not permitted for gid %d (ping_group_range %q)", gid, bytes.TrimSpace(b))
	}
}

// TestICMPEcho pings the gateway, which maps to host loopback, through a
// ping socket and checks the reply keeps the namespace's identifier.
func TestICMPEcho(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ns, gw netip.Addr
	}{
		{"ipv4", netip.MustParseAddr("10.0.2.100"), netip.MustParseAddr("10.0.2.2")},
		{"ipv6", netip.MustParseAddr("fd00::100"), netip.MustParseAddr("fe80::1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostNS(t)
			h.allowPing()
			e, l := newTestEngine(t, Options{})
			h.start(e)
			const id = 0x4242
			for seq := uint16(1); seq <= 3; seq++ {
				data := []byte(fmt.Sprintf("ping %d", seq))
				l.inject(echoFrame(tc.ns, tc.gw, id, seq, data))
				p := parseOut(t, l.next(t, 5*time.Second, nil))
				if p.src != tc.gw || p.dst != tc.ns {
					t.Errorf("reply %v -> %v, want %v -> %v", p.src, p.dst, tc.gw, tc.ns)
				}
				ic := header.ICMPv4(p.l4) // same layout for ICMPv6
				wantType := header.ICMPv4EchoReply
				if tc.ns.Is6() {
					wantType = header.ICMPv6EchoReply
				}
				if ic.Type() != wantType || ic.Ident() != id || ic.Seq() != seq {
					t.Errorf("reply type %d id %#x seq %d, want %d %#x %d", ic.Type(), ic.Ident(), ic.Seq(), wantType, id, seq)
				}
				if !bytes.Equal(ic.Payload(), data) {
					t.Errorf("payload %q, want %q", ic.Payload(), data)
				}
			}
			if got := e.Stats().FlowsICMP; got != 1 {
				t.Errorf("ICMP flows = %d, want 1", got)
			}
		})
	}
}

// TestICMPFullReadBatchOneFlow: a whole link read of one echo flow's
// requests (rxBatch, and one more for the next read) goes out in one call
// of frames, whose message arrays must hold that many; every request gets
// its reply.
func TestICMPFullReadBatchOneFlow(t *testing.T) {
	h := newHostNS(t)
	h.allowPing()
	e, l := newTestEngine(t, Options{})
	h.start(e)
	ns, gw := netip.MustParseAddr("10.0.2.100"), netip.MustParseAddr("10.0.2.2")
	const id, n = 0x4343, rxBatch + 1
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = echoFrame(ns, gw, id, uint16(i+1), []byte("full batch"))
	}
	l.inject(frames...)
	seen := map[uint16]bool{}
	for range n {
		ic := header.ICMPv4(parseOut(t, l.next(t, 5*time.Second, nil)).l4)
		if ic.Type() != header.ICMPv4EchoReply || ic.Ident() != id || ic.Seq() < 1 || ic.Seq() > n || seen[ic.Seq()] {
			t.Fatalf("reply type %d id %#x seq %d, want each of seq 1-%d once (type %d, id %#x)",
				ic.Type(), ic.Ident(), ic.Seq(), n, header.ICMPv4EchoReply, id)
		}
		seen[ic.Seq()] = true
	}
	if got := e.Stats().FlowsICMP; got != 1 {
		t.Errorf("ICMP flows = %d, want 1", got)
	}
}

// TestUDPPortUnreachable sends to a closed port: the host's ICMP error must
// come back to the namespace as an ICMP error from the destination,
// quoting the datagram as the namespace sent it.
func TestUDPPortUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ns, gw       netip.Addr
		proto, typ   uint8
		code         uint8
		quotedIPSize int
	}{
		{"ipv4", netip.MustParseAddr("10.0.2.100"), netip.MustParseAddr("10.0.2.2"),
			header.ProtocolICMPv4, header.ICMPv4DstUnreachable, header.ICMPv4PortUnreachable, 20},
		{"ipv6", netip.MustParseAddr("fd00::100"), netip.MustParseAddr("fe80::1"),
			header.ProtocolICMPv6, header.ICMPv6DstUnreachable, header.ICMPv6PortUnreachable, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostNS(t)
			if !h.isNew {
				t.Skip("needs a private network namespace for a port known to be closed")
			}
			e, l := newTestEngine(t, Options{})
			h.start(e)
			const closed = 9 // discard: nothing listens in a new namespace
			l.inject(udpFrame(tc.ns, tc.gw, 40000, closed, []byte("anyone?")))
			p := parseOut(t, l.next(t, 5*time.Second, nil))
			if p.proto != tc.proto || p.src != tc.gw || p.dst != tc.ns {
				t.Fatalf("got proto %d %v -> %v, want %d %v -> %v", p.proto, p.src, p.dst, tc.proto, tc.gw, tc.ns)
			}
			ic := header.ICMPv4(p.l4)
			if ic.Type() != tc.typ || ic.Code() != tc.code {
				t.Errorf("ICMP type/code %d/%d, want %d/%d", ic.Type(), ic.Code(), tc.typ, tc.code)
			}
			q := ic.Payload()
			if len(q) < tc.quotedIPSize+8 {
				t.Fatalf("quote %d bytes, too short", len(q))
			}
			u := header.UDP(q[tc.quotedIPSize:])
			if u.SrcPort() != 40000 || u.DstPort() != closed {
				t.Errorf("quoted ports %d -> %d, want 40000 -> %d", u.SrcPort(), u.DstPort(), closed)
			}
			if !bytes.Equal(q[tc.quotedIPSize+8:], []byte("anyone?")) {
				t.Errorf("quoted payload %q", q[tc.quotedIPSize+8:])
			}
		})
	}
}
