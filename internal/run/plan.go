package run

// The network plan: the namespace's addresses, routes, MTU and gateways,
// from the command line and the host's template interface.

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/ns"
)

// netPlan is what the namespace side will look like: derived once from the
// configuration and the host template, then used to configure the interface
// and to tell the engine what it impersonates.
type netPlan struct {
	Ifname string
	MTU    int // 0: leave the kernel's default
	MAC    net.HardwareAddr

	IPv4, IPv6 bool
	// Local4, Local6: the host had nothing of that family to copy, and the
	// namespace gets local mode's addresses for it (a link to the host's
	// loopback through the gateway), as pasta gives.
	Local4, Local6 bool
	Addr4          netip.Prefix // the namespace's main IPv4 address (DHCP hands it out)
	Addr6          netip.Prefix
	Gateway4       netip.Addr
	Gateway6       netip.Addr

	// What --config-net writes: every address and route to add.
	Addrs  []netip.Prefix
	Routes []ns.Route
}

// Local mode addresses, used for a family the host has no usable
// interface or address of: the namespace still gets a working link to the
// host's loopback in it.
var (
	localAddr4    = netip.MustParsePrefix("169.254.2.1/16")
	localGateway4 = netip.MustParseAddr("169.254.2.2")
	localGateway6 = netip.MustParseAddr("fe80::1")
)

// planNetwork merges the command line with the host template. Explicit
// options win: -a replaces the copied addresses, -g the copied routes.
func planNetwork(cfg *config.Config, t *ns.Template) (*netPlan, error) {
	p := &netPlan{
		Ifname: cfg.NSIfName,
		MTU:    cfg.MTU,
		MAC:    cfg.NSMAC,
		IPv4:   !cfg.IPv6Only,
		IPv6:   !cfg.IPv4Only,
	}
	if p.MTU < 0 {
		p.MTU = config.DefaultMTU
	}
	if p.Ifname == "" {
		switch {
		case t.Ifname4 != "" && p.IPv4:
			p.Ifname = t.Ifname4
		case t.Ifname6 != "" && p.IPv6:
			p.Ifname = t.Ifname6
		default:
			p.Ifname = "tap0"
		}
	}

	addrs4, addrs6 := t.Addrs4, t.Addrs6
	gw4, gw6 := t.Gateway4, t.Gateway6
	// A family the host has no address of (an IPv6-only or IPv4-only
	// host, or -i naming an interface without addresses) runs in local
	// mode rather than not at all: the namespace can still reach the
	// host's loopback over it, as with pasta.
	if p.IPv4 && (t.Local || len(addrs4) == 0) {
		p.Local4 = true
		addrs4, gw4 = []netip.Prefix{localAddr4}, localGateway4
	}
	if p.IPv6 && (t.Local || len(addrs6) == 0 && !gw6.IsValid()) {
		p.Local6 = true
		addrs6, gw6 = nil, localGateway6
	}
	// An interface named for a family's outbound traffic must serve that
	// family: local mode would silently ignore the option (pasta refuses
	// it too: "External interface not usable").
	for _, o := range []struct {
		name, ifname string
		local        bool
	}{{"--outbound-if4", cfg.OutboundIf4, p.Local4}, {"--outbound-if6", cfg.OutboundIf6, p.Local6}} {
		if o.ifname != "" && o.local {
			return nil, fmt.Errorf("%s %s: the interface has no address or route of that family to use", o.name, o.ifname)
		}
	}
	switch {
	case cfg.Addr4.IsValid():
		// Without a length, -a's is the address class's (pasta's
		// guess), not the host address's: the address is the user's.
		addrs4 = []netip.Prefix{cfg.Addr4}
	case cfg.Prefix4Len > 0 && len(addrs4) > 0:
		// -n alone changes the length of the copied address.
		addrs4 = append([]netip.Prefix{netip.PrefixFrom(addrs4[0].Addr(), cfg.Prefix4Len)}, addrs4[1:]...)
	}
	if cfg.Addr6.IsValid() {
		addrs6 = []netip.Prefix{cfg.Addr6}
	}
	if cfg.Gateway4.IsValid() {
		gw4 = cfg.Gateway4
	}
	if cfg.Gateway6.IsValid() {
		gw6 = cfg.Gateway6
	}

	if !p.IPv4 && !p.IPv6 {
		return nil, fmt.Errorf("no IPv4 or IPv6 to give the namespace")
	}

	if p.IPv4 {
		p.Addr4, p.Gateway4 = addrs4[0], gw4
		if !cfg.NoCopyAddrs || cfg.Addr4.IsValid() {
			p.Addrs = append(p.Addrs, addrs4...)
		} else {
			p.Addrs = append(p.Addrs, addrs4[0])
		}
		p.Routes = append(p.Routes, pickRoutes(t.Routes4, gw4, cfg.Gateway4.IsValid() || cfg.NoCopyRoutes || p.Local4, netip.PrefixFrom(netip.IPv4Unspecified(), 0))...)
	}
	if p.IPv6 {
		if len(addrs6) > 0 {
			p.Addr6 = addrs6[0]
			if !cfg.NoCopyAddrs || cfg.Addr6.IsValid() {
				p.Addrs = append(p.Addrs, addrs6...)
			} else {
				p.Addrs = append(p.Addrs, addrs6[0])
			}
		}
		p.Gateway6 = gw6
		p.Routes = append(p.Routes, pickRoutes(t.Routes6, gw6, cfg.Gateway6.IsValid() || cfg.NoCopyRoutes || p.Local6, netip.PrefixFrom(netip.IPv6Unspecified(), 0))...)
	}
	return p, nil
}

// dropIPv6 takes IPv6 out of the plan: the host or the namespace has none
// to give (ns.HostIPv6Off, ns.LinkIPv6Off). An IPv4 route through an IPv6
// router goes too.
func (p *netPlan) dropIPv6() {
	p.IPv6, p.Local6 = false, false
	p.Addr6, p.Gateway6 = netip.Prefix{}, netip.Addr{}
	p.Addrs = slices.DeleteFunc(p.Addrs, func(a netip.Prefix) bool { return a.Addr().Is6() })
	p.Routes = slices.DeleteFunc(p.Routes, func(r ns.Route) bool { return r.Dst.Addr().Is6() || r.Gateway.Is6() })
}

// pickRoutes copies the template's routes, or, when told not to (or when the
// gateway was given explicitly), just a default route through gw.
func pickRoutes(tmpl []ns.Route, gw netip.Addr, defaultOnly bool, any netip.Prefix) []ns.Route {
	if !defaultOnly && len(tmpl) > 0 {
		return tmpl
	}
	if !gw.IsValid() {
		return nil
	}
	return []ns.Route{{Dst: any, Gateway: gw}}
}
