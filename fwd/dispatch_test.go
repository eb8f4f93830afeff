package fwd

import (
	"bytes"
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"

	"testing"
	"time"
)

// FuzzEngineFrame feeds arbitrary frames to the frame-handling entry point
// with the host side faked: it must never panic, never hold more flows than
// the table's capacity, and never leak a host socket once flows expire.
func FuzzEngineFrame(f *testing.F) {
	f.Add(udpFrame(ns4, gw4, 1000, 53, []byte("query")))
	f.Add(udpFrame(ns6, gw6, 1000, 53, []byte("query")))
	f.Add(echoFrame(ns4, gw4, 1, 1, []byte("ping")))
	f.Add(echoFrame(ns6, gw6, 1, 1, []byte("ping")))
	f.Add(udpFrame(ns4, ext, 68, 67, make([]byte, 300)))
	f.Add(udpFrame(ns6, gw6, 546, 547, make([]byte, 60)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06})
	f.Add(arpRequest(header.ARPRequest, "10.0.2.100", "10.0.2.7"))
	f.Add(icmp6Frame("fd00::100", "ff02::1:ff00:7", 255, nsMessage("fd00::7", true)))
	// One engine for every input of a worker: New preallocates its
	// buffers, which would dominate each run. A small MTU keeps them small.
	// Its mirror of the host's neighbour table holds a neighbour of each
	// family, whose MAC addresses answers and frames carry.
	p := testParams()
	p.MTU = 1500
	src := newFakeNeighbours(f)
	d := newDrivenParams(f, p, Options{FlowCapacity: 8, Neighbours: src})
	src.push(dumpBegin, set("10.0.2.7", lanMAC), set("fd00::7", lanMAC2), set("192.0.2.7", lanMAC), dumpEnd)
	d.e.readNeighbours()
	f.Fuzz(func(t *testing.T, b []byte) { fuzzFrameOnce(t, d, b) })
}

// fuzzFrameOnce feeds b alone, then in a batch with pieces of itself (so
// grouping and several flows per batch are hit), and checks the table's
// bounds and that every flow and host socket goes once they all time out.
func fuzzFrameOnce(t *testing.T, d *driven, b []byte) {
	d.cycle(b)
	d.cycle(b, b[:len(b)/2], b)
	if n := d.e.FlowCount(); n > 8 {
		t.Fatalf("FlowCount %d above capacity 8", n)
	}
	d.advance(200 * time.Second)
	if n := d.e.FlowCount(); n != 0 {
		t.Fatalf("FlowCount %d after every timeout, want 0", n)
	}
	if len(d.sys.open) != 0 {
		t.Fatalf("%d host sockets leaked", len(d.sys.open))
	}
}

// FuzzEngineFrameVnet is FuzzEngineFrame with a virtio-net header on the
// link, whose fields come from the input too: partial-checksum offsets,
// GSO types and sizes from a hostile namespace must be survived as well.
func FuzzEngineFrameVnet(f *testing.F) {
	vnet := func(flags, gso uint8, start, off uint16, fr []byte) []byte {
		h := make([]byte, header.VirtioNetHdrSize)
		header.VirtioNetHdr(h).Encode(&header.VirtioNetHdrFields{Flags: flags, GSOType: gso,
			CsumStart: start, CsumOffset: off, GSOSize: 1400})
		return append(h, fr...)
	}
	f.Add(vnet(0, 0, 0, 0, udpFrame(ns4, gw4, 1000, 53, []byte("query"))))
	f.Add(vnet(header.VirtioNetHdrFNeedsCsum, 0, 34, 6, udpFrame(ns4, ext, 68, 67, make([]byte, 300))))
	f.Add(vnet(header.VirtioNetHdrFNeedsCsum, 0, 54, 6, udpFrame(ns6, gw6, 546, 547, make([]byte, 60))))
	f.Add(vnet(header.VirtioNetHdrFNeedsCsum, header.VirtioNetHdrGSOTCPv4, 34, 16, echoFrame(ns4, gw4, 1, 1, []byte("ping"))))
	f.Add(vnet(header.VirtioNetHdrFNeedsCsum, 0, 0xffff, 0xffff, udpFrame(ns6, gw6, 546, 547, make([]byte, 60))))
	f.Add([]byte{1, 2, 3})
	p := testParams()
	p.MTU = 1500
	d := newDrivenParams(f, p, Options{FlowCapacity: 8, VnetHdr: true})
	f.Fuzz(func(t *testing.T, b []byte) { fuzzFrameOnce(t, d, b) })
}

// TestCompleteChecksum: a frame whose UDP checksum the namespace's kernel
// left partial (the pseudo-header sum in place, as with TUN_F_CSUM) comes
// out with the checksum a full computation gives; offsets pointing outside
// the frame change nothing.
func TestCompleteChecksum(t *testing.T) {
	for _, src := range []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("fe80::1")} {
		dst := netip.MustParseAddr("192.0.2.254")
		if src.Is6() {
			dst = netip.MustParseAddr("ff02::1:2")
		}
		want := udpFrame(src, dst, 546, 547, []byte("a datagram of odd length"))
		l4 := header.EthernetMinimumSize + header.IPv4MinimumSize
		if src.Is6() {
			l4 = header.EthernetMinimumSize + header.IPv6MinimumSize
		}
		partial := append([]byte(nil), want...)
		ud := header.UDP(partial[l4:])
		var ps uint16
		if src.Is6() {
			ip := header.IPv6(partial[header.EthernetMinimumSize:])
			ps = header.PseudoHeaderChecksum(header.ProtocolUDP, ip.SrcSlice(), ip.DstSlice(), uint32(len(ud)))
		} else {
			ip := header.IPv4(partial[header.EthernetMinimumSize:])
			ps = header.PseudoHeaderChecksum(header.ProtocolUDP, ip.SrcSlice(), ip.DstSlice(), uint32(len(ud)))
		}
		ud.SetChecksum(ps)
		completeChecksum(partial, l4, 6)
		if !bytes.Equal(partial, want) {
			t.Errorf("%v: completed checksum %#04x, want %#04x", src, header.UDP(partial[l4:]).Checksum(), header.UDP(want[l4:]).Checksum())
		}
		before := append([]byte(nil), partial...)
		completeChecksum(partial, len(partial), 6)
		completeChecksum(partial, 2, 6)
		completeChecksum(partial, l4, 1<<20)
		if !bytes.Equal(partial, before) {
			t.Errorf("%v: out-of-range offsets changed the frame", src)
		}
	}
}

// TestNamespaceMACFromDroppedFrames: a frame the engine drops as malformed
// must not change where frames toward the namespace go. Learning the
// namespace's MAC address from such a frame sent every frame after it to
// an address the namespace's interface does not have, whose kernel then
// discarded them all until the namespace happened to send a valid frame.
func TestNamespaceMACFromDroppedFrames(t *testing.T) {
	foreign := []byte{0x02, 0, 0x5e, 0x10, 0x20, 0x30}
	from := func(fr []byte) []byte {
		fr = bytes.Clone(fr)
		copy(fr[6:12], foreign)
		return fr
	}
	badIPSum := udpFrame(ns4, gw4, 1000, 53, []byte("q"))
	badIPSum[header.EthernetMinimumSize+10] ^= 0xff
	badUDPSum := udpFrame(ns4, gw4, 1000, 53, []byte("q"))
	badUDPSum[len(badUDPSum)-1] ^= 0xff
	badEcho := echoFrame(ns6, gw6, 1, 1, []byte("ping"))
	badEcho[len(badEcho)-1] ^= 0xff
	badARP := append(ethHdr(header.EtherTypeARP), make([]byte, header.ARPSize)...)
	tests := []struct {
		name    string
		frame   []byte
		learned bool // the frame is valid: the namespace changed its address
	}{
		{"unknown EtherType", append(ethHdr(0x88b5), make([]byte, 46)...), false},
		{"IPv4 cut short", udpFrame(ns4, gw4, 1000, 53, nil)[:header.EthernetMinimumSize+10], false},
		{"IPv4 header checksum", badIPSum, false},
		{"UDP checksum", badUDPSum, false},
		{"ICMPv6 checksum", badEcho, false},
		{"ARP hardware length 0", badARP, false},
		{"valid UDP", udpFrame(ns4, gw4, 1000, 53, []byte("q")), true},
		// Valid but of no use to the engine: still the namespace's.
		{"valid mDNS to multicast", udpFrame(ns6, netip.MustParseAddr("ff02::fb"), 5353, 5353, []byte("q")), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriven(t, Options{})
			d.cycle(udpFrame(ns4, gw4, 999, 53, []byte("hello")))
			if got := d.e.nsMAC[:]; !bytes.Equal(got, nsMAC) {
				t.Fatalf("after a valid frame: namespace MAC %x, want %x", got, []byte(nsMAC))
			}
			d.cycle(from(tc.frame))
			want := []byte(nsMAC)
			if tc.learned {
				want = foreign
			}
			if got := d.e.nsMAC[:]; !bytes.Equal(got, want) {
				t.Errorf("after a frame (%s) from %x: namespace MAC %x, want %x", tc.name, foreign, got, want)
			}
		})
	}
}
