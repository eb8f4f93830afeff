package fwd

// The DHCPv6 server on the link (RFC 8415): the namespace's address as an
// IA_NA, DNS servers, the domain list and the FQDN.

import (
	"encoding/binary"
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"
)

// DHCPv6 (RFC 8415): a message is a type byte, a 3-byte transaction id and
// options of code(2) length(2) data.
const (
	dhcpv6ClientPort = 546
	dhcpv6ServerPort = 547

	dhcpv6Solicit     = 1
	dhcpv6Advertise   = 2
	dhcpv6Request     = 3
	dhcpv6Confirm     = 4
	dhcpv6Renew       = 5
	dhcpv6Rebind      = 6
	dhcpv6MsgReply    = 7
	dhcpv6Release     = 8
	dhcpv6Decline     = 9
	dhcpv6InfoRequest = 11

	dhcpv6OptClientID    = 1
	dhcpv6OptServerID    = 2
	dhcpv6OptIANA        = 3
	dhcpv6OptIAAddr      = 5
	dhcpv6OptStatus      = 13
	dhcpv6OptRapidCommit = 14
	dhcpv6OptDNS         = 23
	dhcpv6OptDomainList  = 24
	dhcpv6OptFQDN        = 39

	dhcpv6StatusSuccess   = 0
	dhcpv6StatusNotOnLink = 4

	// l2l3v6udp is the Ethernet, IPv6 and UDP header length.
	l2l3v6udp = l2l3v6 + header.UDPMinimumSize
)

// dhcpv6Info is what dhcpv6Reply needs from a client message.
type dhcpv6Info struct {
	msgType     uint8
	clientID    []byte // option data, aliasing the request
	serverID    []byte
	iana        []byte // the first IA_NA's data
	rapidCommit bool
}

// parseDHCPv6 splits a client message; ok is false for truncated options.
func parseDHCPv6(msg []byte, r *dhcpv6Info) bool {
	if len(msg) < 4 {
		return false
	}
	r.msgType = msg[0]
	for opts := msg[4:]; len(opts) > 0; {
		if len(opts) < 4 {
			return false
		}
		code, l := binary.BigEndian.Uint16(opts), int(binary.BigEndian.Uint16(opts[2:]))
		if 4+l > len(opts) {
			return false
		}
		data := opts[4 : 4+l]
		opts = opts[4+l:]
		switch code {
		case dhcpv6OptClientID:
			r.clientID = data
		case dhcpv6OptServerID:
			r.serverID = data
		case dhcpv6OptIANA:
			if len(data) < 12 {
				return false
			}
			if r.iana == nil {
				r.iana = data
			}
		case dhcpv6OptRapidCommit:
			r.rapidCommit = true
		}
	}
	return true
}

// dhcpv6Reply answers DHCPv6 clients with Addr6 as a /128 in an IA_NA with
// infinite lifetimes, plus DNS servers, the domain list and the FQDN.
func dhcpv6Reply(p *NetParams, frame, out []byte) int {
	if p.NoDHCPv6 || !p.OurLL6.Is6() || len(p.OurMAC) != 6 {
		return 0
	}
	ip, msg, ok := dhcpv6Message(frame)
	if !ok {
		return 0
	}
	var r dhcpv6Info
	if !parseDHCPv6(msg, &r) {
		return 0
	}
	var duid [10]byte
	serverDUID(p, &duid)
	ours := r.serverID != nil && string(r.serverID) == string(duid[:])
	if r.serverID != nil && !ours {
		return 0 // meant for another server
	}
	reply := uint8(dhcpv6MsgReply)
	giveAddr, status := false, -1
	switch r.msgType {
	case dhcpv6Solicit:
		if r.clientID == nil || r.serverID != nil {
			return 0
		}
		reply = dhcpv6Advertise
		if r.rapidCommit {
			reply = dhcpv6MsgReply
		}
		giveAddr = true
	case dhcpv6Request, dhcpv6Renew:
		if !ours || r.clientID == nil {
			return 0
		}
		giveAddr = true
	case dhcpv6Rebind:
		if r.clientID == nil {
			return 0
		}
		giveAddr = true
	case dhcpv6Confirm:
		if r.clientID == nil {
			return 0
		}
		status = dhcpv6StatusSuccess
		if !confirmOnLink(p, r.iana) {
			status = dhcpv6StatusNotOnLink
		}
	case dhcpv6Release, dhcpv6Decline:
		if !ours || r.clientID == nil {
			return 0
		}
		status = dhcpv6StatusSuccess
	case dhcpv6InfoRequest:
	default:
		return 0
	}
	if giveAddr && (r.iana == nil || !p.Addr6.Is6()) {
		giveAddr = false // nothing to assign, configuration only
	}

	if len(out) < l2l3v6udp+512 {
		return 0
	}
	m := out[l2l3v6udp:]
	m[0] = reply
	copy(m[1:4], msg[1:4])
	w := dhcpv6Writer{b: m, n: 4}
	if r.clientID != nil {
		w.opt(dhcpv6OptClientID, r.clientID)
	}
	w.opt(dhcpv6OptServerID, duid[:])
	if reply == dhcpv6MsgReply && r.msgType == dhcpv6Solicit {
		w.opt(dhcpv6OptRapidCommit, nil)
	}
	if status >= 0 {
		var s [2]byte
		binary.BigEndian.PutUint16(s[:], uint16(status))
		w.opt(dhcpv6OptStatus, s[:])
	}
	if giveAddr {
		// IA_NA: the client's IAID, T1 = T2 = infinity (never renew),
		// then one IA Address option.
		var ia [12 + 4 + 24]byte
		copy(ia[0:4], r.iana[0:4])
		binary.BigEndian.PutUint32(ia[4:], 0xffffffff)
		binary.BigEndian.PutUint32(ia[8:], 0xffffffff)
		binary.BigEndian.PutUint16(ia[12:], dhcpv6OptIAAddr)
		binary.BigEndian.PutUint16(ia[14:], 24)
		a := p.Addr6.As16()
		copy(ia[16:32], a[:])
		binary.BigEndian.PutUint32(ia[32:], 0xffffffff)
		binary.BigEndian.PutUint32(ia[36:], 0xffffffff)
		w.opt(dhcpv6OptIANA, ia[:])
	}
	if status < 0 || r.msgType == dhcpv6Confirm {
		writeDHCPv6Config(p, &w)
	}
	if w.overflow {
		return 0
	}
	var mac [6]byte
	copy(mac[:], header.Ethernet(frame).Src())
	return writeUDP6Frame(out, mac[:], p.OurMAC, p.OurLL6, ip.Src(), dhcpv6ServerPort, dhcpv6ClientPort, w.n)
}

// confirmOnLink reports whether every address in a CONFIRM's IA_NA is ours.
func confirmOnLink(p *NetParams, iana []byte) bool {
	if len(iana) < 12 {
		return true
	}
	for opts := iana[12:]; len(opts) >= 4; {
		code, l := binary.BigEndian.Uint16(opts), int(binary.BigEndian.Uint16(opts[2:]))
		if 4+l > len(opts) {
			return false
		}
		if code == dhcpv6OptIAAddr && l >= 16 && netip.AddrFrom16([16]byte(opts[4:20])) != p.Addr6 {
			return false
		}
		opts = opts[4+l:]
	}
	return true
}

// serverDUID writes our DUID-LL (RFC 8415 section 11.4): type 3, hardware
// type 1 (Ethernet), our MAC address.
func serverDUID(p *NetParams, d *[10]byte) {
	d[0], d[1], d[2], d[3] = 0, 3, 0, 1
	copy(d[4:], p.OurMAC)
}

func writeDHCPv6Config(p *NetParams, w *dhcpv6Writer) {
	if len(p.DNS6) > 0 {
		var b [16 * 16]byte
		n := 0
		for _, d := range p.DNS6 {
			if d.Is6() && !d.Is4In6() && n+16 <= len(b) {
				a := d.As16()
				n += copy(b[n:], a[:])
			}
		}
		if n > 0 {
			w.opt(dhcpv6OptDNS, b[:n])
		}
	}
	var b [1024]byte
	if len(p.Search) > 0 {
		if n := header.EncodeDNSSearchList(b[:], p.Search); n > 0 {
			w.opt(dhcpv6OptDomainList, b[:n])
		}
	}
	if p.FQDN != "" {
		b[0] = 0 // flags: the client updates its own records, if anyone
		if n, ok := header.EncodeDNSName(b[1:], p.FQDN); ok {
			w.opt(dhcpv6OptFQDN, b[:1+n])
		}
	}
}

// dhcpv6Writer appends options, noting when one did not fit.
type dhcpv6Writer struct {
	b        []byte
	n        int
	overflow bool
}

func (w *dhcpv6Writer) opt(code uint16, data []byte) {
	if len(data) > 0xffff || w.n+4+len(data) > len(w.b) {
		w.overflow = true
		return
	}
	binary.BigEndian.PutUint16(w.b[w.n:], code)
	binary.BigEndian.PutUint16(w.b[w.n+2:], uint16(len(data)))
	copy(w.b[w.n+4:], data)
	w.n += 4 + len(data)
}

// dhcpv6Message returns the IPv6 header and the DHCPv6 message of a frame
// sent to port 547 with a valid UDP checksum.
func dhcpv6Message(frame []byte) (header.IPv6, []byte, bool) {
	ip, l4, ok := ipv6Payload(frame, header.ProtocolUDP)
	if !ok {
		return nil, nil, false
	}
	u := header.UDP(l4)
	if !u.IsValid() || u.DstPort() != dhcpv6ServerPort {
		return nil, nil, false
	}
	u = u[:u.Length()]
	pseudo := header.PseudoHeaderChecksum(header.ProtocolUDP, ip.SrcSlice(), ip.DstSlice(), uint32(len(u)))
	if header.Checksum(u, pseudo) != 0xffff {
		return nil, nil, false
	}
	return ip, u.Payload(), true
}

// writeUDP6Frame writes Ethernet, IPv6 and UDP headers in front of the
// plen-byte payload at out[l2l3v6udp:] and returns the frame length.
func writeUDP6Frame(out []byte, dstMAC, srcMAC []byte, src, dst netip.Addr, sport, dport uint16, plen int) int {
	ulen := header.UDPMinimumSize + plen
	writeIPv6Frame(out, dstMAC, srcMAC, src, dst, header.ProtocolUDP, ulen)
	ip := header.IPv6(out[header.EthernetMinimumSize:])
	u := header.UDP(out[l2l3v6 : l2l3v6+ulen])
	u.Encode(sport, dport, uint16(ulen))
	u.SetChecksum(u.CalculateChecksum(header.PseudoHeaderChecksum(header.ProtocolUDP, ip.SrcSlice(), ip.DstSlice(), uint32(ulen))))
	return l2l3v6 + ulen
}
