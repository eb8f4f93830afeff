package run

import (
	"fmt"
	"net"
	"net/netip"

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
	Addr4      netip.Prefix // the namespace's main IPv4 address (DHCP hands it out)
	Addr6      netip.Prefix
	Gateway4   netip.Addr
	Gateway6   netip.Addr

	// What --config-net writes: every address and route to add.
	Addrs  []netip.Prefix
	Routes []ns.Route
}

// Local mode addresses, used when the host has no usable interface at all:
// the namespace still gets a working link to the host's loopback.
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
	if t.Local {
		if len(addrs4) == 0 {
			addrs4 = []netip.Prefix{localAddr4}
		}
		if !gw4.IsValid() {
			gw4 = localGateway4
		}
		if !gw6.IsValid() {
			gw6 = localGateway6
		}
	}
	switch {
	case cfg.Addr4.IsValid() && !cfg.Addr4LenGiven && len(addrs4) > 0:
		// -a without a length takes the host address's length, as pasta.
		addrs4 = []netip.Prefix{netip.PrefixFrom(cfg.Addr4.Addr(), addrs4[0].Bits())}
	case cfg.Addr4.IsValid():
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

	if p.IPv4 && len(addrs4) == 0 && !t.Local {
		// Nothing to copy and nothing given: IPv4 simply isn't offered,
		// as with pasta on an IPv6-only host.
		p.IPv4 = false
	}
	if p.IPv6 && len(addrs6) == 0 && !gw6.IsValid() {
		p.IPv6 = false
	}
	if !p.IPv4 && !p.IPv6 {
		return nil, fmt.Errorf("no IPv4 or IPv6 address to give the namespace: the host has none on its template interface; use -a")
	}

	if p.IPv4 {
		p.Addr4, p.Gateway4 = addrs4[0], gw4
		if !cfg.NoCopyAddrs || cfg.Addr4.IsValid() {
			p.Addrs = append(p.Addrs, addrs4...)
		} else {
			p.Addrs = append(p.Addrs, addrs4[0])
		}
		p.Routes = append(p.Routes, pickRoutes(t.Routes4, gw4, cfg.Gateway4.IsValid() || cfg.NoCopyRoutes || t.Local, netip.PrefixFrom(netip.IPv4Unspecified(), 0))...)
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
		p.Routes = append(p.Routes, pickRoutes(t.Routes6, gw6, cfg.Gateway6.IsValid() || cfg.NoCopyRoutes || t.Local, netip.PrefixFrom(netip.IPv6Unspecified(), 0))...)
	}
	return p, nil
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
