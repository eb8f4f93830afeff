package ns

// The host's template interface, whose addresses, routes, MTU and MAC the
// namespace imitates, and local mode where there is none.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"
)

// Local mode: with no host interface to copy, the namespace gets a
// link-local IPv4 address and talks to a gateway next to it, and IPv6 uses
// the kernel's own link-local address with fe80::1 as the router. These are
// the values current pasta uses, so scripts written against it keep working.
var (
	LocalAddr4    = netip.MustParsePrefix("169.254.2.1/16")
	LocalGateway4 = netip.MustParseAddr("169.254.2.2")
	LocalGateway6 = netip.MustParseAddr("fe80::1")
)

// Template is the host interface the namespace imitates: its addresses,
// gateway and routes per IP family, and its MTU and MAC.
type Template struct {
	// Local is set when no enabled family has a usable interface; Addrs4,
	// Gateway4 and Gateway6 then hold the local-mode values.
	Local bool

	Ifname4, Ifname6   string
	Ifindex4, Ifindex6 int

	// Non-link-local, global-scope addresses of the template interface(s).
	Addrs4, Addrs6 []netip.Prefix
	// Next hop of the default route through the template interface;
	// invalid when it has none (only non-default routes, or -i).
	Gateway4, Gateway6 netip.Addr
	// Main-table unicast routes through the template interface, link-local
	// destinations left out, in dump order.
	Routes4, Routes6 []Route

	// MTU and MAC of the IPv4 template interface, else the IPv6 one.
	MTU int
	MAC net.HardwareAddr
}

// TemplateOptions select the template interface the way pasta's -i,
// --outbound-if4 and --outbound-if6 do; NoIPv4 and NoIPv6 (-6, -4) skip a
// family entirely.
type TemplateOptions struct {
	Interface                string
	OutboundIf4, OutboundIf6 string
	NoIPv4, NoIPv6           bool
}

// ErrNoTemplateInterface is matched (errors.Is) by a *TemplateInterfaceError.
var ErrNoTemplateInterface = errors.New("no such interface")

// TemplateInterfaceError says that an interface named on the command line
// (-i, --outbound-if4, --outbound-if6) does not exist.
type TemplateInterfaceError struct {
	Option string // "-i", "--outbound-if4", "--outbound-if6"
	Name   string
}

func (e *TemplateInterfaceError) Error() string {
	return fmt.Sprintf("ns: %s %s: %v", e.Option, e.Name, ErrNoTemplateInterface)
}

func (e *TemplateInterfaceError) Is(target error) bool { return target == ErrNoTemplateInterface }

// DiscoverTemplate reads the current thread's network namespace (normally
// the host's) and picks the template interface per family: the -i
// interface if given, else the family's outbound interface if given, else
// the first interface with a default route in the main table, else the
// first interface with any route; lo and link-local destinations never
// count. It only reads, so it works unprivileged.
func DiscoverTemplate(opts TemplateOptions) (*Template, error) {
	c, err := dialRoute()
	if err != nil {
		return nil, err
	}
	defer c.Close()

	links, err := c.Link.List()
	if err != nil {
		return nil, fmt.Errorf("ns: list links: %w", err)
	}
	byName := make(map[string]*rtnetlink.LinkMessage, len(links))
	byIndex := make(map[int]*rtnetlink.LinkMessage, len(links))
	for i := range links {
		l := &links[i]
		if l.Attributes == nil {
			continue
		}
		byName[l.Attributes.Name] = l
		byIndex[int(l.Index)] = l
	}
	lookup := func(option, name string) (int, error) {
		l, ok := byName[name]
		if !ok {
			return 0, &TemplateInterfaceError{Option: option, Name: name}
		}
		return int(l.Index), nil
	}
	isLoopback := func(ifindex int) bool {
		l, ok := byIndex[ifindex]
		return !ok || l.Flags&unix.IFF_LOOPBACK != 0
	}

	addrs, err := c.Address.List()
	if err != nil {
		return nil, fmt.Errorf("ns: list addresses: %w", err)
	}

	t := &Template{}
	for _, fam := range []struct {
		family   uint8
		skip     bool
		outbound string
		optName  string
		ifname   *string
		ifindex  *int
		addrs    *[]netip.Prefix
		gateway  *netip.Addr
		routes   *[]Route
	}{
		{unix.AF_INET, opts.NoIPv4, opts.OutboundIf4, "--outbound-if4", &t.Ifname4, &t.Ifindex4, &t.Addrs4, &t.Gateway4, &t.Routes4},
		{unix.AF_INET6, opts.NoIPv6, opts.OutboundIf6, "--outbound-if6", &t.Ifname6, &t.Ifindex6, &t.Addrs6, &t.Gateway6, &t.Routes6},
	} {
		if fam.skip {
			continue
		}
		forced := 0
		switch {
		case opts.Interface != "":
			if forced, err = lookup("-i", opts.Interface); err != nil {
				return nil, err
			}
		case fam.outbound != "":
			if forced, err = lookup(fam.optName, fam.outbound); err != nil {
				return nil, err
			}
		}

		msgs, err := c.Route.ListMatch(&rtnetlink.RouteMessage{Family: fam.family})
		if err != nil {
			return nil, fmt.Errorf("ns: dump routes (family %d): %w", fam.family, err)
		}
		routes := candidateRoutes(msgs, fam.family, isLoopback)
		ifindex := forced
		if ifindex == 0 {
			ifindex = pickInterface(routes)
		}
		if ifindex == 0 {
			continue
		}
		*fam.ifindex = ifindex
		if l, ok := byIndex[ifindex]; ok {
			*fam.ifname = l.Attributes.Name
		}
		for _, r := range routes {
			if r.Ifindex != ifindex {
				continue
			}
			if r.IsDefault() && !fam.gateway.IsValid() {
				*fam.gateway = r.Gateway
			}
			*fam.routes = append(*fam.routes, r)
		}
		*fam.addrs = interfaceAddrs(addrs, fam.family, ifindex)
	}

	switch {
	case t.Ifindex4 != 0:
		t.fillLink(byIndex[t.Ifindex4])
	case t.Ifindex6 != 0:
		t.fillLink(byIndex[t.Ifindex6])
	default:
		t.Local = true
		if !opts.NoIPv4 {
			t.Addrs4 = []netip.Prefix{LocalAddr4}
			t.Gateway4 = LocalGateway4
		}
		if !opts.NoIPv6 {
			t.Gateway6 = LocalGateway6
		}
	}
	return t, nil
}

func (t *Template) fillLink(l *rtnetlink.LinkMessage) {
	if l == nil || l.Attributes == nil {
		return
	}
	t.MTU = int(l.Attributes.MTU)
	if len(l.Attributes.Address) > 0 {
		t.MAC = append(net.HardwareAddr(nil), l.Attributes.Address...)
	}
}

// candidateRoutes keeps the main-table unicast routes of family that leave
// through a real interface towards a non-link-local destination, one Route
// per next hop (a multipath route contributes each of its hops, in order,
// so its first hop is what pickInterface sees first).
func candidateRoutes(msgs []rtnetlink.RouteMessage, family uint8, isLoopback func(int) bool) []Route {
	var out []Route
	for i := range msgs {
		m := &msgs[i]
		if m.Family != family || routeTable(m) != unix.RT_TABLE_MAIN || m.Type != unix.RTN_UNICAST {
			continue
		}
		if m.Flags&unix.RTM_F_CLONED != 0 {
			continue
		}
		for _, h := range routeHops(m) {
			if h.ifindex == 0 || isLoopback(h.ifindex) {
				continue
			}
			r, ok := routeFromMessage(m, h)
			if !ok || isLinkLocalPrefix(r.Dst) {
				continue
			}
			out = append(out, r)
		}
	}
	return out
}

// pickInterface applies pasta's rule: first interface with a default
// route, else first interface with any route, else none (0).
func pickInterface(routes []Route) int {
	for _, r := range routes {
		if r.IsDefault() {
			return r.Ifindex
		}
	}
	if len(routes) > 0 {
		return routes[0].Ifindex
	}
	return 0
}

// interfaceAddrs returns the global-scope, non-link-local addresses of
// family on ifindex, with their prefix lengths.
func interfaceAddrs(msgs []rtnetlink.AddressMessage, family uint8, ifindex int) []netip.Prefix {
	var out []netip.Prefix
	for i := range msgs {
		m := &msgs[i]
		if m.Family != family || int(m.Index) != ifindex || m.Scope != unix.RT_SCOPE_UNIVERSE || m.Attributes == nil {
			continue
		}
		if (uint32(m.Flags)|m.Attributes.Flags)&unix.IFA_F_DADFAILED != 0 {
			continue
		}
		// IFA_LOCAL is the interface's own address; IFA_ADDRESS is the
		// peer on point-to-point links (IPv4), so prefer IFA_LOCAL.
		ip := m.Attributes.Local
		if ip == nil {
			ip = m.Attributes.Address
		}
		a, ok := addrFromIP(ip, family)
		if !ok || a.IsLinkLocalUnicast() {
			continue
		}
		p := netip.PrefixFrom(a, int(m.PrefixLength))
		if !p.IsValid() {
			continue
		}
		out = append(out, p)
	}
	return out
}
