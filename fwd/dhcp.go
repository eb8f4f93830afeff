package fwd

// The DHCPv4 server on the link (RFC 2131): the namespace's address, routes,
// DNS servers, search list and MTU handed to its client.

import (
	"encoding/binary"
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"
)

// BOOTP/DHCP message layout (RFC 2131 section 2): a 236-byte fixed part,
// the magic cookie, then options.
const (
	bootpOp      = 0
	bootpHType   = 1
	bootpHLen    = 2
	bootpXID     = 4
	bootpFlags   = 10
	bootpCiaddr  = 12
	bootpYiaddr  = 16
	bootpSiaddr  = 20
	bootpGiaddr  = 24
	bootpChaddr  = 28
	bootpCookie  = 236
	bootpOptions = 240
	// bootpMinLen is the smallest message old BOOTP relays and clients
	// accept (RFC 1542 section 2.1); replies are padded to it.
	bootpMinLen = 300

	bootpBroadcast = 0x8000

	dhcpServerPort = 67
	dhcpClientPort = 68

	// l2l3v4 is the Ethernet, IPv4 (no options) and UDP header length.
	l2l3v4 = header.EthernetMinimumSize + header.IPv4MinimumSize + header.UDPMinimumSize
)

var (
	dhcpCookie    = [4]byte{99, 130, 83, 99}
	ipv4Broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})
)

// DHCP message types (option 53).
const (
	dhcpDiscover = 1
	dhcpOffer    = 2
	dhcpRequest  = 3
	dhcpDecline  = 4
	dhcpAck      = 5
	dhcpNak      = 6
	dhcpRelease  = 7
	dhcpInform   = 8
)

// DHCP options.
const (
	dhcpOptPad          = 0
	dhcpOptMask         = 1
	dhcpOptRouter       = 3
	dhcpOptDNS          = 6
	dhcpOptHostname     = 12
	dhcpOptMTU          = 26
	dhcpOptRequestedIP  = 50
	dhcpOptLease        = 51
	dhcpOptOverload     = 52
	dhcpOptMsgType      = 53
	dhcpOptServerID     = 54
	dhcpOptRapidCommit  = 80
	dhcpOptFQDN         = 81
	dhcpOptSearch       = 119
	dhcpOptClasslessRts = 121
	dhcpOptEnd          = 255
)

// dhcpRequestInfo is what dhcpReply needs from a client message.
type dhcpRequestInfo struct {
	msgType     uint8
	rapidCommit bool
	requested   netip.Addr // option 50
	serverID    netip.Addr // option 54
}

// parseDHCPOptions walks the options area. Option overload (52) is
// honoured by ignoring the sname and file fields' contents: nothing we need
// is ever put there by real clients. ok is false for a truncated option or
// a missing end option.
func parseDHCPOptions(opts []byte, r *dhcpRequestInfo) bool {
	for len(opts) > 0 {
		code := opts[0]
		if code == dhcpOptPad {
			opts = opts[1:]
			continue
		}
		if code == dhcpOptEnd {
			return true
		}
		if len(opts) < 2 || int(opts[1])+2 > len(opts) {
			return false
		}
		data := opts[2 : 2+int(opts[1])]
		opts = opts[2+len(data):]
		switch code {
		case dhcpOptMsgType:
			if len(data) != 1 {
				return false
			}
			r.msgType = data[0]
		case dhcpOptRapidCommit:
			r.rapidCommit = true
		case dhcpOptRequestedIP:
			if len(data) != 4 {
				return false
			}
			r.requested = netip.AddrFrom4([4]byte(data))
		case dhcpOptServerID:
			if len(data) != 4 {
				return false
			}
			r.serverID = netip.AddrFrom4([4]byte(data))
		}
	}
	// No end option: tolerate it only at the very end of the packet,
	// which some minimal clients produce.
	return true
}

// dhcpReply answers DHCP clients in the namespace: DISCOVER gets an OFFER
// (an ACK straight away with rapid commit), REQUEST an ACK for Addr4 or a
// NAK for anything else, INFORM an ACK with configuration only. RELEASE and
// DECLINE get nothing: the address is the namespace's for good.
func dhcpReply(p *NetParams, frame, out []byte) int {
	if p.NoDHCP || !p.Addr4.Is4() || !p.Gateway4.Is4() {
		return 0
	}
	msg, ok := dhcpMessage(frame)
	if !ok {
		return 0
	}
	var r dhcpRequestInfo
	if !parseDHCPOptions(msg[bootpOptions:], &r) {
		return 0
	}
	if r.serverID.IsValid() && r.serverID != p.Gateway4 {
		return 0 // the client chose another server
	}
	var reply uint8
	yiaddr := p.Addr4
	switch r.msgType {
	case dhcpDiscover:
		reply = dhcpOffer
		if r.rapidCommit {
			reply = dhcpAck
		}
	case dhcpRequest:
		reply = dhcpAck
		asked := r.requested
		if !asked.IsValid() {
			asked = netip.AddrFrom4([4]byte(msg[bootpCiaddr : bootpCiaddr+4]))
		}
		if asked != p.Addr4 {
			reply = dhcpNak
		}
	case dhcpInform:
		reply, yiaddr = dhcpAck, netip.IPv4Unspecified()
	default:
		return 0
	}
	return writeDHCPReply(p, frame, msg, &r, reply, yiaddr, out)
}

// dhcpMessage returns the DHCP message in frame if frame is a BOOTREQUEST
// from an Ethernet client to port 67 with a valid IPv4 header.
func dhcpMessage(frame []byte) ([]byte, bool) {
	eth := header.Ethernet(frame)
	if !eth.IsValid() || eth.Type() != header.EtherTypeIPv4 {
		return nil, false
	}
	ip := header.IPv4(eth.Payload())
	if !ip.IsValid(len(ip)) || ip.Protocol() != header.ProtocolUDP || ip.IsFragment() {
		return nil, false
	}
	u := header.UDP(ip.Payload())
	if !u.IsValid() || u.DstPort() != dhcpServerPort {
		return nil, false
	}
	msg := u.Payload()
	if len(msg) < bootpOptions || msg[bootpOp] != 1 || msg[bootpHType] != 1 || msg[bootpHLen] != 6 ||
		[4]byte(msg[bootpCookie:bootpOptions]) != dhcpCookie {
		return nil, false
	}
	return msg, true
}

// dhcpOptWriter appends options to a buffer, remembering when one did not
// fit so the reply can be dropped rather than sent half-written.
type dhcpOptWriter struct {
	b        []byte
	n        int
	overflow bool
}

func (w *dhcpOptWriter) opt(code uint8, data ...byte) {
	w.raw(code, data)
}

func (w *dhcpOptWriter) raw(code uint8, data []byte) {
	if len(data) > 255 || w.n+2+len(data) > len(w.b) {
		w.overflow = true
		return
	}
	w.b[w.n], w.b[w.n+1] = code, uint8(len(data))
	copy(w.b[w.n+2:], data)
	w.n += 2 + len(data)
}

func (w *dhcpOptWriter) addr(code uint8, a netip.Addr) {
	a4 := a.As4()
	w.raw(code, a4[:])
}

func (w *dhcpOptWriter) u32(code uint8, v uint32) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	w.raw(code, b[:])
}

// long writes data as one option split into 255-byte pieces with the same
// code, which the client concatenates (RFC 3396).
func (w *dhcpOptWriter) long(code uint8, data []byte) {
	for len(data) > 255 {
		w.raw(code, data[:255])
		data = data[255:]
	}
	w.raw(code, data)
}

func writeDHCPReply(p *NetParams, frame, msg []byte, r *dhcpRequestInfo, reply uint8, yiaddr netip.Addr, out []byte) int {
	if len(out) < l2l3v4+bootpMinLen {
		return 0
	}
	maxLen := len(out)
	if p.MTU >= 576 && header.EthernetMinimumSize+p.MTU < maxLen {
		maxLen = header.EthernetMinimumSize + p.MTU
	}
	m := out[l2l3v4:maxLen]

	// Fixed part: everything but op, xid, flags, giaddr and chaddr is
	// ours; the rest of the buffer may hold an old frame, so clear it.
	clear(m[:bootpOptions])
	m[bootpOp], m[bootpHType], m[bootpHLen] = 2, 1, 6
	copy(m[bootpXID:bootpXID+4], msg[bootpXID:])
	copy(m[bootpFlags:bootpFlags+2], msg[bootpFlags:])
	copy(m[bootpGiaddr:bootpGiaddr+4], msg[bootpGiaddr:])
	copy(m[bootpChaddr:bootpChaddr+16], msg[bootpChaddr:])
	if r.msgType == dhcpInform {
		copy(m[bootpCiaddr:bootpCiaddr+4], msg[bootpCiaddr:])
	}
	if reply != dhcpNak {
		y := yiaddr.As4()
		copy(m[bootpYiaddr:], y[:])
	}
	copy(m[bootpCookie:], dhcpCookie[:])

	w := dhcpOptWriter{b: m[bootpOptions : len(m)-1]} // one byte kept for End
	w.opt(dhcpOptMsgType, reply)
	w.addr(dhcpOptServerID, p.Gateway4)
	if reply != dhcpNak {
		writeDHCPConfig(p, &w, r, reply)
	}
	if w.overflow {
		return 0
	}
	w.b[w.n] = dhcpOptEnd
	mlen := bootpOptions + w.n + 1
	if mlen < bootpMinLen {
		clear(m[mlen:bootpMinLen])
		mlen = bootpMinLen
	}

	// Destination (RFC 2131 section 4.1): INFORM replies go to ciaddr;
	// NAKs and clients that asked for it (no address yet) get broadcast;
	// everyone else gets the new address at its MAC.
	dstMAC := header.Ethernet(frame).Src()
	dst := yiaddr
	if r.msgType == dhcpInform {
		dst = netip.AddrFrom4([4]byte(msg[bootpCiaddr : bootpCiaddr+4]))
	}
	if reply == dhcpNak || binary.BigEndian.Uint16(msg[bootpFlags:])&bootpBroadcast != 0 || dst.IsUnspecified() {
		dstMAC, dst = header.EthernetBroadcast[:], ipv4Broadcast
	}
	var mac [6]byte
	copy(mac[:], dstMAC)
	return writeUDP4Frame(out, mac[:], p.OurMAC, p.Gateway4, dst, dhcpServerPort, dhcpClientPort, mlen)
}

// writeDHCPConfig writes the options describing the network: mask,
// router, DNS, names, MTU, lease, search list and classless routes.
func writeDHCPConfig(p *NetParams, w *dhcpOptWriter, r *dhcpRequestInfo, reply uint8) {
	if r.msgType != dhcpInform {
		w.u32(dhcpOptLease, 0xffffffff) // infinite: the address never changes
	}
	if reply == dhcpAck && r.rapidCommit && r.msgType == dhcpDiscover {
		w.opt(dhcpOptRapidCommit)
	}
	prefix := p.Prefix4
	if prefix < 0 || prefix > 32 {
		prefix = 32
	}
	mask := ^uint32(0) << (32 - prefix)
	if prefix == 0 {
		mask = 0
	}
	w.u32(dhcpOptMask, mask)
	subnet, _ := p.Addr4.Prefix(prefix)
	onLink := subnet.Contains(p.Gateway4)
	if onLink {
		w.addr(dhcpOptRouter, p.Gateway4)
	} else {
		// A gateway outside the subnet needs a host route to it first;
		// clients that know option 121 ignore option 3 (RFC 3442).
		var rt [5 + 5 + 4]byte
		rt[0] = 32
		g := p.Gateway4.As4()
		copy(rt[1:5], g[:]) // gateway/32 via 0.0.0.0: on the link
		// rt[5:9] is the router 0.0.0.0; then 0/0 via the gateway.
		rt[9] = 0
		copy(rt[10:14], g[:])
		w.raw(dhcpOptClasslessRts, rt[:])
		w.addr(dhcpOptRouter, p.Gateway4)
	}
	var buf [255]byte
	if n := 0; len(p.DNS4) > 0 {
		for _, d := range p.DNS4 {
			if d.Is4() && n+4 <= len(buf) {
				a := d.As4()
				n += copy(buf[n:], a[:])
			}
		}
		if n > 0 {
			w.raw(dhcpOptDNS, buf[:n])
		}
	}
	if h := p.Hostname; h != "" && len(h) <= 255 {
		n := copy(buf[:], h)
		w.raw(dhcpOptHostname, buf[:n])
	}
	if p.MTU >= 68 && p.MTU <= 65535 {
		var b [2]byte
		binary.BigEndian.PutUint16(b[:], uint16(p.MTU))
		w.raw(dhcpOptMTU, b[:])
	}
	if p.FQDN != "" {
		// RFC 4702: flags E (wire-format name) and rcodes of 255.
		buf[0], buf[1], buf[2] = 0x04, 255, 255
		if n, ok := header.EncodeDNSName(buf[3:], p.FQDN); ok {
			w.raw(dhcpOptFQDN, buf[:3+n])
		}
	}
	if len(p.Search) > 0 {
		var sb [1024]byte
		if n := header.EncodeDNSSearchList(sb[:], p.Search); n > 0 {
			w.long(dhcpOptSearch, sb[:n])
		}
	}
}

// writeUDP4Frame writes Ethernet, IPv4 and UDP headers in front of the
// plen-byte payload already at out[l2l3v4:], with checksums, and returns
// the frame length.
func writeUDP4Frame(out []byte, dstMAC, srcMAC []byte, src, dst netip.Addr, sport, dport uint16, plen int) int {
	header.Ethernet(out).Encode(dstMAC, srcMAC, header.EtherTypeIPv4)
	ip := header.IPv4(out[header.EthernetMinimumSize:])
	ulen := header.UDPMinimumSize + plen
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(header.IPv4MinimumSize + ulen), TTL: 64, Protocol: header.ProtocolUDP,
		Flags: header.IPv4FlagDontFragment, Src: src, Dst: dst,
	})
	u := header.UDP(out[header.EthernetMinimumSize+header.IPv4MinimumSize : l2l3v4+plen])
	u.Encode(sport, dport, uint16(ulen))
	u.SetChecksum(u.CalculateChecksum(header.PseudoHeaderChecksum(header.ProtocolUDP, ip.SrcSlice(), ip.DstSlice(), uint32(ulen))))
	return l2l3v4 + plen
}
