package ns

// Routes as gopasta copies them between namespaces, and their rtnetlink
// messages.

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A Route is a main-table unicast route as read from, or written to, a
// network namespace. It keeps what is needed to re-create the route through
// another interface and nothing that only makes sense on the host (table,
// expiry, cache flags).
type Route struct {
	Dst netip.Prefix
	// Gateway is invalid for a direct (on-link) route; it may be of the
	// other family (an IPv4 route via an IPv6 router, RTA_VIA).
	Gateway netip.Addr
	Src     netip.Addr // preferred source (RTA_PREFSRC), if any
	Metric  uint32     // RTA_PRIORITY
	MTU     uint32     // RTAX_MTU, 0 if none
	AdvMSS  uint32     // RTAX_ADVMSS, 0 if none
	// Ifindex is the output interface in the namespace the route was read
	// from; ConfigureInterface replaces it.
	Ifindex  int
	Protocol uint8  // RTPROT_*
	Scope    uint8  // RT_SCOPE_*
	Type     uint8  // RTN_*; only RTN_UNICAST is ever copied
	Flags    uint32 // rtm_flags; only RTNH_F_ONLINK survives a copy
}

// IsDefault reports whether r is a default route.
func (r Route) IsDefault() bool { return r.Dst.IsValid() && r.Dst.Bits() == 0 }

// String formats r roughly the way ip-route(8) does, for logs and errors.
func (r Route) String() string {
	s := r.Dst.String()
	if r.IsDefault() {
		s = "default"
	}
	if r.Gateway.IsValid() {
		s += " via " + r.Gateway.String()
	}
	s += fmt.Sprintf(" oif %d", r.Ifindex)
	if r.Metric != 0 {
		s += fmt.Sprintf(" metric %d", r.Metric)
	}
	return s
}

// dialRoute opens an rtnetlink socket. With NetNS left at 0 the socket is
// created in the calling thread's network namespace, which is the whole
// contract of this package: callers lock their goroutine to a thread that
// is already in the namespace they mean.
func dialRoute() (*rtnetlink.Conn, error) {
	c, err := rtnetlink.Dial(&netlink.Config{})
	if err != nil {
		return nil, fmt.Errorf("ns: open rtnetlink socket: %w", err)
	}
	return c, nil
}

// addrFromIP converts a netlink address to netip, folding IPv4-in-IPv6
// forms so that an AF_INET address never compares as IPv6.
func addrFromIP(ip net.IP, family uint8) (netip.Addr, bool) {
	switch family {
	case unix.AF_INET:
		ip = ip.To4()
	case unix.AF_INET6:
		if len(ip) != net.IPv6len {
			return netip.Addr{}, false
		}
	default:
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, false
	}
	return a, true
}

// isLinkLocalPrefix reports whether every address of p is link-local, the
// destinations pasta never copies (fe80::/64 and friends are the kernel's
// own business on every interface).
func isLinkLocalPrefix(p netip.Prefix) bool {
	a := p.Addr()
	if a.Is4() {
		return p.Bits() >= 16 && a.IsLinkLocalUnicast()
	}
	return p.Bits() >= 10 && a.IsLinkLocalUnicast()
}

// routeTable returns the table a dumped route belongs to; tables above 255
// only travel in RTA_TABLE.
func routeTable(m *rtnetlink.RouteMessage) uint32 {
	if m.Attributes.Table != 0 {
		return m.Attributes.Table
	}
	return uint32(m.Table)
}

// routeHops flattens m into (ifindex, gateway) next hops: the plain OIF and
// gateway, or each RTA_MULTIPATH entry in order.
func routeHops(m *rtnetlink.RouteMessage) []hop {
	if len(m.Attributes.Multipath) == 0 {
		gw := nextHopAddr(m.Attributes.Gateway, m.Attributes.Via, m.Family)
		return []hop{{ifindex: int(m.Attributes.OutIface), gw: gw, flags: m.Flags}}
	}
	hops := make([]hop, 0, len(m.Attributes.Multipath))
	for _, nh := range m.Attributes.Multipath {
		gw := nextHopAddr(nh.Gateway, nh.Via, m.Family)
		hops = append(hops, hop{ifindex: int(nh.Hop.IfIndex), gw: gw, flags: uint32(nh.Hop.Flags)})
	}
	return hops
}

// nextHopAddr reads RTA_GATEWAY, or RTA_VIA for a next hop of the other
// family (an IPv4 route via an IPv6 router, RFC 5549, Linux 5.2).
func nextHopAddr(gw net.IP, via *rtnetlink.RouteVia, family uint8) netip.Addr {
	if a, ok := addrFromIP(gw, family); ok {
		return a
	}
	if via != nil && via.Family <= 0xff {
		a, _ := addrFromIP(via.Addr, uint8(via.Family))
		return a
	}
	return netip.Addr{}
}

type hop struct {
	ifindex int
	gw      netip.Addr
	flags   uint32
}

// routeFromMessage builds a Route for m as seen through next hop h, or
// reports false when m has no usable destination.
func routeFromMessage(m *rtnetlink.RouteMessage, h hop) (Route, bool) {
	var dst netip.Prefix
	if m.DstLength == 0 {
		if m.Family == unix.AF_INET {
			dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		} else {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
	} else {
		a, ok := addrFromIP(m.Attributes.Dst, m.Family)
		if !ok {
			return Route{}, false
		}
		p, err := a.Prefix(int(m.DstLength))
		if err != nil {
			return Route{}, false
		}
		dst = p
	}
	r := Route{
		Dst:      dst,
		Gateway:  h.gw,
		Metric:   m.Attributes.Priority,
		Ifindex:  h.ifindex,
		Protocol: m.Protocol,
		Scope:    m.Scope,
		Type:     m.Type,
		Flags:    m.Flags | h.flags,
	}
	if src, ok := addrFromIP(m.Attributes.Src, m.Family); ok {
		r.Src = src
	}
	if mt := m.Attributes.Metrics; mt != nil {
		r.MTU = mt.MTU
		r.AdvMSS = mt.AdvMSS
	}
	return r, true
}

// routeMessage turns r into an RTM_NEWROUTE request for the main table
// through ifindex.
func routeMessage(r Route, ifindex int) *rtnetlink.RouteMessage {
	family := uint8(unix.AF_INET6)
	if r.Dst.Addr().Is4() {
		family = unix.AF_INET
	}
	proto := r.Protocol
	if proto == unix.RTPROT_UNSPEC {
		proto = unix.RTPROT_BOOT
	}
	scope := r.Scope
	if !r.Gateway.IsValid() && scope == unix.RT_SCOPE_UNIVERSE && family == unix.AF_INET {
		// A direct IPv4 route read with universe scope (rare, but ip
		// route allows it) would make the kernel refuse later gatewayed
		// routes through it; link scope is what "dev X" means.
		scope = unix.RT_SCOPE_LINK
	}
	m := &rtnetlink.RouteMessage{
		Family:    family,
		DstLength: uint8(r.Dst.Bits()),
		Table:     unix.RT_TABLE_MAIN,
		Protocol:  proto,
		Scope:     scope,
		Type:      unix.RTN_UNICAST,
		Flags:     r.Flags & unix.RTNH_F_ONLINK,
		Attributes: rtnetlink.RouteAttributes{
			OutIface: uint32(ifindex),
			Priority: r.Metric,
		},
	}
	if r.Dst.Bits() > 0 {
		m.Attributes.Dst = net.IP(r.Dst.Masked().Addr().AsSlice())
	}
	switch {
	case r.Gateway.IsValid() && r.Gateway.Is4() == (family == unix.AF_INET):
		m.Attributes.Gateway = net.IP(r.Gateway.AsSlice())
	case r.Gateway.Is4():
		m.Attributes.Via = &rtnetlink.RouteVia{Family: unix.AF_INET, Addr: net.IP(r.Gateway.AsSlice())}
	case r.Gateway.Is6():
		m.Attributes.Via = &rtnetlink.RouteVia{Family: unix.AF_INET6, Addr: net.IP(r.Gateway.AsSlice())}
	}
	if r.Src.IsValid() {
		m.Attributes.Src = net.IP(r.Src.AsSlice())
	}
	if r.MTU != 0 || r.AdvMSS != 0 {
		m.Attributes.Metrics = &rtnetlink.RouteMetrics{MTU: r.MTU, AdvMSS: r.AdvMSS}
	}
	return m
}
