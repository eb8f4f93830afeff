package run

// DNS for the namespace: the host's resolv.conf, and the plan of which
// servers and search list it gets and which DNS is redirected to a host
// resolver.

import (
	"bufio"
	"io"
	"net/netip"
	"os"
	"strings"
)

// resolvConf is what gopasta takes from the host's /etc/resolv.conf.
type resolvConf struct {
	Servers []netip.Addr
	Search  []string
}

// readResolvConf parses resolv.conf(5): nameserver and search (or domain)
// lines; anything else, and malformed addresses, are ignored as the C
// library does. A missing file is an empty configuration.
func readResolvConf(path string) resolvConf {
	f, err := os.Open(path)
	if err != nil {
		return resolvConf{}
	}
	defer f.Close()
	return parseResolvConf(f)
}

func parseResolvConf(r io.Reader) resolvConf {
	var rc resolvConf
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") || strings.HasPrefix(fields[0], ";") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			// A zone (fe80::1%eth0) names a host interface that means
			// nothing to the namespace; such a server is skipped.
			if a, err := netip.ParseAddr(fields[1]); err == nil && a.Zone() == "" {
				rc.Servers = append(rc.Servers, a.Unmap())
			}
		case "search", "domain":
			// The last of search/domain wins, as in the C library.
			rc.Search = append([]string(nil), fields[1:]...)
		}
	}
	return rc
}

// dnsPlan is how DNS reaches the namespace: the servers and search list
// that DHCP, DHCPv6 and router advertisements hand out, and the redirection
// of DNS (fwd.DNSPort) on a namespace-visible address to a host resolver.
type dnsPlan struct {
	DNS4, DNS6             []netip.Addr
	Search                 []string
	Forward4, Forward6     netip.Addr // namespace-side address whose DNS is redirected
	ForwardTo4, ForwardTo6 netip.Addr // the host resolver it goes to
}

// dnsInput is what the DNS plan is made of.
type dnsInput struct {
	DNS      []netip.Addr // -D (nil: the host's resolvers)
	NoDNS    bool         // -D none
	Search   []string     // -S (nil: the host's search list)
	NoSearch bool         // -S none
	// Forward (--dns-forward): the namespace-side address whose DNS
	// (fwd.DNSPort) goes to Host (--dns-host, else the host's first resolver).
	Forward4, Forward6 netip.Addr
	Host4, Host6       netip.Addr
	// MapLo: the address whose traffic goes to host loopback (the
	// engine's NAT), if any.
	MapLo4, MapLo6 netip.Addr
	Resolv         resolvConf // the host's /etc/resolv.conf
}

// planDNS follows pasta: explicit -D servers are handed out as they are.
// Otherwise the host's resolvers are, except for two kinds the host
// loopback mapping would make unreachable from the namespace:
//
//   - a resolver on host loopback (systemd-resolved's 127.0.0.53, a local
//     dnsmasq): the namespace could never address it;
//   - a resolver at the mapped address itself, typically the gateway of a
//     home network that is also its resolver: the namespace can address
//     it, but the mapping sends its traffic to host loopback instead.
//
// For both, the namespace is told to use the mapped address (the gateway),
// and DNS (TCP and UDP ports 53 and 853) to it is forwarded as if it were the
// --dns-forward address, so that the mapping does not shadow the gateway's
// own resolver: to --dns-host if given, else to the resolver the mapped
// address stands for (the first that qualifies, per family; pasta takes the
// host's first resolver, whatever it is). Other traffic to the mapped
// address still goes to host loopback.
//
// With --dns-forward, the namespace is told to use the forward address
// instead, whose DNS goes to --dns-host or the host's first resolver; the
// mapped address then leads to host loopback for DNS too.
func planDNS(in dnsInput) dnsPlan {
	dns, noDNS, search, noSearch := in.DNS, in.NoDNS, in.Search, in.NoSearch
	fwd4, fwd6, host4, host6 := in.Forward4, in.Forward6, in.Host4, in.Host6
	mapLo4, mapLo6, rc := in.MapLo4, in.MapLo6, in.Resolv
	var p dnsPlan
	switch {
	case noSearch:
	case search != nil:
		p.Search = search
	default:
		p.Search = rc.Search
	}

	// The resolver --dns-forward leads to: --dns-host, else the host's
	// first resolver of that family.
	for _, s := range rc.Servers {
		if s.Is4() && !host4.IsValid() {
			host4 = s
		}
		if s.Is6() && !host6.IsValid() {
			host6 = s
		}
	}
	p.Forward4, p.Forward6 = fwd4, fwd6
	if fwd4.IsValid() {
		p.ForwardTo4 = host4
	}
	if fwd6.IsValid() {
		p.ForwardTo6 = host6
	}
	if noDNS {
		return p
	}
	add := func(a netip.Addr) {
		if a.Is4() && !contains(p.DNS4, a) {
			p.DNS4 = append(p.DNS4, a)
		} else if a.Is6() && !contains(p.DNS6, a) {
			p.DNS6 = append(p.DNS6, a)
		}
	}
	if dns != nil {
		for _, a := range dns {
			add(a)
		}
		return p
	}
	if fwd4.IsValid() {
		add(fwd4)
	}
	if fwd6.IsValid() {
		add(fwd6)
	}
	for _, s := range rc.Servers {
		mapLo, fwd := mapLo4, fwd4
		if s.Is6() {
			mapLo, fwd = mapLo6, fwd6
		}
		switch {
		case !s.IsLoopback() && s != mapLo:
			add(s)
		case fwd.IsValid():
			// Shadowed by the mapping: reached through the forward
			// address, already handed out.
		case mapLo.IsValid():
			add(mapLo)
			if s.Is4() && !p.Forward4.IsValid() {
				p.Forward4, p.ForwardTo4 = mapLo, or(in.Host4, s)
			} else if s.Is6() && !p.Forward6.IsValid() {
				p.Forward6, p.ForwardTo6 = mapLo, or(in.Host6, s)
			}
		}
		// Otherwise a loopback resolver with no mapping to reach it by:
		// unreachable, not handed out.
	}
	return p
}

// or is a if valid, else b.
func or(a, b netip.Addr) netip.Addr {
	if a.IsValid() {
		return a
	}
	return b
}

func contains(as []netip.Addr, a netip.Addr) bool {
	for _, b := range as {
		if a == b {
			return true
		}
	}
	return false
}
