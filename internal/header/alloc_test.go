package header

import (
	"net/netip"
	"testing"
)

// tcp4Frame is an Ethernet + IPv4 + TCP SYN frame with the usual options.
func tcp4Frame() []byte {
	f := make([]byte, 14+20+44)
	Ethernet(f).Encode([]byte{2, 0, 0, 0, 0, 1}, []byte{2, 0, 0, 0, 0, 2}, EtherTypeIPv4)
	ip := IPv4(f[14:])
	ip.Encode(&IPv4Fields{TotalLength: 64, TTL: 64, Protocol: ProtocolTCP,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")})
	tcp := TCP(f[34:])
	tcp.Encode(&TCPFields{SrcPort: 1, DstPort: 2, DataOffset: 44, Flags: TCPFlagSYN, Window: 1000})
	n := 20 + EncodeMSSOption(tcp[20:], 1460)
	n += EncodeSACKPermittedOption(tcp[n:])
	n += EncodeTSOption(tcp[n:], 1, 0)
	EncodeWSOption(tcp[n:], 7)
	tcp.SetChecksum(tcp.CalculateChecksum(PseudoHeaderChecksum(ProtocolTCP, ip.SrcSlice(), ip.DstSlice(), 44)))
	return f
}

// parseTCP4 is the parse path the engine runs for every TCP frame.
func parseTCP4(f []byte, o *TCPOptions) bool {
	e := Ethernet(f)
	if !e.IsValid() || e.Type() != EtherTypeIPv4 {
		return false
	}
	ip := IPv4(e.Payload())
	if !ip.IsValid(len(ip)) || !ip.IsChecksumValid() || ip.Protocol() != ProtocolTCP || ip.IsFragment() {
		return false
	}
	tcp := TCP(ip.Payload())
	if !tcp.IsValid() {
		return false
	}
	if Checksum(tcp, PseudoHeaderChecksum(ProtocolTCP, ip.SrcSlice(), ip.DstSlice(), uint32(len(tcp)))) != 0xffff {
		return false
	}
	_ = ip.Src()
	return ParseTCPOptions(tcp.Options(), o)
}

func TestParseAllocs(t *testing.T) {
	f := tcp4Frame()
	var o TCPOptions
	if !parseTCP4(f, &o) || o.MSS != 1460 {
		t.Fatalf("parse of test frame failed: %+v", o)
	}
	v6 := ipv6With(ProtocolHopByHop, [][]byte{{ProtocolTCP, 0, 1, 4, 0, 0, 0, 0}}, 20)
	nd := make([]byte, 64)
	n := EncodeNDPLinkAddrOption(nd, NDPOptionSourceLinkAddr, []byte{1, 2, 3, 4, 5, 6})
	n += EncodeNDPMTUOption(nd[n:], 1500)
	tests := []struct {
		name string
		fn   func()
	}{
		{"tcp4 parse", func() { parseTCP4(f, &o) }},
		{"ipv6 transport", func() { _, _ = v6.Transport() }},
		{"ndp options", func() {
			it := NDPOptionIter{Options: nd[:n]}
			for _, _, ok := it.Next(); ok; _, _, ok = it.Next() {
			}
		}},
		{"search list", func() {
			var b [64]byte
			sinkInt = EncodeDNSSearchList(b[:], search)
		}},
		{"checksum update", func() {
			a, b := []byte{1, 2, 3, 4}, []byte{5, 6, 7, 8}
			sink16 = ChecksumUpdate(0x1234, a, b)
		}},
	}
	for _, tt := range tests {
		if a := testing.AllocsPerRun(100, tt.fn); a != 0 {
			t.Errorf("%s: %v allocs per run, want 0", tt.name, a)
		}
	}
}

var (
	search  = []string{"example.com", "lab.example.org."}
	sinkInt int
)

func BenchmarkParseTCP4(b *testing.B) {
	f := tcp4Frame()
	var o TCPOptions
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		if !parseTCP4(f, &o) {
			b.Fatal("parse failed")
		}
	}
}

func BenchmarkIPv6Transport(b *testing.B) {
	v6 := ipv6With(ProtocolHopByHop, [][]byte{{ProtocolDestOpts, 0, 1, 4, 0, 0, 0, 0},
		{ProtocolTCP, 0, 1, 4, 0, 0, 0, 0}}, 20)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := v6.Transport(); !ok {
			b.Fatal("walk failed")
		}
	}
}

func BenchmarkTCPOptionsParse(b *testing.B) {
	tcp := TCP(tcp4Frame()[34:])
	var o TCPOptions
	b.ReportAllocs()
	for b.Loop() {
		ParseTCPOptions(tcp.Options(), &o)
	}
}

func BenchmarkNDPOptions(b *testing.B) {
	nd := make([]byte, 128)
	n := EncodeNDPLinkAddrOption(nd, NDPOptionSourceLinkAddr, []byte{1, 2, 3, 4, 5, 6})
	n += EncodeNDPPrefixInfoOption(nd[n:], netip.MustParsePrefix("2001:db8::/64"), 0xc0, 1, 1)
	n += EncodeNDPMTUOption(nd[n:], 1500)
	b.ReportAllocs()
	for b.Loop() {
		it := NDPOptionIter{Options: nd[:n]}
		for _, _, ok := it.Next(); ok; _, _, ok = it.Next() {
		}
	}
}
