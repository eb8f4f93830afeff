package fwd

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gopasta/gopasta/internal/header"
)

var testClientDUID = []byte{0, 3, 0, 1, 0x02, 0x11, 0x22, 0x33, 0x44, 0x55}

// v6opt encodes one DHCPv6 option.
func v6opt(code uint16, data []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, code)
	b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

func ianaReq(addr string) []byte {
	ia := []byte{0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0}
	if addr != "" {
		a := netip.MustParseAddr(addr).As16()
		ia = append(ia, v6opt(dhcpv6OptIAAddr, append(a[:], 0, 0, 0, 0, 0, 0, 0, 0))...)
	}
	return v6opt(dhcpv6OptIANA, ia)
}

func dhcpv6Frame(msgType uint8, opts ...[]byte) []byte {
	f := make([]byte, 1024)
	m := f[l2l3v6udp:]
	m[0], m[1], m[2], m[3] = msgType, 0xab, 0xcd, 0xef
	n := 4
	for _, o := range opts {
		n += copy(m[n:], o)
	}
	fl := writeUDP6Frame(f, []byte{0x33, 0x33, 0, 1, 0, 2}, testNSMAC, netip.MustParseAddr("fe80::2"),
		netip.MustParseAddr("ff02::1:2"), dhcpv6ClientPort, dhcpv6ServerPort, n)
	return f[:fl]
}

func TestDHCPv6Reply(t *testing.T) {
	p := respParams()
	var duid [10]byte
	serverDUID(p, &duid)
	cid := v6opt(dhcpv6OptClientID, testClientDUID)
	sid := v6opt(dhcpv6OptServerID, duid[:])
	other := v6opt(dhcpv6OptServerID, []byte{0, 3, 0, 1, 1, 2, 3, 4, 5, 6})
	rc := v6opt(dhcpv6OptRapidCommit, nil)
	tests := []struct {
		name     string
		frame    []byte
		wantType uint8 // 0: no reply
		wantAddr bool
		status   int // -1: no status option
	}{
		{"solicit", dhcpv6Frame(dhcpv6Solicit, cid, ianaReq("")), dhcpv6Advertise, true, -1},
		{"solicit rapid commit", dhcpv6Frame(dhcpv6Solicit, cid, rc, ianaReq("")), dhcpv6MsgReply, true, -1},
		{"solicit without client id", dhcpv6Frame(dhcpv6Solicit, ianaReq("")), 0, false, -1},
		{"solicit with server id", dhcpv6Frame(dhcpv6Solicit, cid, sid, ianaReq("")), 0, false, -1},
		{"request", dhcpv6Frame(dhcpv6Request, cid, sid, ianaReq("")), dhcpv6MsgReply, true, -1},
		{"request for another server", dhcpv6Frame(dhcpv6Request, cid, other, ianaReq("")), 0, false, -1},
		{"renew", dhcpv6Frame(dhcpv6Renew, cid, sid, ianaReq("2001:db8:1:2::10")), dhcpv6MsgReply, true, -1},
		{"rebind", dhcpv6Frame(dhcpv6Rebind, cid, ianaReq("2001:db8:1:2::10")), dhcpv6MsgReply, true, -1},
		{"confirm ours", dhcpv6Frame(dhcpv6Confirm, cid, ianaReq("2001:db8:1:2::10")), dhcpv6MsgReply, false, dhcpv6StatusSuccess},
		{"confirm elsewhere", dhcpv6Frame(dhcpv6Confirm, cid, ianaReq("2001:db8:9::1")), dhcpv6MsgReply, false, dhcpv6StatusNotOnLink},
		{"information request", dhcpv6Frame(dhcpv6InfoRequest, cid), dhcpv6MsgReply, false, -1},
		{"release", dhcpv6Frame(dhcpv6Release, cid, sid, ianaReq("2001:db8:1:2::10")), dhcpv6MsgReply, false, dhcpv6StatusSuccess},
		{"truncated option", dhcpv6Frame(dhcpv6Solicit, cid, []byte{0, 3, 0, 40, 0}), 0, false, -1},
		{"advertise from a server", dhcpv6Frame(dhcpv6Advertise, cid, other), 0, false, -1},
	}
	for _, tt := range tests {
		out, n, ok := replyOf(t, tt.name, dhcpv6Reply, p, tt.frame, tt.wantType != 0)
		if !ok {
			continue
		}
		eth := header.Ethernet(out[:n])
		ip := header.IPv6(eth.Payload())
		if !eth.IsValid() || eth.Type() != header.EtherTypeIPv6 || !bytes.Equal(eth.Dst(), testNSMAC) || !ip.IsValid(len(ip)) ||
			ip.NextHeader() != header.ProtocolUDP || ip.Src() != p.OurLL6 || ip.Dst() != netip.MustParseAddr("fe80::2") {
			t.Errorf("%s: bad frame: MAC %x, %v -> %v", tt.name, eth.Dst(), ip.Src(), ip.Dst())
			continue
		}
		u := header.UDP(ip.Payload())
		if !u.IsValid() || u.SrcPort() != 547 || u.DstPort() != 546 ||
			header.Checksum(u, header.PseudoHeaderChecksum(header.ProtocolUDP, ip.SrcSlice(), ip.DstSlice(), uint32(len(u)))) != 0xffff {
			t.Errorf("%s: bad UDP header or checksum", tt.name)
			continue
		}
		m := u.Payload()
		if m[0] != tt.wantType || !bytes.Equal(m[1:4], []byte{0xab, 0xcd, 0xef}) {
			t.Errorf("%s: type %d xid %x, want %d abcdef", tt.name, m[0], m[1:4], tt.wantType)
		}
		var r dhcpv6Info
		opts := map[uint16][]byte{}
		if !parseDHCPv6(m, &r) {
			t.Fatalf("%s: reply does not parse", tt.name)
		}
		for o := m[4:]; len(o) >= 4; {
			l := int(binary.BigEndian.Uint16(o[2:]))
			opts[binary.BigEndian.Uint16(o)] = o[4 : 4+l]
			o = o[4+l:]
		}
		if !bytes.Equal(r.clientID, testClientDUID) || !bytes.Equal(r.serverID, duid[:]) {
			t.Errorf("%s: client id %x server id %x, want %x %x", tt.name, r.clientID, r.serverID, testClientDUID, duid)
		}
		if !bytes.Equal(duid[4:], ourMAC) {
			t.Errorf("server DUID %x does not carry our MAC", duid)
		}
		if _, got := opts[dhcpv6OptRapidCommit]; got != (tt.name == "solicit rapid commit") {
			t.Errorf("%s: rapid commit present=%v", tt.name, got)
		}
		st, hasStatus := opts[dhcpv6OptStatus]
		if (tt.status >= 0) != hasStatus || (hasStatus && int(binary.BigEndian.Uint16(st)) != tt.status) {
			t.Errorf("%s: status %x, want %d", tt.name, st, tt.status)
		}
		if (r.iana != nil) != tt.wantAddr {
			t.Errorf("%s: IA_NA present=%v, want %v", tt.name, r.iana != nil, tt.wantAddr)
		}
		if r.iana != nil {
			ia := r.iana
			want := append([]byte{0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, dhcpv6OptIAAddr, 0, 24}, p.Addr6.AsSlice()...)
			want = append(want, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
			if !bytes.Equal(ia, want) {
				t.Errorf("%s: IA_NA %x, want %x", tt.name, ia, want)
			}
		}
		if tt.status < 0 || tt.name == "confirm ours" {
			if !bytes.Equal(opts[dhcpv6OptDNS], p.DNS6[0].AsSlice()) ||
				string(opts[dhcpv6OptDomainList]) != "\x07example\x03com\x00\x03lab\x07example\x03org\x00" ||
				string(opts[dhcpv6OptFQDN]) != "\x00\x05guest\x07example\x03com\x00" {
				t.Errorf("%s: DNS %x domains %q FQDN %q", tt.name, opts[dhcpv6OptDNS], opts[dhcpv6OptDomainList], opts[dhcpv6OptFQDN])
			}
		}
	}
	no := respParams()
	no.NoDHCPv6 = true
	if n := dhcpv6Reply(no, tests[0].frame, make([]byte, 1514)); n != 0 {
		t.Errorf("NoDHCPv6: got a reply")
	}
}

func FuzzDHCPv6Reply(f *testing.F) {
	f.Add(dhcpv6Frame(dhcpv6Solicit, v6opt(dhcpv6OptClientID, testClientDUID), v6opt(dhcpv6OptRapidCommit, nil), ianaReq("")))
	f.Add(dhcpv6Frame(dhcpv6Confirm, v6opt(dhcpv6OptClientID, testClientDUID), ianaReq("2001:db8::1")))
	fuzzResponder(f, dhcpv6Reply, 600)
}

func BenchmarkDHCPv6Reply(b *testing.B) {
	p, out := respParams(), make([]byte, 1514)
	fr := dhcpv6Frame(dhcpv6Solicit, v6opt(dhcpv6OptClientID, testClientDUID), v6opt(dhcpv6OptRapidCommit, nil), ianaReq(""))
	b.ReportAllocs()
	for b.Loop() {
		if dhcpv6Reply(p, fr, out) == 0 {
			b.Fatal("no reply")
		}
	}
}
