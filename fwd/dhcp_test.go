package fwd

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gopasta/gopasta/internal/header"
)

// dhcpFrame builds a client message as udhcpc sends it: from 0.0.0.0:68
// to 255.255.255.255:67, with the given options (End appended).
func dhcpFrame(ciaddr string, flags uint16, opts ...byte) []byte {
	f := make([]byte, 1024)
	m := f[l2l3v4:]
	m[bootpOp], m[bootpHType], m[bootpHLen] = 1, 1, 6
	copy(m[bootpXID:], []byte{0xde, 0xad, 0xbe, 0xef})
	binary.BigEndian.PutUint16(m[bootpFlags:], flags)
	copy(m[bootpCiaddr:], netip.MustParseAddr(ciaddr).AsSlice())
	copy(m[bootpChaddr:], testNSMAC)
	copy(m[bootpCookie:], dhcpCookie[:])
	n := bootpOptions + copy(m[bootpOptions:], opts)
	m[n] = dhcpOptEnd
	n++
	fl := writeUDP4Frame(f, header.EthernetBroadcast[:], testNSMAC, netip.MustParseAddr("0.0.0.0"), ipv4Broadcast, dhcpClientPort, dhcpServerPort, n)
	return f[:fl]
}

// dhcpReplyOptions parses a reply frame fully and returns the DHCP message
// and its options by code.
func dhcpReplyOptions(t *testing.T, name string, fr []byte) ([]byte, map[uint8][]byte) {
	t.Helper()
	eth := header.Ethernet(fr)
	ip := header.IPv4(eth.Payload())
	if !eth.IsValid() || eth.Type() != header.EtherTypeIPv4 || !ip.IsValid(len(ip)) || !ip.IsChecksumValid() || ip.Protocol() != header.ProtocolUDP {
		t.Fatalf("%s: not a valid IPv4/UDP frame", name)
	}
	u := header.UDP(ip.Payload())
	if !u.IsValid() || u.SrcPort() != 67 || u.DstPort() != 68 ||
		header.Checksum(u, header.PseudoHeaderChecksum(header.ProtocolUDP, ip.SrcSlice(), ip.DstSlice(), uint32(len(u)))) != 0xffff {
		t.Fatalf("%s: bad UDP header or checksum: ports %d -> %d", name, u.SrcPort(), u.DstPort())
	}
	m := u.Payload()
	if len(m) < bootpMinLen || m[bootpOp] != 2 || [4]byte(m[bootpCookie:]) != dhcpCookie {
		t.Fatalf("%s: bad BOOTREPLY: length %d op %d", name, len(m), m[bootpOp])
	}
	opts := map[uint8][]byte{}
	for o := m[bootpOptions:]; len(o) > 0 && o[0] != dhcpOptEnd; {
		if o[0] == dhcpOptPad {
			o = o[1:]
			continue
		}
		if len(o) < 2 || len(o) < 2+int(o[1]) {
			t.Fatalf("%s: truncated option %d", name, o[0])
		}
		opts[o[0]] = append(opts[o[0]], o[2:2+int(o[1])]...)
		o = o[2+int(o[1]):]
	}
	return m, opts
}

func TestDHCPReply(t *testing.T) {
	p := respParams()
	gw := p.Gateway4.AsSlice()
	tests := []struct {
		name      string
		frame     []byte
		wantType  uint8 // 0: no reply
		wantDst   string
		broadcast bool
	}{
		{"discover", dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpDiscover), dhcpOffer, "192.0.2.10", false},
		{"discover broadcast flag", dhcpFrame("0.0.0.0", bootpBroadcast, dhcpOptMsgType, 1, dhcpDiscover), dhcpOffer, "255.255.255.255", true},
		{"discover rapid commit", dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpDiscover, dhcpOptRapidCommit, 0), dhcpAck, "192.0.2.10", false},
		{"request", dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpRequest, dhcpOptRequestedIP, 4, 192, 0, 2, 10,
			dhcpOptServerID, 4, gw[0], gw[1], gw[2], gw[3]), dhcpAck, "192.0.2.10", false},
		{"renew by ciaddr", dhcpFrame("192.0.2.10", 0, dhcpOptMsgType, 1, dhcpRequest), dhcpAck, "192.0.2.10", false},
		{"request wrong address", dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpRequest, dhcpOptRequestedIP, 4, 192, 0, 2, 99), dhcpNak, "255.255.255.255", true},
		{"request other server", dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpRequest, dhcpOptServerID, 4, 10, 0, 0, 1), 0, "", false},
		{"inform", dhcpFrame("192.0.2.10", 0, dhcpOptMsgType, 1, dhcpInform), dhcpAck, "192.0.2.10", false},
		{"release", dhcpFrame("192.0.2.10", 0, dhcpOptMsgType, 1, dhcpRelease), 0, "", false},
		{"decline", dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpDecline), 0, "", false},
		{"no message type", dhcpFrame("0.0.0.0", 0), 0, "", false},
		{"option overflow", dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpDiscover, 12, 200, 'x'), 0, "", false},
		{"bad type length", dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 2, dhcpDiscover, 0), 0, "", false},
	}
	for _, tt := range tests {
		out, n, ok := replyOf(t, tt.name, dhcpReply, p, tt.frame, tt.wantType != 0)
		if !ok {
			continue
		}
		m, opts := dhcpReplyOptions(t, tt.name, out[:n])
		eth := header.Ethernet(out[:n])
		ip := header.IPv4(eth.Payload())
		wantMAC := testNSMAC
		if tt.broadcast {
			wantMAC = header.EthernetBroadcast[:]
		}
		if ip.Src() != p.Gateway4 || ip.Dst() != netip.MustParseAddr(tt.wantDst) || !bytes.Equal(eth.Dst(), wantMAC) || !bytes.Equal(eth.Src(), ourMAC) {
			t.Errorf("%s: got %v -> %v (MAC %x), want %v -> %s (MAC %x)", tt.name, ip.Src(), ip.Dst(), eth.Dst(), p.Gateway4, tt.wantDst, wantMAC)
		}
		if got := opts[dhcpOptMsgType]; len(got) != 1 || got[0] != tt.wantType {
			t.Errorf("%s: message type %v, want %d", tt.name, got, tt.wantType)
		}
		if !bytes.Equal(opts[dhcpOptServerID], gw) || !bytes.Equal(m[bootpXID:bootpXID+4], []byte{0xde, 0xad, 0xbe, 0xef}) ||
			!bytes.Equal(m[bootpChaddr:bootpChaddr+6], testNSMAC) {
			t.Errorf("%s: server id %v xid %x chaddr %x", tt.name, opts[dhcpOptServerID], m[bootpXID:bootpXID+4], m[bootpChaddr:bootpChaddr+6])
		}
		if tt.wantType == dhcpNak {
			continue
		}
		wantY := []byte{192, 0, 2, 10}
		if tt.name == "inform" {
			wantY = []byte{0, 0, 0, 0}
			if opts[dhcpOptLease] != nil {
				t.Errorf("inform: got a lease time")
			}
		} else if !bytes.Equal(opts[dhcpOptLease], []byte{0xff, 0xff, 0xff, 0xff}) {
			t.Errorf("%s: lease %x, want infinite", tt.name, opts[dhcpOptLease])
		}
		if !bytes.Equal(m[bootpYiaddr:bootpYiaddr+4], wantY) {
			t.Errorf("%s: yiaddr %v, want %v", tt.name, m[bootpYiaddr:bootpYiaddr+4], wantY)
		}
		want := map[uint8][]byte{
			dhcpOptMask:     {255, 255, 255, 0},
			dhcpOptRouter:   gw,
			dhcpOptDNS:      {192, 0, 2, 53, 198, 51, 100, 53},
			dhcpOptHostname: []byte("guest"),
			dhcpOptMTU:      {0x05, 0xdc},
			dhcpOptFQDN:     []byte("\x04\xff\xff\x05guest\x07example\x03com\x00"),
			dhcpOptSearch:   []byte("\x07example\x03com\x00\x03lab\x07example\x03org\x00"),
		}
		for code, w := range want {
			if !bytes.Equal(opts[code], w) {
				t.Errorf("%s: option %d = %x, want %x", tt.name, code, opts[code], w)
			}
		}
		if _, rc := opts[dhcpOptRapidCommit]; rc != (tt.name == "discover rapid commit") {
			t.Errorf("%s: rapid commit option present=%v", tt.name, rc)
		}
		if opts[dhcpOptClasslessRts] != nil {
			t.Errorf("%s: classless routes with an on-link gateway", tt.name)
		}
	}
}

func TestDHCPOffLinkGateway(t *testing.T) {
	p := respParams()
	p.Prefix4 = 32
	p.Gateway4 = netip.MustParseAddr("203.0.113.1")
	p.Search = nil
	for i := 0; i < 40; i++ { // a search list longer than one option
		p.Search = append(p.Search, "domain"+string(rune('a'+i%26))+".example")
	}
	out := make([]byte, 65535)
	n := dhcpReply(p, dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpDiscover), out)
	if n == 0 {
		t.Fatalf("no reply")
	}
	_, opts := dhcpReplyOptions(t, "off-link", out[:n])
	want := []byte{32, 203, 0, 113, 1, 0, 0, 0, 0, 0, 203, 0, 113, 1}
	if !bytes.Equal(opts[dhcpOptClasslessRts], want) {
		t.Errorf("classless routes %v, want %v", opts[dhcpOptClasslessRts], want)
	}
	if !bytes.Equal(opts[dhcpOptMask], []byte{255, 255, 255, 255}) {
		t.Errorf("mask %v, want /32", opts[dhcpOptMask])
	}
	if got := len(opts[dhcpOptSearch]); got != 40*(1+7+1+7+1) {
		t.Errorf("concatenated search list length %d, want %d", got, 40*17)
	}
}

func FuzzDHCPReply(f *testing.F) {
	f.Add(dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpDiscover, dhcpOptRapidCommit, 0))
	f.Add(dhcpFrame("192.0.2.10", 0, dhcpOptMsgType, 1, dhcpInform))
	fuzzResponder(f, dhcpReply, 400)
}

func BenchmarkDHCPReply(b *testing.B) {
	p, out := respParams(), make([]byte, 1514)
	fr := dhcpFrame("0.0.0.0", 0, dhcpOptMsgType, 1, dhcpDiscover)
	b.ReportAllocs()
	for b.Loop() {
		if dhcpReply(p, fr, out) == 0 {
			b.Fatal("no reply")
		}
	}
}
