package fwd

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/gopasta/gopasta/internal/header"
)

var testNSMAC = []byte{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}

// respParams is a namespace set up the way pasta would: documentation
// addresses, a gateway on the link, DNS and search domains for both
// families.
func respParams() *NetParams {
	return &NetParams{
		OurMAC: ourMAC, MTU: 1500,
		Addr4: netip.MustParseAddr("192.0.2.10"), Prefix4: 24, Gateway4: netip.MustParseAddr("192.0.2.1"),
		Addr6: netip.MustParseAddr("2001:db8:1:2::10"), Prefix6: 64, Gateway6: netip.MustParseAddr("fe80::1"),
		OurLL6:   netip.MustParseAddr("fe80::1"),
		DNS4:     []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("198.51.100.53")},
		DNS6:     []netip.Addr{netip.MustParseAddr("2001:db8::53")},
		Search:   []string{"example.com", "lab.example.org"},
		Hostname: "guest", FQDN: "guest.example.com",
	}
}

func arpRequest(op uint16, spa, tpa string) []byte {
	f := make([]byte, 60) // padded to the Ethernet minimum, as on a wire
	header.Ethernet(f).Encode(header.EthernetBroadcast[:], testNSMAC, header.EtherTypeARP)
	header.ARP(f[14:]).Encode(op, testNSMAC, netip.MustParseAddr(spa).AsSlice(), make([]byte, 6), netip.MustParseAddr(tpa).AsSlice())
	return f
}

func TestARPReply(t *testing.T) {
	p := respParams()
	tests := []struct {
		name     string
		frame    []byte
		wantSize int
	}{
		{"gateway", arpRequest(header.ARPRequest, "192.0.2.10", "192.0.2.1"), arpFrameLen},
		{"any other host", arpRequest(header.ARPRequest, "192.0.2.10", "203.0.113.9"), arpFrameLen},
		{"own address", arpRequest(header.ARPRequest, "192.0.2.1", "192.0.2.10"), 0},
		{"probe", arpRequest(header.ARPRequest, "0.0.0.0", "192.0.2.10"), 0},
		{"gratuitous", arpRequest(header.ARPRequest, "192.0.2.10", "192.0.2.10"), 0},
		{"reply", arpRequest(header.ARPReply, "192.0.2.10", "192.0.2.1"), 0},
		{"truncated", arpRequest(header.ARPRequest, "192.0.2.10", "192.0.2.1")[:40], 0},
	}
	for _, tt := range tests {
		out := bytes.Repeat([]byte{0xee}, 128)
		n := arpReply(p, nil, tt.frame, out)
		if n != tt.wantSize {
			t.Errorf("%s: reply length %d, want %d", tt.name, n, tt.wantSize)
			continue
		}
		if n == 0 {
			continue
		}
		eth := header.Ethernet(out[:n])
		req := header.ARP(tt.frame[14:])
		a := header.ARP(eth.Payload())
		switch {
		case !eth.IsValid() || eth.Type() != header.EtherTypeARP:
			t.Errorf("%s: ethertype %#x, want ARP", tt.name, eth.Type())
		case !bytes.Equal(eth.Dst(), testNSMAC) || !bytes.Equal(eth.Src(), ourMAC):
			t.Errorf("%s: ethernet dst %x src %x, want %x %x", tt.name, eth.Dst(), eth.Src(), testNSMAC, []byte(ourMAC))
		case !a.IsValid() || a.Op() != header.ARPReply:
			t.Errorf("%s: op %d, want reply", tt.name, a.Op())
		case !bytes.Equal(a.SenderMAC(), ourMAC) || a.SenderIP() != req.TargetIP():
			t.Errorf("%s: sender %x %v, want %x %v", tt.name, a.SenderMAC(), a.SenderIP(), []byte(ourMAC), req.TargetIP())
		case !bytes.Equal(a.TargetMAC(), testNSMAC) || a.TargetIP() != req.SenderIP():
			t.Errorf("%s: target %x %v, want %x %v", tt.name, a.TargetMAC(), a.TargetIP(), testNSMAC, req.SenderIP())
		}
	}
}

func FuzzARPReply(f *testing.F) {
	f.Add(arpRequest(header.ARPRequest, "192.0.2.10", "192.0.2.1"))
	p := respParams()
	out := make([]byte, 1514)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if n := arpReply(p, nil, frame, out); n != 0 && n != arpFrameLen {
			t.Fatalf("reply length %d", n)
		}
	})
}

func BenchmarkARPReply(b *testing.B) {
	p, fr, out := respParams(), arpRequest(header.ARPRequest, "192.0.2.10", "192.0.2.1"), make([]byte, 1514)
	b.ReportAllocs()
	for b.Loop() {
		if arpReply(p, nil, fr, out) == 0 {
			b.Fatal("no reply")
		}
	}
}
