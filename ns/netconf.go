package ns

// --config-net on the namespace's interface: loopback up, then MTU, MAC,
// addresses and routes over rtnetlink.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// LoopbackUp brings lo up in the current thread's network namespace. It is
// all the configuration a namespace gets without --config-net; the rest
// comes from DHCP, DHCPv6 and SLAAC against gopasta's responders.
func LoopbackUp() error {
	c, err := dialRoute()
	if err != nil {
		return err
	}
	defer c.Close()
	links, err := c.Link.List()
	if err != nil {
		return fmt.Errorf("ns: list links: %w", err)
	}
	for _, l := range links {
		if l.Flags&unix.IFF_LOOPBACK == 0 {
			continue
		}
		if l.Flags&unix.IFF_UP != 0 {
			return nil
		}
		if err := setUp(c, l.Index); err != nil {
			return fmt.Errorf("ns: bring lo up: %w", err)
		}
		return nil
	}
	return errors.New("ns: bring lo up: namespace has no loopback interface")
}

// NetConfig is what --config-net puts on the namespace interface.
type NetConfig struct {
	Ifindex int
	MTU     int              // 0 leaves the kernel's
	MAC     net.HardwareAddr // nil leaves the kernel's
	// Addrs are added as given; IPv6 ones with IFA_F_NODAD so they are
	// usable at once rather than after a second of duplicate detection
	// against a link on which only gopasta answers.
	Addrs []netip.Prefix
	// Routes are re-created through Ifindex, direct routes before the ones
	// with a gateway (which need them). Routes the kernel added by itself
	// for the addresses (EEXIST) are fine.
	Routes []Route
	// Gateway4 and Gateway6, when valid, add a default route per family
	// unless Routes already has one.
	Gateway4, Gateway6 netip.Addr
	Up                 bool
	// CongestionControl, when not empty, names the TCP congestion control
	// (RTAX_CC_ALGO, Linux 4.0) on every route through the interface: the
	// routes added here and the ones the kernel made for the addresses
	// and for fe80::/64. A connection the namespace opens or accepts over
	// them starts with this algorithm instead of the namespace's default;
	// setsockopt(TCP_CONGESTION) still chooses another. A name the kernel
	// does not know (EINVAL) leaves the routes without one.
	CongestionControl string
}

// ConfigureInterface applies nc to the interface nc.Ifindex in the current
// thread's network namespace. The order matters: MTU and MAC while the link
// may still be down, DAD off and the link up before addresses (IPv6 prefix
// routes appear only on an up link), addresses before routes.
func ConfigureInterface(nc NetConfig) error {
	if nc.Ifindex <= 0 {
		return fmt.Errorf("ns: configure interface: invalid ifindex %d", nc.Ifindex)
	}
	c, err := dialRoute()
	if err != nil {
		return err
	}
	defer c.Close()

	link, err := c.Link.Get(uint32(nc.Ifindex))
	if err != nil {
		return fmt.Errorf("ns: configure interface %d: %w", nc.Ifindex, err)
	}
	name := ""
	if link.Attributes != nil {
		name = link.Attributes.Name
	}

	if nc.MTU < 0 || nc.MTU > 65535 {
		return fmt.Errorf("ns: configure %s: MTU %d out of range", name, nc.MTU)
	}
	if nc.MTU != 0 || nc.MAC != nil {
		if nc.MAC != nil && len(nc.MAC) != 6 {
			return fmt.Errorf("ns: configure %s: MAC %v is not 6 bytes", name, nc.MAC)
		}
		req := &rtnetlink.LinkMessage{
			Family:     unix.AF_UNSPEC,
			Index:      uint32(nc.Ifindex),
			Attributes: &rtnetlink.LinkAttributes{MTU: uint32(nc.MTU), Address: nc.MAC},
		}
		if err := c.Link.Set(req); err != nil {
			return fmt.Errorf("ns: set MTU %d / MAC %v on %s: %w", nc.MTU, nc.MAC, name, err)
		}
	}

	// Best effort: IFA_F_NODAD covers the addresses we add, this covers
	// the link-local address the kernel generates when the link comes up.
	// /proc/sys/net follows the calling thread's namespace; it may be
	// read-only (containers), which only costs the link-local a DAD round.
	if name != "" {
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/accept_dad", []byte("0"), 0)
	}

	if nc.Up {
		if err := setUp(c, uint32(nc.Ifindex)); err != nil {
			return fmt.Errorf("ns: bring %s up: %w", name, err)
		}
	}

	for _, p := range nc.Addrs {
		if err := addAddr(c, nc.Ifindex, p); err != nil {
			return fmt.Errorf("ns: add address %s to %s: %w", p, name, err)
		}
	}

	for _, r := range orderRoutes(nc) {
		if r.Src.IsValid() && !hasAddr(nc.Addrs, r.Src) {
			// The host's preferred source is not ours when -a replaced
			// the copied addresses; the kernel would refuse the route.
			r.Src = netip.Addr{}
		}
		err := addRoute(c, routeMessage(r, nc.Ifindex), nc.CongestionControl)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("ns: add route %s on %s: %w", r, name, err)
		}
	}
	if nc.CongestionControl == "" {
		return nil
	}
	// Best effort, as the kernel's routes work without it: one that is
	// missing (IPv6 off, a down link) or refuses the name stays as it is.
	for _, r := range kernelRoutes(nc) {
		_ = executeRoute(c, routeMessage(r, nc.Ifindex), nc.CongestionControl, netlink.Replace)
	}
	return nil
}

// kernelRoutes are the routes the kernel adds by itself on an up link, as
// it adds them: a prefix route per address that has one (IPv4 with link
// scope and the address as preferred source, IPv6 at metric 256), and
// fe80::/64 for the link-local address.
func kernelRoutes(nc NetConfig) []Route {
	var out []Route
	for _, p := range nc.Addrs {
		if !p.IsValid() || p.Bits() == p.Addr().BitLen() {
			continue
		}
		a := p.Addr().Unmap()
		r := Route{Dst: netip.PrefixFrom(a, p.Bits()).Masked(), Protocol: unix.RTPROT_KERNEL}
		if a.Is4() {
			r.Src, r.Scope = a, unix.RT_SCOPE_LINK
		} else {
			r.Metric = ip6AddrconfMetric
		}
		out = append(out, r)
	}
	return append(out, Route{Dst: netip.MustParsePrefix("fe80::/64"), Protocol: unix.RTPROT_KERNEL, Metric: ip6AddrconfMetric})
}

// ip6AddrconfMetric is the metric of the IPv6 routes the kernel adds for
// addresses (IP6_RT_PRIO_ADDRCONF).
const ip6AddrconfMetric = 256

// addRoute adds m, naming the congestion control cc if not empty; a kernel
// that refuses cc (EINVAL) gets the route without it.
func addRoute(c *rtnetlink.Conn, m *rtnetlink.RouteMessage, cc string) error {
	if cc == "" {
		return c.Route.Add(m)
	}
	err := executeRoute(c, m, cc, netlink.Create|netlink.Excl)
	if errors.Is(err, unix.EINVAL) {
		return c.Route.Add(m)
	}
	return err
}

// executeRoute sends m as RTM_NEWROUTE with cc and flags: Create|Excl
// adds, Replace (without Create) replaces a route that must exist.
func executeRoute(c *rtnetlink.Conn, m *rtnetlink.RouteMessage, cc string, flags netlink.HeaderFlags) error {
	_, err := c.Execute(ccRoute{m, cc}, unix.RTM_NEWROUTE, netlink.Request|netlink.Acknowledge|flags)
	return err
}

// ccRoute is a route message whose RTA_METRICS also carries RTAX_CC_ALGO,
// which rtnetlink.RouteMetrics has no field for. Embedding the message
// keeps it an rtnetlink.Message.
type ccRoute struct {
	*rtnetlink.RouteMessage
	cc string
}

// MarshalBinary encodes the message with one RTA_METRICS: the embedded
// message's MTU and advertised MSS, if any, and the congestion control.
func (m ccRoute) MarshalBinary() ([]byte, error) {
	plain := *m.RouteMessage
	mt := plain.Attributes.Metrics
	plain.Attributes.Metrics = nil
	b, err := plain.MarshalBinary()
	if err != nil {
		return nil, err
	}
	ae := netlink.NewAttributeEncoder()
	ae.Nested(unix.RTA_METRICS, func(nae *netlink.AttributeEncoder) error {
		if mt != nil && mt.MTU != 0 {
			nae.Uint32(unix.RTAX_MTU, mt.MTU)
		}
		if mt != nil && mt.AdvMSS != 0 {
			nae.Uint32(unix.RTAX_ADVMSS, mt.AdvMSS)
		}
		nae.String(unix.RTAX_CC_ALGO, m.cc)
		return nil
	})
	a, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return append(b, a...), nil
}

// orderRoutes returns the routes to add: direct ones first, then those with
// a gateway, then the default routes from Gateway4/Gateway6 if Routes has
// none for that family.
func orderRoutes(nc NetConfig) []Route {
	out := make([]Route, 0, len(nc.Routes)+2)
	var def4, def6 bool
	for _, r := range nc.Routes {
		if !r.Dst.IsValid() {
			continue
		}
		if !r.Gateway.IsValid() {
			out = append(out, r)
		}
		if r.IsDefault() {
			if r.Dst.Addr().Is4() {
				def4 = true
			} else {
				def6 = true
			}
		}
	}
	for _, r := range nc.Routes {
		if r.Dst.IsValid() && r.Gateway.IsValid() {
			out = append(out, r)
		}
	}
	if nc.Gateway4.IsValid() && nc.Gateway4.Is4() && !def4 {
		out = append(out, Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gateway: nc.Gateway4})
	}
	if nc.Gateway6.IsValid() && nc.Gateway6.Is6() && !def6 {
		out = append(out, Route{Dst: netip.PrefixFrom(netip.IPv6Unspecified(), 0), Gateway: nc.Gateway6})
	}
	return out
}

func hasAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

func setUp(c *rtnetlink.Conn, index uint32) error {
	return c.Link.Set(&rtnetlink.LinkMessage{
		Family: unix.AF_UNSPEC,
		Index:  index,
		Flags:  unix.IFF_UP,
		Change: unix.IFF_UP,
	})
}

func addAddr(c *rtnetlink.Conn, ifindex int, p netip.Prefix) error {
	if !p.IsValid() {
		return errors.New("invalid prefix")
	}
	a := p.Addr().Unmap()
	m := &rtnetlink.AddressMessage{
		PrefixLength: uint8(p.Bits()),
		Index:        uint32(ifindex),
		Attributes:   &rtnetlink.AddressAttributes{Address: net.IP(a.AsSlice())},
	}
	if a.Is4() {
		m.Family = unix.AF_INET
		m.Attributes.Local = m.Attributes.Address
		if p.Bits() < 31 {
			// ip(8) sets the broadcast address too; without it
			// directed broadcasts on the subnet go unanswered.
			bc := p.Masked().Addr().As4()
			hostBits := 32 - p.Bits()
			for i := 3; i >= 0 && hostBits > 0; i-- {
				n := min(hostBits, 8)
				bc[i] |= byte(1<<n - 1)
				hostBits -= n
			}
			m.Attributes.Broadcast = net.IP(bc[:])
		}
	} else {
		m.Family = unix.AF_INET6
		m.Flags = unix.IFA_F_NODAD
		m.Attributes.Flags = unix.IFA_F_NODAD
	}
	err := c.Address.New(m)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}
