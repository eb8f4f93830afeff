package header

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
)

func TestEthernet(t *testing.T) {
	f := make(Ethernet, 20)
	src := []byte{0x9a, 0x55, 0x9a, 0x55, 0x9a, 0x55}
	f.Encode(EthernetBroadcast[:], src, EtherTypeARP)
	if !f.IsValid() || f.Type() != EtherTypeARP || !bytes.Equal(f.Src(), src) || !IsMulticastMAC(f.Dst()) {
		t.Fatalf("got valid=%v type=%#x src=%x dst=%x", f.IsValid(), f.Type(), f.Src(), f.Dst())
	}
	if len(f.Payload()) != 6 {
		t.Errorf("payload length: got %d, want 6", len(f.Payload()))
	}
	f.SetType(EtherTypeVLAN)
	if f.IsValid() {
		t.Errorf("VLAN frame: got valid, want invalid")
	}
	if Ethernet(make([]byte, 13)).IsValid() {
		t.Errorf("13-byte frame: got valid, want invalid")
	}
}

func TestARP(t *testing.T) {
	a := make(ARP, ARPSize)
	sha := []byte{2, 0, 0, 0, 0, 1}
	a.Encode(ARPRequest, sha, []byte{192, 0, 2, 10}, make([]byte, 6), []byte{192, 0, 2, 1})
	if !a.IsValid() || a.Op() != ARPRequest || !bytes.Equal(a.SenderMAC(), sha) ||
		a.SenderIP() != netip.MustParseAddr("192.0.2.10") || a.TargetIP() != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("round trip: got valid=%v op=%d sha=%x spa=%v tpa=%v", a.IsValid(), a.Op(), a.SenderMAC(), a.SenderIP(), a.TargetIP())
	}
	a[5] = 16 // IPv6-sized protocol address: not ours
	if a.IsValid() {
		t.Errorf("plen 16: got valid, want invalid")
	}
}

func TestIPv4KnownChecksum(t *testing.T) {
	// A commonly cited example header; its checksum is 0xb861.
	h := IPv4{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00,
		0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := h.CalculateChecksum(); got != 0xb861 {
		t.Fatalf("got %#04x, want 0xb861", got)
	}
	h.SetChecksum(0xb861)
	if !h.IsChecksumValid() {
		t.Errorf("checksum 0xb861: got invalid, want valid")
	}
}

func TestIPv4RoundTrip(t *testing.T) {
	b := make(IPv4, 64)
	f := IPv4Fields{
		TOS: 0x10, TotalLength: 24 + 8, ID: 0xbeef, Flags: IPv4FlagMoreFragments, FragOffset: 1480,
		TTL: 64, Protocol: ProtocolUDP, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("198.51.100.2"),
		Options: []byte{1, 1, 1, 0},
	}
	b.Encode(&f)
	if !b.IsValid(32) || !b.IsChecksumValid() {
		t.Fatalf("encoded header: valid=%v checksum ok=%v", b.IsValid(32), b.IsChecksumValid())
	}
	if b.HeaderLength() != 24 || b.TOS() != 0x10 || b.ID() != 0xbeef || b.Flags() != IPv4FlagMoreFragments ||
		b.FragmentOffset() != 1480 || !b.IsFragment() || b.TTL() != 64 || b.Protocol() != ProtocolUDP ||
		b.Src() != f.Src || b.Dst() != f.Dst || !bytes.Equal(b.Options(), f.Options) || len(b.Payload()) != 8 {
		t.Fatalf("round trip mismatch: hl=%d tos=%#x id=%#x flags=%#x fo=%d ttl=%d proto=%d src=%v dst=%v opts=%x payload=%d",
			b.HeaderLength(), b.TOS(), b.ID(), b.Flags(), b.FragmentOffset(), b.TTL(), b.Protocol(), b.Src(), b.Dst(), b.Options(), len(b.Payload()))
	}
}

func TestIPv4IsValid(t *testing.T) {
	good := func() IPv4 {
		b := make(IPv4, 60)
		b.Encode(&IPv4Fields{TotalLength: 40, TTL: 1, Protocol: ProtocolTCP,
			Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")})
		return b
	}
	tests := []struct {
		name   string
		mod    func(IPv4)
		pktLen int
		want   bool
	}{
		{"good", func(IPv4) {}, 40, true},
		{"ethernet padding", func(IPv4) {}, 60, true},
		{"pktLen beyond buffer", func(IPv4) {}, 61, false},
		{"truncated", func(IPv4) {}, 39, false},
		{"version 6", func(b IPv4) { b[0] = 0x65 }, 40, false},
		{"ihl 4", func(b IPv4) { b[0] = 0x44 }, 40, false},
		{"ihl 15 beyond total", func(b IPv4) { b[0] = 0x4f }, 40, false},
		{"ihl 10 within total", func(b IPv4) { b[0] = 0x4a }, 40, true},
		{"total below ihl", func(b IPv4) { b.SetTotalLength(19) }, 40, false},
		{"short pkt", func(IPv4) {}, 19, false},
	}
	for _, tt := range tests {
		b := good()
		tt.mod(b)
		if got := b.IsValid(tt.pktLen); got != tt.want {
			t.Errorf("%s: IsValid(%d) = %v, want %v", tt.name, tt.pktLen, got, tt.want)
		}
	}
	if (IPv4{0x45}).IsValid(1) {
		t.Errorf("1-byte buffer: got valid")
	}
}

// ipv6With builds an IPv6 packet with the given extension headers (each
// given as next-header-less body; the walker's Next Header chaining is
// filled in) followed by upper-layer protocol proto and payload bytes.
func ipv6With(first uint8, exts [][]byte, payload int) IPv6 {
	var body []byte
	for _, e := range exts {
		body = append(body, e...)
	}
	body = append(body, make([]byte, payload)...)
	b := make(IPv6, IPv6MinimumSize+len(body))
	b.Encode(&IPv6Fields{PayloadLength: uint16(len(body)), NextHeader: first, HopLimit: 64,
		Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("2001:db8::2")})
	copy(b[IPv6MinimumSize:], body)
	return b
}

func TestIPv6Transport(t *testing.T) {
	hbh := []byte{ProtocolRouting, 0, 1, 4, 0, 0, 0, 0}
	rt := []byte{ProtocolDestOpts, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	dst := []byte{ProtocolFragment, 0, 1, 4, 0, 0, 0, 0}
	frag0 := []byte{ProtocolTCP, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef}
	fragN := []byte{ProtocolTCP, 0, 0x05, 0xc9, 0, 0, 0, 7} // offset 1480, more
	ah := []byte{ProtocolUDP, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	tests := []struct {
		name   string
		pkt    IPv6
		wantOK bool
		want   IPv6Transport
	}{
		{"plain tcp", ipv6With(ProtocolTCP, nil, 20), true, IPv6Transport{Protocol: ProtocolTCP, Offset: 40}},
		{"no next", ipv6With(ProtocolNoNext, nil, 0), true, IPv6Transport{Protocol: ProtocolNoNext, Offset: 40}},
		{"hbh rt dst frag tcp", ipv6With(ProtocolHopByHop, [][]byte{hbh, rt, dst, frag0}, 20), true,
			IPv6Transport{Protocol: ProtocolTCP, Offset: 40 + 8 + 16 + 8 + 8, Fragment: true, MoreFragments: true, FragID: 0xdeadbeef}},
		{"later fragment", ipv6With(ProtocolFragment, [][]byte{fragN}, 100), true,
			IPv6Transport{Protocol: ProtocolTCP, Offset: 48, Fragment: true, MoreFragments: true, FragOffset: 1480, FragID: 7}},
		{"ah udp", ipv6With(ProtocolAH, [][]byte{ah}, 8), true, IPv6Transport{Protocol: ProtocolUDP, Offset: 52}},
		{"hbh not first", ipv6With(ProtocolDestOpts, [][]byte{{ProtocolHopByHop, 0, 0, 0, 0, 0, 0, 0}, hbh}, 0), false, IPv6Transport{}},
		{"ext past payload", ipv6With(ProtocolRouting, [][]byte{{ProtocolTCP, 5, 0, 0}}, 0), false, IPv6Transport{}},
		{"truncated ext", ipv6With(ProtocolDestOpts, [][]byte{{ProtocolTCP}}, 0), false, IPv6Transport{}},
		{"truncated frag", ipv6With(ProtocolFragment, [][]byte{{ProtocolTCP, 0, 0}}, 0), false, IPv6Transport{}},
	}
	for _, tt := range tests {
		if !tt.pkt.IsValid(len(tt.pkt)) {
			t.Fatalf("%s: test packet invalid", tt.name)
		}
		got, ok := tt.pkt.Transport()
		if ok != tt.wantOK || (ok && got != tt.want) {
			t.Errorf("%s: got %+v ok=%v, want %+v ok=%v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
	// A chain of 17 destination options headers is refused.
	var many [][]byte
	for i := 0; i < 17; i++ {
		many = append(many, []byte{ProtocolDestOpts, 0, 1, 4, 0, 0, 0, 0})
	}
	if _, ok := ipv6With(ProtocolDestOpts, many, 0).Transport(); ok {
		t.Errorf("17 extension headers: got ok, want refused")
	}
}

func TestIPv6Fields(t *testing.T) {
	b := make(IPv6, 48)
	f := IPv6Fields{TrafficClass: 0xb8, FlowLabel: 0x12345, PayloadLength: 8, NextHeader: ProtocolUDP, HopLimit: 255,
		Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("ff02::1")}
	b.Encode(&f)
	if !b.IsValid(48) || b.TrafficClass() != 0xb8 || b.FlowLabel() != 0x12345 || b.NextHeader() != ProtocolUDP ||
		b.HopLimit() != 255 || b.Src() != f.Src || b.Dst() != f.Dst || len(b.Payload()) != 8 {
		t.Fatalf("round trip mismatch: tc=%#x fl=%#x nh=%d hl=%d src=%v dst=%v", b.TrafficClass(), b.FlowLabel(), b.NextHeader(), b.HopLimit(), b.Src(), b.Dst())
	}
	if b.IsValid(47) {
		t.Errorf("payload beyond pktLen: got valid")
	}
}

func TestTCPOptions(t *testing.T) {
	var opts [40]byte
	n := EncodeMSSOption(opts[:], 1460)
	n += EncodeSACKPermittedOption(opts[n:])
	n += EncodeTSOption(opts[n:], 111, 222)
	n += EncodeWSOption(opts[n:], 20)
	var o TCPOptions
	if !ParseTCPOptions(opts[:n], &o) {
		t.Fatalf("SYN options: parse failed")
	}
	if o.MSS != 1460 || !o.SACKPermitted || !o.TS || o.TSVal != 111 || o.TSEcr != 222 || o.WS != TCPMaxWindowScale {
		t.Fatalf("got %+v, want mss 1460, sackok, ts 111/222, ws 14", o)
	}

	n = EncodeTSOption(opts[:], 1, 2)
	n += EncodeSACKOption(opts[n:], []SACKBlock{{10, 20}, {30, 40}, {50, 60}})
	if n != 40 {
		t.Fatalf("ts+3 sack: length %d, want 40", n)
	}
	if !ParseTCPOptions(opts[:n], &o) || o.NumSACK != 3 || o.SACKBlocks[2] != (SACKBlock{50, 60}) || o.WS != -1 {
		t.Fatalf("ts+sack: got %+v", o)
	}

	bad := []struct {
		name string
		b    []byte
	}{
		{"length 0", []byte{TCPOptionMSS, 0, 0, 0}},
		{"length 1", []byte{99, 1}},
		{"past end", []byte{TCPOptionTS, 10, 0, 0}},
		{"no length byte", []byte{TCPOptionNOP, TCPOptionMSS}},
		{"mss wrong length", []byte{TCPOptionMSS, 3, 0}},
		{"sack odd", []byte{TCPOptionSACK, 6, 0, 0, 0, 0}},
	}
	for _, tt := range bad {
		if ParseTCPOptions(tt.b, &o) {
			t.Errorf("%s: got parsed, want malformed", tt.name)
		}
	}
	// EOL ends parsing; what follows is ignored.
	if !ParseTCPOptions([]byte{TCPOptionEOL, 0xff, 0xff}, &o) {
		t.Errorf("EOL then garbage: got malformed, want ok")
	}
	// Unknown options are skipped.
	if !ParseTCPOptions([]byte{30, 4, 0, 0, TCPOptionMSS, 4, 0x05, 0xb4}, &o) || o.MSS != 1460 {
		t.Errorf("unknown then MSS: got %+v", o)
	}
}

func TestTCPAndChecksum(t *testing.T) {
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	seg := make(TCP, 24+5)
	seg.Encode(&TCPFields{SrcPort: 40000, DstPort: 80, Seq: 1, Ack: 2, DataOffset: 24, Flags: TCPFlagSYN | TCPFlagACK, Window: 65535})
	EncodeMSSOption(seg[20:], 1460)
	copy(seg[24:], "hello")
	s4, d4 := src.As4(), dst.As4()
	seg.SetChecksum(seg.CalculateChecksum(PseudoHeaderChecksum(ProtocolTCP, s4[:], d4[:], uint32(len(seg)))))
	if !seg.IsValid() || seg.SrcPort() != 40000 || seg.DstPort() != 80 || seg.Seq() != 1 || seg.Ack() != 2 ||
		seg.Flags() != TCPFlagSYN|TCPFlagACK || seg.Window() != 65535 || string(seg.Payload()) != "hello" || len(seg.Options()) != 4 {
		t.Fatalf("round trip mismatch")
	}
	if Checksum(seg, PseudoHeaderChecksum(ProtocolTCP, s4[:], d4[:], uint32(len(seg)))) != 0xffff {
		t.Fatalf("segment checksum does not verify")
	}
	// NAT the destination address and port incrementally.
	nd := netip.MustParseAddr("127.0.0.1").As4()
	x := ChecksumUpdate(seg.Checksum(), d4[:], nd[:])
	x = ChecksumUpdate16(x, 80, 8080)
	seg.SetDstPort(8080)
	seg.SetChecksum(x)
	if Checksum(seg, PseudoHeaderChecksum(ProtocolTCP, s4[:], nd[:], uint32(len(seg)))) != 0xffff {
		t.Fatalf("incrementally updated checksum does not verify")
	}
	for _, bad := range []TCP{make(TCP, 19), append(TCP{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40}, make([]byte, 7)...),
		append(TCP{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x60}, make([]byte, 7)...)} {
		if bad.IsValid() {
			t.Errorf("bad TCP header %x: got valid", []byte(bad))
		}
	}
}

func TestUDP(t *testing.T) {
	src := netip.MustParseAddr("2001:db8::1").As16()
	dst := netip.MustParseAddr("2001:db8::2").As16()
	u := make(UDP, 8+3+4) // 4 bytes of trailing junk beyond Length
	u.Encode(53, 5353, 11)
	copy(u[8:], "abc")
	u.SetChecksum(u[:11].CalculateChecksum(PseudoHeaderChecksum(ProtocolUDP, src[:], dst[:], 11)))
	if !u.IsValid() || u.SrcPort() != 53 || u.DstPort() != 5353 || string(u.Payload()) != "abc" {
		t.Fatalf("round trip mismatch: valid=%v ports %d/%d payload %q", u.IsValid(), u.SrcPort(), u.DstPort(), u.Payload())
	}
	if Checksum(u[:11], PseudoHeaderChecksum(ProtocolUDP, src[:], dst[:], 11)) != 0xffff {
		t.Errorf("checksum does not verify")
	}
	u.SetLength(7)
	if u.IsValid() {
		t.Errorf("length 7: got valid")
	}
	u.SetLength(16)
	if u.IsValid() {
		t.Errorf("length past buffer: got valid")
	}
}

func TestICMP(t *testing.T) {
	m := make(ICMPv4, 12)
	m.SetType(ICMPv4Echo)
	m.SetIdent(0x1234)
	m.SetSeq(7)
	m.SetChecksum(m.CalculateChecksum())
	if !m.IsValid() || m.Type() != ICMPv4Echo || m.Ident() != 0x1234 || m.Seq() != 7 || Checksum(m, 0) != 0xffff {
		t.Fatalf("icmpv4 echo mismatch")
	}
	m6 := make(ICMPv6, 8)
	m6.SetType(ICMPv6PacketTooBig)
	m6.SetRest(1280)
	if m6.MTU() != 1280 || m6.Type() != ICMPv6PacketTooBig {
		t.Errorf("icmpv6 ptb: got type %d mtu %d", m6.Type(), m6.MTU())
	}
}

func TestNDPOptions(t *testing.T) {
	mac := []byte{0x9a, 0x55, 0x9a, 0x55, 0x9a, 0x55}
	b := make([]byte, 256)
	ra := NDPRouterAdvert(b)
	ra.Encode(64, NDPRAFlagOther, 1800, 0, 0)
	n := NDPRouterAdvertMinimumSize
	n += EncodeNDPLinkAddrOption(b[n:], NDPOptionSourceLinkAddr, mac)
	n += EncodeNDPPrefixInfoOption(b[n:], netip.MustParsePrefix("2001:db8:1:2::5/64"), NDPPrefixFlagOnLink|NDPPrefixFlagAuto, 0xffffffff, 0xffffffff)
	n += EncodeNDPMTUOption(b[n:], 65520)
	dns := []netip.Addr{netip.MustParseAddr("2001:db8::53"), netip.MustParseAddr("2001:db8::54")}
	n += EncodeNDPRDNSSOption(b[n:], 600, dns)
	n += EncodeNDPDNSSLOption(b[n:], 600, []string{"example.com", "bad..name", "lab.example.org."})
	ra = ra[:n]
	if !ra.IsValid() || ra.CurHopLimit() != 64 || ra.Flags() != NDPRAFlagOther || ra.RouterLifetime() != 1800 {
		t.Fatalf("ra fixed part mismatch")
	}
	seen := map[uint8]bool{}
	it := NDPOptionIter{Options: ra.Options()}
	for typ, body, ok := it.Next(); ok; typ, body, ok = it.Next() {
		seen[typ] = true
		switch typ {
		case NDPOptionSourceLinkAddr:
			if got, ok := NDPLinkAddr(body); !ok || !bytes.Equal(got, mac) {
				t.Errorf("sllao: got %x", got)
			}
		case NDPOptionPrefixInfo:
			p := NDPPrefixInfo(body)
			if !p.IsValid() || p.PrefixLength() != 64 || p.Flags() != NDPPrefixFlagOnLink|NDPPrefixFlagAuto ||
				p.ValidLifetime() != 0xffffffff || p.PreferredLifetime() != 0xffffffff || p.Prefix() != netip.MustParseAddr("2001:db8:1:2::") {
				t.Errorf("prefix info mismatch: len %d flags %#x prefix %v", p.PrefixLength(), p.Flags(), p.Prefix())
			}
		case NDPOptionMTU:
			if mtu, ok := NDPMTU(body); !ok || mtu != 65520 {
				t.Errorf("mtu: got %d", mtu)
			}
		case NDPOptionRDNSS:
			lt, addrs, ok := NDPRDNSS(body)
			if !ok || lt != 600 || len(addrs) != 32 || netip.AddrFrom16([16]byte(addrs[16:])) != dns[1] {
				t.Errorf("rdnss: got lifetime %d addrs %x", lt, addrs)
			}
		case NDPOptionDNSSL:
			lt, names, ok := NDPDNSSL(body)
			want := []byte("\x07example\x03com\x00\x03lab\x07example\x03org\x00")
			if !ok || lt != 600 || !bytes.HasPrefix(names, want) || len(body)%8 != 6 {
				t.Errorf("dnssl: got lifetime %d names %q", lt, names)
			}
		}
	}
	if it.Malformed || len(seen) != 5 {
		t.Fatalf("options walk: malformed=%v seen=%v", it.Malformed, seen)
	}
	for _, bad := range [][]byte{{1}, {1, 0, 0, 0, 0, 0, 0, 0}, {1, 2, 0, 0, 0, 0, 0, 0}} {
		it := NDPOptionIter{Options: bad}
		for _, _, ok := it.Next(); ok; _, _, ok = it.Next() {
		}
		if !it.Malformed {
			t.Errorf("options %x: got well-formed, want malformed", bad)
		}
	}
}

func TestNDPNeighbor(t *testing.T) {
	b := make(NDPNeighbor, 32)
	target := netip.MustParseAddr("fe80::1").As16()
	b.Encode(ICMPv6NeighborAdvertisement, NDPFlagRouter|NDPFlagSolicited|NDPFlagOverride, target[:])
	EncodeNDPLinkAddrOption(b[24:], NDPOptionTargetLinkAddr, []byte{1, 2, 3, 4, 5, 6})
	if !b.IsValid() || b.Flags() != 0xe0 || b.Target() != netip.MustParseAddr("fe80::1") || len(b.Options()) != 8 ||
		ICMPv6(b).Type() != ICMPv6NeighborAdvertisement {
		t.Fatalf("na mismatch: flags %#x target %v", b.Flags(), b.Target())
	}
	if binary.BigEndian.Uint32(b[4:]) != 0xe0000000 {
		t.Errorf("flags word: got %#x", binary.BigEndian.Uint32(b[4:]))
	}
}

func TestEncodeDNSName(t *testing.T) {
	tests := []struct {
		name string
		want string
		ok   bool
	}{
		{"example.com", "\x07example\x03com\x00", true},
		{"example.com.", "\x07example\x03com\x00", true},
		{"", "\x00", true},
		{".", "\x00", true},
		{"a..b", "", false},
		{".a", "", false},
		{"a..", "", false},
		{string(bytes.Repeat([]byte("x"), 64)) + ".com", "", false},
		{string(bytes.Repeat([]byte("abcdefg."), 32)) + "x", "", false},
	}
	for _, tt := range tests {
		var b [300]byte
		n, ok := EncodeDNSName(b[:], tt.name)
		if ok != tt.ok || (ok && string(b[:n]) != tt.want) {
			t.Errorf("EncodeDNSName(%q) = %q, %v; want %q, %v", tt.name, b[:n], ok, tt.want, tt.ok)
		}
	}
	var small [5]byte
	if _, ok := EncodeDNSName(small[:], "abcd"); ok {
		t.Errorf("short buffer: got ok")
	}
	if n, ok := EncodeDNSName(small[:], "abc"); !ok || n != 5 {
		t.Errorf("exact buffer: got %d %v", n, ok)
	}
}

func TestEncodeDNSSearchList(t *testing.T) {
	long := strings.Repeat("x", 63)
	tests := []struct {
		name  string
		size  int
		names []string
		want  string
	}{
		{"none", 64, nil, ""},
		{"one", 64, []string{"example.com"}, "\x07example\x03com\x00"},
		{"two, trailing dot", 64, []string{"example.com", "lab.example.org."}, "\x07example\x03com\x00\x03lab\x07example\x03org\x00"},
		{"root left out", 64, []string{".", "a", ""}, "\x01a\x00"},
		{"invalid left out", 64, []string{"a..b", long + "x.com", "b", ".c"}, "\x01b\x00"},
		{"exact fit", 9, []string{"abc", "de"}, "\x03abc\x00\x02de\x00"},
		{"too long left out, shorter after it fits", 8, []string{"abc", "defg", "d"}, "\x03abc\x00\x01d\x00"},
		{"nothing fits", 4, []string{"abcd"}, ""},
		{"no room", 0, []string{"a"}, ""},
		{"longest label", 80, []string{long}, "\x3f" + long + "\x00"},
	}
	for _, tt := range tests {
		b := make([]byte, tt.size)
		n := EncodeDNSSearchList(b, tt.names)
		if got := string(b[:n]); got != tt.want {
			t.Errorf("%s: EncodeDNSSearchList(%q) = %q, want %q", tt.name, tt.names, got, tt.want)
		}
	}
	// DNSSL: the same names, padded; the root is left out there too.
	b := make([]byte, 64)
	n := EncodeNDPDNSSLOption(b, 600, []string{"a", ".", "example.com", "b"})
	_, names, ok := NDPDNSSL(b[2:n])
	if want := "\x01a\x00\x07example\x03com\x00\x01b\x00"; !ok || n != 32 || string(names) != want+"\x00\x00\x00\x00\x00" {
		t.Errorf("DNSSL: got %d bytes, names %q; want 32, %q and 5 bytes of padding", n, names, want)
	}
	if n := EncodeNDPDNSSLOption(b, 600, []string{".", "a..b"}); n != 0 {
		t.Errorf("DNSSL of no valid name: got %d bytes, want 0", n)
	}
}

func TestVirtioNetHdr(t *testing.T) {
	b := make([]byte, VirtioNetHdrSize)
	h := VirtioNetHdr(b)
	h.Encode(&VirtioNetHdrFields{
		Flags: VirtioNetHdrFNeedsCsum, GSOType: VirtioNetHdrGSOTCPv6,
		HdrLen: 74, GSOSize: 1440, CsumStart: 54, CsumOffset: 16,
	})
	want := []byte{1, 4, 74, 0, 0xa0, 0x05, 54, 0, 16, 0, 0, 0}
	if string(b) != string(want) {
		t.Fatalf("encoded: got % x, want % x", b, want)
	}
	if h.Flags() != VirtioNetHdrFNeedsCsum || h.GSOType() != VirtioNetHdrGSOTCPv6 || h.HdrLen() != 74 ||
		h.GSOSize() != 1440 || h.CsumStart() != 54 || h.CsumOffset() != 16 || h.NumBuffers() != 0 {
		t.Errorf("decoded fields differ from what was encoded: % x", b)
	}
}
