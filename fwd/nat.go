package fwd

// pasta's address mapping between the namespace and the host: --map-host-
// loopback, --no-map-gw, --map-guest-addr and --dns-forward.

import "net/netip"

// NAT holds pasta's address mapping rules (pasta(1): --map-host-loopback,
// --no-map-gw, --map-guest-addr, --dns-forward). An invalid (zero) address disables a rule.
type NAT struct {
	// MapHostLoopback: namespace traffic to this address goes to the
	// host's 127.0.0.1 / ::1, and host loopback sources appear as it.
	// Defaults to the gateway unless --no-map-gw.
	MapHostLoopback4, MapHostLoopback6 netip.Addr
	// MapGuestAddr: namespace traffic to this address goes to GuestAddr
	// on the host, the address the namespace copied (and so shadows).
	MapGuestAddr4, MapGuestAddr6 netip.Addr
	GuestAddr4, GuestAddr6       netip.Addr
	// DNSMatch (--dns-forward): DNS (DNSPort) to it goes to DNSHost
	// (--dns-host, default the first resolver of /etc/resolv.conf).
	DNSMatch4, DNSMatch6 netip.Addr
	DNSHost4, DNSHost6   netip.Addr
}

var (
	loop4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	loop6 = netip.IPv6Loopback()
)

func same(a, rule netip.Addr) bool { return rule.IsValid() && a == rule }

// DNSPort reports whether a TCP or UDP destination port is DNS's, as
// --dns-forward redirects it: 53, and 853 for DNS over TLS (RFC 7858) and
// over DTLS or QUIC (RFC 8094, RFC 9250), so that a resolver the namespace
// is told to use answers the encrypted protocols at the same address.
func DNSPort(port uint16) bool { return port == 53 || port == 853 }

// FromTap maps the destination of a flow the namespace opened to the address
// the host socket connects to. The rules are tried in pasta's order: DNS
// forwarding first (it may share the gateway address), then host loopback,
// then the guest address. Everything else is left alone.
func (n *NAT) FromTap(dst netip.Addr, dport uint16, dnsProto bool) netip.Addr {
	if dnsProto && DNSPort(dport) {
		if same(dst, n.DNSMatch4) && n.DNSHost4.IsValid() {
			return n.DNSHost4
		}
		if same(dst, n.DNSMatch6) && n.DNSHost6.IsValid() {
			return n.DNSHost6
		}
	}
	switch {
	case same(dst, n.MapHostLoopback4):
		return loop4
	case same(dst, n.MapHostLoopback6):
		return loop6
	case same(dst, n.MapGuestAddr4) && n.GuestAddr4.IsValid():
		return n.GuestAddr4
	case same(dst, n.MapGuestAddr6) && n.GuestAddr6.IsValid():
		return n.GuestAddr6
	}
	return dst
}

// FromHost maps a host-side source address (of a connection or datagram
// that enters the namespace, or of an ICMP error's offender) to what the
// namespace sees. ok is false when no rule gives the namespace an address it
// can reach back: loopback without a host-loopback mapping, unspecified,
// multicast, or the guest's own address without --map-guest-addr. Callers
// then substitute the flow's own namespace-side address, or drop.
func (n *NAT) FromHost(src netip.Addr) (netip.Addr, bool) {
	src = src.Unmap()
	switch {
	case src == loop4 && n.MapHostLoopback4.IsValid():
		// Only 127.0.0.1, not 127.0.0.0/8, as pasta.
		return n.MapHostLoopback4, true
	case src == loop6 && n.MapHostLoopback6.IsValid():
		return n.MapHostLoopback6, true
	case same(src, n.GuestAddr4) && n.MapGuestAddr4.IsValid():
		return n.MapGuestAddr4, true
	case same(src, n.GuestAddr6) && n.MapGuestAddr6.IsValid():
		return n.MapGuestAddr6, true
	case !src.IsValid() || src.IsUnspecified() || src.IsLoopback() || src.IsMulticast() ||
		same(src, n.GuestAddr4) || same(src, n.GuestAddr6):
		return netip.Addr{}, false
	}
	return src, true
}

// NewNAT derives the rules from the options the way pasta's defaults work:
// host loopback is reached through the gateway unless --no-map-gw, an
// explicit --map-host-loopback wins over both.
// The engine applies it; the DNS plan asks it which address leads to host
// loopback, so that the rule has one home.
func NewNAT(p *NetParams, o *Options) NAT {
	n := NAT{
		MapHostLoopback4: o.MapHostLoopback4, MapHostLoopback6: o.MapHostLoopback6,
		MapGuestAddr4: o.MapGuestAddr4, MapGuestAddr6: o.MapGuestAddr6,
		GuestAddr4: p.Addr4, GuestAddr6: p.Addr6,
		DNSMatch4: o.DNSForward4, DNSMatch6: o.DNSForward6,
		DNSHost4: o.DNSHost4, DNSHost6: o.DNSHost6,
	}
	if !o.NoMapGW {
		if !n.MapHostLoopback4.IsValid() {
			n.MapHostLoopback4 = p.Gateway4
		}
		if !n.MapHostLoopback6.IsValid() {
			n.MapHostLoopback6 = p.Gateway6
		}
	}
	return n
}
