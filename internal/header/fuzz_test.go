package header

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// The fuzz targets check that no parser panics on any input and that what
// a validator accepts can be read with every accessor.

func FuzzIPv4(f *testing.F) {
	b := make(IPv4, 28)
	b.Encode(&IPv4Fields{TotalLength: 28, TTL: 64, Protocol: ProtocolUDP,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")})
	f.Add([]byte(b), 28)
	f.Add([]byte{0x4f, 0, 0, 60}, 4)
	f.Fuzz(func(t *testing.T, data []byte, pktLen int) {
		h := IPv4(data)
		if !h.IsValid(pktLen) {
			return
		}
		_ = h.IsChecksumValid()
		_ = h.CalculateChecksum()
		_, _, _, _ = h.Options(), h.Payload(), h.Src(), h.Dst()
		_, _, _ = h.IsFragment(), h.FragmentOffset(), h.Flags()
		if len(h.Payload()) != int(h.TotalLength())-h.HeaderLength() {
			t.Fatalf("payload length %d, want %d", len(h.Payload()), int(h.TotalLength())-h.HeaderLength())
		}
	})
}

func FuzzIPv6Transport(f *testing.F) {
	f.Add([]byte(ipv6With(ProtocolHopByHop, [][]byte{{ProtocolFragment, 0, 1, 4, 0, 0, 0, 0},
		{ProtocolTCP, 0, 0, 1, 0, 0, 0, 1}}, 20)))
	f.Add([]byte(ipv6With(ProtocolAH, [][]byte{{ProtocolUDP, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}, 8)))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := IPv6(data)
		tr, ok := h.Transport() // must be safe even before IsValid
		if !h.IsValid(len(data)) {
			return
		}
		_, _, _ = h.Payload(), h.Src(), h.FlowLabel()
		if ok && (tr.Offset < IPv6MinimumSize || tr.Offset > IPv6MinimumSize+int(h.PayloadLength())) {
			t.Fatalf("transport offset %d outside payload (length %d)", tr.Offset, h.PayloadLength())
		}
	})
}

func FuzzTCPOptions(f *testing.F) {
	var opts [40]byte
	n := EncodeMSSOption(opts[:], 1460)
	n += EncodeSACKPermittedOption(opts[n:])
	n += EncodeTSOption(opts[n:], 1, 2)
	n += EncodeWSOption(opts[n:], 7)
	f.Add(opts[:n])
	f.Add([]byte{TCPOptionSACK, 34, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var o TCPOptions
		_ = ParseTCPOptions(data, &o)
		if o.NumSACK > TCPMaxSACKBlocks || o.WS > TCPMaxWindowScale {
			t.Fatalf("parsed %+v out of range", o)
		}
		seg := TCP(data)
		if seg.IsValid() {
			_, _ = seg.Options(), seg.Payload()
		}
	})
}

func FuzzNDPOptions(f *testing.F) {
	b := make([]byte, 128)
	n := EncodeNDPLinkAddrOption(b, NDPOptionSourceLinkAddr, []byte{1, 2, 3, 4, 5, 6})
	n += EncodeNDPPrefixInfoOption(b[n:], netip.MustParsePrefix("2001:db8::/64"), 0xc0, 1, 1)
	n += EncodeNDPRDNSSOption(b[n:], 1, []netip.Addr{netip.MustParseAddr("2001:db8::1")})
	n += EncodeNDPDNSSLOption(b[n:], 1, []string{"a.example"})
	f.Add(b[:n])
	f.Fuzz(func(t *testing.T, data []byte) {
		it := NDPOptionIter{Options: data}
		total := 0
		for typ, body, ok := it.Next(); ok; typ, body, ok = it.Next() {
			total += len(body) + 2
			switch typ {
			case NDPOptionSourceLinkAddr, NDPOptionTargetLinkAddr:
				_, _ = NDPLinkAddr(body)
			case NDPOptionPrefixInfo:
				if p := NDPPrefixInfo(body); p.IsValid() {
					_, _, _ = p.Prefix(), p.ValidLifetime(), p.PreferredLifetime()
				}
			case NDPOptionMTU:
				_, _ = NDPMTU(body)
			case NDPOptionRDNSS:
				_, _, _ = NDPRDNSS(body)
			case NDPOptionDNSSL:
				_, _, _ = NDPDNSSL(body)
			}
		}
		if total > len(data) {
			t.Fatalf("options cover %d bytes of %d", total, len(data))
		}
		for _, v := range []NDPNeighbor{NDPNeighbor(data)} {
			if v.IsValid() {
				_, _ = v.Target(), v.Options()
			}
		}
		if ra := NDPRouterAdvert(data); ra.IsValid() {
			_ = ra.Options()
		}
		_, _ = NDPRouterSolicitOptions(data)
	})
}

func FuzzChecksum(f *testing.F) {
	f.Add([]byte{1, 2, 3}, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, init uint16) {
		if got, want := Checksum(data, init), naiveChecksum(data, init); got != want {
			t.Fatalf("Checksum(%x, %#x) = %#04x, want %#04x", data, init, got, want)
		}
	})
}

func FuzzSmallHeaders(f *testing.F) {
	f.Add([]byte{0, 1, 8, 0, 6, 4, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if e := Ethernet(data); e.IsValid() {
			_, _, _ = e.Dst(), e.Src(), e.Payload()
		}
		if a := ARP(data); a.IsValid() {
			_, _, _, _ = a.SenderMAC(), a.SenderIP(), a.TargetMAC(), a.TargetIP()
		}
		if u := UDP(data); u.IsValid() {
			_ = u.Payload()
		}
		if m := ICMPv4(data); m.IsValid() {
			_, _ = m.Ident(), m.Payload()
		}
		if m := ICMPv6(data); m.IsValid() {
			_, _ = m.MTU(), m.Payload()
		}
		var b [256]byte
		_, _ = EncodeDNSName(b[:], string(data))
		_ = EncodeNDPDNSSLOption(b[:], 1, []string{string(data), "x"})
	})
}

// FuzzEncodeDNSSearchList: what EncodeDNSSearchList writes reads back,
// label by label, as exactly the names that can be encoded, are not the
// root and fit in what is left of the buffer, in order.
func FuzzEncodeDNSSearchList(f *testing.F) {
	f.Add("example.com lab.example.org.", uint16(64))
	f.Add(". a..b x", uint16(8))
	f.Add(strings.Repeat("a", 63)+".b "+strings.Repeat("c", 64), uint16(300))
	f.Fuzz(func(t *testing.T, list string, size uint16) {
		names := strings.Split(list, " ")
		b := make([]byte, int(size)%600)
		n := EncodeDNSSearchList(b, names)
		if n < 0 || n > len(b) {
			t.Fatalf("length %d out of a %d-byte buffer", n, len(b))
		}
		var want []string
		room := len(b)
		for _, name := range names {
			var tmp [300]byte
			if l, ok := EncodeDNSName(tmp[:], name); ok && l > 1 && l <= room {
				want = append(want, strings.TrimSuffix(name, "."))
				room -= l
			}
		}
		var got []string
		for w := b[:n]; len(w) > 0; {
			var labels []string
			size := 0
			for {
				if len(w) == 0 {
					t.Fatalf("name cut short in %q", b[:n])
				}
				l := int(w[0])
				size++
				if l == 0 {
					w = w[1:]
					break
				}
				if l > 63 || l >= len(w) {
					t.Fatalf("label length %d in %q", l, b[:n])
				}
				labels = append(labels, string(w[1:1+l]))
				size += l
				w = w[1+l:]
			}
			if len(labels) == 0 || size > 255 {
				t.Fatalf("name of %d labels, %d bytes in %q", len(labels), size, b[:n])
			}
			got = append(got, strings.Join(labels, "."))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("names %q in %d bytes: got %q, want %q", names, len(b), got, want)
		}
	})
}
