package fwd

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/header"
)

// icmp6Frame builds a frame from the namespace carrying an ICMPv6 message
// (body written by fill into a buffer it returns the length of).
func icmp6Frame(src, dst string, hopLimit uint8, fill func(b []byte) int) []byte {
	f := make([]byte, 512)
	n := fill(f[l2l3v6:])
	writeIPv6Frame(f, []byte{0x33, 0x33, 0xff, 0, 0, 1}, testNSMAC, netip.MustParseAddr(src), netip.MustParseAddr(dst), header.ProtocolICMPv6, n)
	header.IPv6(f[14:]).SetHopLimit(hopLimit)
	finishICMPv6(f, n)
	return f[:l2l3v6+n]
}

func nsMessage(target string, withSLLAO bool) func([]byte) int {
	return func(b []byte) int {
		t := netip.MustParseAddr(target).As16()
		header.NDPNeighbor(b).Encode(header.ICMPv6NeighborSolicitation, 0, t[:])
		n := header.NDPNeighborMinimumSize
		if withSLLAO {
			n += header.EncodeNDPLinkAddrOption(b[n:], header.NDPOptionSourceLinkAddr, testNSMAC)
		}
		return n
	}
}

func rsMessage(b []byte) int {
	clear(b[:8])
	b[0] = header.ICMPv6RouterSolicitation
	return 8 + header.EncodeNDPLinkAddrOption(b[8:], header.NDPOptionSourceLinkAddr, testNSMAC)
}

// checkICMPv6Reply parses a reply frame and returns its IPv6 header and
// ICMPv6 message after checking the checksum and the link header.
func checkICMPv6Reply(t *testing.T, name string, fr []byte, wantDstMAC []byte) (header.IPv6, header.ICMPv6) {
	t.Helper()
	eth := header.Ethernet(fr)
	if !eth.IsValid() || eth.Type() != header.EtherTypeIPv6 || !bytes.Equal(eth.Src(), ourMAC) || !bytes.Equal(eth.Dst(), wantDstMAC) {
		t.Fatalf("%s: ethernet type %#x src %x dst %x, want IPv6 from %x to %x", name, eth.Type(), eth.Src(), eth.Dst(), []byte(ourMAC), wantDstMAC)
	}
	ip := header.IPv6(eth.Payload())
	if !ip.IsValid(len(ip)) || ip.NextHeader() != header.ProtocolICMPv6 || ip.HopLimit() != 255 || len(ip) != 40+int(ip.PayloadLength()) {
		t.Fatalf("%s: bad IPv6 header: next %d hop limit %d", name, ip.NextHeader(), ip.HopLimit())
	}
	icmp := header.ICMPv6(ip.Payload())
	if header.Checksum(icmp, header.PseudoHeaderChecksum(header.ProtocolICMPv6, ip.SrcSlice(), ip.DstSlice(), uint32(len(icmp)))) != 0xffff {
		t.Fatalf("%s: ICMPv6 checksum does not verify", name)
	}
	return ip, icmp
}

func TestNDPNeighborAdvert(t *testing.T) {
	p := respParams()
	tests := []struct {
		name   string
		frame  []byte
		target string
	}{
		{"gateway", icmp6Frame("fe80::2", "ff02::1:ff00:1", 255, nsMessage("fe80::1", true)), "fe80::1"},
		{"global peer", icmp6Frame("2001:db8:1:2::10", "ff02::1:ff00:99", 255, nsMessage("2001:db8:1:2::99", false)), "2001:db8:1:2::99"},
		{"own address", icmp6Frame("fe80::2", "ff02::1:ff00:10", 255, nsMessage("2001:db8:1:2::10", true)), ""},
		{"dad probe", icmp6Frame("::", "ff02::1:ff00:2", 255, nsMessage("fe80::2", false)), ""},
		{"hop limit 64", icmp6Frame("fe80::2", "ff02::1:ff00:1", 64, nsMessage("fe80::1", true)), ""},
		{"multicast target", icmp6Frame("fe80::2", "ff02::1", 255, nsMessage("ff02::1", true)), ""},
		{"zero-length option", icmp6Frame("fe80::2", "ff02::1:ff00:1", 255, func(b []byte) int {
			n := nsMessage("fe80::1", true)(b)
			b[n-7] = 0
			return n
		}), ""},
	}
	for _, tt := range tests {
		out := bytes.Repeat([]byte{0xee}, 1514)
		n := ndpReply(p, nil, tt.frame, out)
		if tt.target == "" {
			if n != 0 {
				t.Errorf("%s: got a %d-byte reply, want none", tt.name, n)
			}
			continue
		}
		if n == 0 {
			t.Errorf("%s: no reply", tt.name)
			continue
		}
		ip, icmp := checkICMPv6Reply(t, tt.name, out[:n], testNSMAC)
		na := header.NDPNeighbor(icmp)
		req := header.IPv6(tt.frame[14:])
		target := netip.MustParseAddr(tt.target)
		if icmp.Type() != header.ICMPv6NeighborAdvertisement || !na.IsValid() || na.Target() != target ||
			na.Flags() != header.NDPFlagRouter|header.NDPFlagSolicited|header.NDPFlagOverride {
			t.Errorf("%s: got type %d target %v flags %#x, want NA for %v with R|S|O", tt.name, icmp.Type(), na.Target(), na.Flags(), target)
		}
		if ip.Src() != target || ip.Dst() != req.Src() {
			t.Errorf("%s: got %v -> %v, want %v -> %v", tt.name, ip.Src(), ip.Dst(), target, req.Src())
		}
		it := header.NDPOptionIter{Options: na.Options()}
		typ, body, ok := it.Next()
		if mac, _ := header.NDPLinkAddr(body); !ok || typ != header.NDPOptionTargetLinkAddr || !bytes.Equal(mac, ourMAC) {
			t.Errorf("%s: got option %d %x, want target link-layer address %x", tt.name, typ, body, []byte(ourMAC))
		}
	}
	noNDP := respParams()
	noNDP.NoNDP = true
	if n := ndpReply(noNDP, nil, tests[0].frame, make([]byte, 1514)); n != 0 {
		t.Errorf("NoNDP: got a %d-byte reply, want none", n)
	}
}

func checkRA(t *testing.T, name string, p *NetParams, icmp header.ICMPv6) {
	t.Helper()
	ra := header.NDPRouterAdvert(icmp)
	if icmp.Type() != header.ICMPv6RouterAdvertisement || !ra.IsValid() || ra.RouterLifetime() != raRouterLifetime ||
		ra.Flags() != header.NDPRAFlagManaged|header.NDPRAFlagOther {
		t.Fatalf("%s: got type %d lifetime %d flags %#x", name, icmp.Type(), ra.RouterLifetime(), ra.Flags())
	}
	seen := map[uint8]bool{}
	it := header.NDPOptionIter{Options: ra.Options()}
	for typ, body, ok := it.Next(); ok; typ, body, ok = it.Next() {
		seen[typ] = true
		switch typ {
		case header.NDPOptionSourceLinkAddr:
			if mac, ok := header.NDPLinkAddr(body); !ok || !bytes.Equal(mac, ourMAC) {
				t.Errorf("%s: source link-layer address %x, want %x", name, mac, []byte(ourMAC))
			}
		case header.NDPOptionPrefixInfo:
			pi := header.NDPPrefixInfo(body)
			if !pi.IsValid() || pi.PrefixLength() != 64 || pi.Prefix() != netip.MustParseAddr("2001:db8:1:2::") ||
				pi.Flags() != header.NDPPrefixFlagOnLink|header.NDPPrefixFlagAuto || pi.ValidLifetime() != ndpInfinite {
				t.Errorf("%s: prefix %v/%d flags %#x valid %d", name, pi.Prefix(), pi.PrefixLength(), pi.Flags(), pi.ValidLifetime())
			}
		case header.NDPOptionMTU:
			if mtu, ok := header.NDPMTU(body); !ok || mtu != uint32(p.MTU) {
				t.Errorf("%s: MTU %d, want %d", name, mtu, p.MTU)
			}
		case header.NDPOptionRDNSS:
			if _, addrs, ok := header.NDPRDNSS(body); !ok || len(addrs) != 16 || netip.AddrFrom16([16]byte(addrs)) != p.DNS6[0] {
				t.Errorf("%s: RDNSS %x, want %v", name, addrs, p.DNS6)
			}
		case header.NDPOptionDNSSL:
			_, names, ok := header.NDPDNSSL(body)
			if want := "\x07example\x03com\x00\x03lab\x07example\x03org\x00"; !ok || !bytes.HasPrefix(names, []byte(want)) {
				t.Errorf("%s: DNSSL %q, want %q", name, names, want)
			}
		}
	}
	if it.Malformed || len(seen) != 5 {
		t.Errorf("%s: options malformed=%v, seen %v, want 5 kinds", name, it.Malformed, seen)
	}
}

func TestNDPRouterAdvert(t *testing.T) {
	p := respParams()
	out := make([]byte, 1514)
	n := ndpReply(p, nil, icmp6Frame("fe80::2", "ff02::2", 255, rsMessage), out)
	if n == 0 {
		t.Fatalf("router solicitation: no reply")
	}
	ip, icmp := checkICMPv6Reply(t, "solicited", out[:n], testNSMAC)
	if ip.Src() != p.OurLL6 || ip.Dst() != netip.MustParseAddr("fe80::2") {
		t.Errorf("solicited: got %v -> %v, want %v -> fe80::2", ip.Src(), ip.Dst(), p.OurLL6)
	}
	checkRA(t, "solicited", p, icmp)

	n = ndpReply(p, nil, icmp6Frame("::", "ff02::2", 255, rsMessage), out)
	ip, icmp = checkICMPv6Reply(t, "from ::", out[:n], allNodesMAC)
	if ip.Dst() != allNodes6 {
		t.Errorf("from ::: destination %v, want ff02::1", ip.Dst())
	}
	checkRA(t, "from ::", p, icmp)

	n = buildRouterAdvert(p, out)
	_, icmp = checkICMPv6Reply(t, "unsolicited", out[:n], allNodesMAC)
	checkRA(t, "unsolicited", p, icmp)

	noRA := respParams()
	noRA.NoRA = true
	if n := ndpReply(noRA, nil, icmp6Frame("fe80::2", "ff02::2", 255, rsMessage), out); n != 0 || buildRouterAdvert(noRA, out) != 0 {
		t.Errorf("NoRA: got a reply")
	}
	if n := ndpReply(p, nil, icmp6Frame("fe80::2", "ff02::2", 255, rsMessage), out[:100]); n != 0 {
		t.Errorf("short out buffer: got %d bytes", n)
	}
}

func FuzzNDPReply(f *testing.F) {
	f.Add(icmp6Frame("fe80::2", "ff02::1:ff00:1", 255, nsMessage("fe80::1", true)))
	f.Add(icmp6Frame("fe80::2", "ff02::2", 255, rsMessage))
	fuzzResponder(f, func(p *NetParams, fr, out []byte) int { return ndpReply(p, nil, fr, out) }, 90)
}

func BenchmarkNDPReply(b *testing.B) {
	p, out := respParams(), make([]byte, 1514)
	for _, bc := range []struct {
		name  string
		frame []byte
	}{
		{"NS", icmp6Frame("fe80::2", "ff02::1:ff00:1", 255, nsMessage("fe80::1", true))},
		{"RS", icmp6Frame("fe80::2", "ff02::2", 255, rsMessage)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ndpReply(p, nil, bc.frame, out) == 0 {
					b.Fatal("no reply")
				}
			}
		})
	}
}

// TestUnsolicitedRouterAdvert drives the housekeeping tick: the first
// advertisement is scheduled, not sent, at start; when its time comes one
// goes to all nodes, and the next is scheduled within the RFC's interval.
// With NoRA nothing is sent.
func TestUnsolicitedRouterAdvert(t *testing.T) {
	for _, noRA := range []bool{false, true} {
		p := respParams()
		p.NoRA = noRA
		l := newFakeLink(t)
		e, err := New(l, p, Options{})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { e.Close() })
		now := e.start
		e.clock = func() time.Time { return now }
		tick := func(d time.Duration) {
			now = now.Add(d)
			e.updateClock()
			e.timerfdFired()
			e.flush()
		}
		tick(0)
		first := e.nextRA - e.now
		if first < raMinInterval || first >= raMaxInterval {
			t.Fatalf("first advertisement in %v, want within [%v, %v)",
				time.Duration(first), time.Duration(raMinInterval), time.Duration(raMaxInterval))
		}
		if len(l.out) != 0 {
			t.Errorf("noRA=%v: %d frames at start, want none", noRA, len(l.out))
		}
		tick(time.Duration(first) - time.Second)
		if len(l.out) != 0 {
			t.Errorf("noRA=%v: %d frames a second before the advertisement is due, want none", noRA, len(l.out))
		}
		tick(time.Second)
		if noRA {
			if len(l.out) != 0 {
				t.Errorf("NoRA: %d frames when an advertisement was due, want none", len(l.out))
			}
			continue
		}
		if len(l.out) != 1 {
			t.Fatalf("%d frames when the advertisement was due, want 1", len(l.out))
		}
		_, icmp := checkICMPv6Reply(t, "unsolicited", <-l.out, allNodesMAC)
		checkRA(t, "unsolicited", p, icmp)
		if next := e.nextRA - e.now; next < raMinInterval || next >= raMaxInterval {
			t.Errorf("next advertisement in %v, want within [%v, %v)",
				time.Duration(next), time.Duration(raMinInterval), time.Duration(raMaxInterval))
		}
	}
}

// TestNoMTUAnnounced: with MTU 0 (-m 0, the kernel's MTU left as it is)
// neither DHCP nor router advertisements name an MTU, or the namespace's
// DHCP client or SLAAC would set one and undo what the option asked for.
func TestNoMTUAnnounced(t *testing.T) {
	p := respParams()
	p.MTU = 0
	out := make([]byte, 65535)
	n := buildRouterAdvert(p, out)
	_, icmp := checkICMPv6Reply(t, "unsolicited", out[:n], allNodesMAC)
	it := header.NDPOptionIter{Options: header.NDPRouterAdvert(icmp).Options()}
	for typ, body, ok := it.Next(); ok; typ, body, ok = it.Next() {
		if typ == header.NDPOptionMTU {
			t.Errorf("router advertisement with MTU 0: got an MTU option %x, want none", body)
		}
	}
	n = dhcpReply(p, dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpDiscover), out)
	if n == 0 {
		t.Fatalf("DHCP discover with MTU 0: no reply")
	}
	if _, opts := dhcpReplyOptions(t, "MTU 0", out[:n]); opts[dhcpOptMTU] != nil {
		t.Errorf("DHCP offer with MTU 0: got MTU option %x, want none", opts[dhcpOptMTU])
	}
}
