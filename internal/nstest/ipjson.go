package nstest

// Parsers of ip -j output: links, addresses, routes.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Link is one entry of `ip -j addr` (or `ip -j link`, without AddrInfo).
type Link struct {
	IfIndex   int      `json:"ifindex"`
	IfName    string   `json:"ifname"`
	Flags     []string `json:"flags"`
	MTU       int      `json:"mtu"`
	OperState string   `json:"operstate"`
	LinkType  string   `json:"link_type"`
	Address   string   `json:"address"`
	AddrInfo  []Addr   `json:"addr_info"`
}

// Addr is one address of a Link.
type Addr struct {
	Family    string `json:"family"` // "inet" or "inet6"
	Local     string `json:"local"`
	PrefixLen int    `json:"prefixlen"`
	Scope     string `json:"scope"` // "global", "link", "host"
	Tentative bool   `json:"tentative"`
}

// Route is one entry of `ip -j route`.
type Route struct {
	Dst      string   `json:"dst"` // "default" or a prefix
	Gateway  string   `json:"gateway"`
	Dev      string   `json:"dev"`
	Protocol string   `json:"protocol"`
	Scope    string   `json:"scope"`
	PrefSrc  string   `json:"prefsrc"`
	Flags    []string `json:"flags"`
	// Via is a next hop of the other family (RTA_VIA).
	Via *struct {
		Host string `json:"host"`
	} `json:"via"`
	Metrics []RouteMetric `json:"metrics"`
}

// RouteMetric is one element of a route's metrics (RTA_METRICS).
type RouteMetric struct {
	MTU        int    `json:"mtu"`
	Congestion string `json:"congestion"` // ip-route(8)'s congctl
}

// String formats r as "DST [via GW] dev DEV [src ADDR] [mtu N] [congctl
// NAME]", for comparisons with ip-route(8)'s words.
func (r Route) String() string {
	s := r.Dst
	if r.Gateway != "" {
		s += " via " + r.Gateway
	}
	if r.Via != nil {
		s += " via " + r.Via.Host
	}
	s += " dev " + r.Dev
	if r.PrefSrc != "" {
		s += " src " + r.PrefSrc
	}
	for _, m := range r.Metrics {
		if m.MTU != 0 {
			s += fmt.Sprintf(" mtu %d", m.MTU)
		}
		if m.Congestion != "" {
			s += " congctl " + m.Congestion
		}
	}
	return s
}

// ParseLinks parses `ip -j addr` or `ip -j link` output.
func ParseLinks(s string) ([]Link, error) {
	var ls []Link
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &ls); err != nil {
		return nil, fmt.Errorf("parsing ip -j link/addr output %q: %w", s, err)
	}
	return ls, nil
}

// ParseRoutes parses `ip -j route` output.
func ParseRoutes(s string) ([]Route, error) {
	var rs []Route
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &rs); err != nil {
		return nil, fmt.Errorf("parsing ip -j route output %q: %w", s, err)
	}
	return rs, nil
}

// FindLink returns the link called name.
func FindLink(ls []Link, name string) (Link, bool) {
	for _, l := range ls {
		if l.IfName == name {
			return l, true
		}
	}
	return Link{}, false
}

// Up reports whether the administrative UP flag is set.
func (l Link) Up() bool { return slices.Contains(l.Flags, "UP") }

// GlobalAddrs returns the link's scope-global addresses as "ADDR/LEN".
func (l Link) GlobalAddrs() []string {
	var out []string
	for _, a := range l.AddrInfo {
		if a.Scope == "global" {
			out = append(out, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
		}
	}
	return out
}

// TentativeAddrs returns the link's addresses still in duplicate address
// detection, as "ADDR/LEN".
func (l Link) TentativeAddrs() []string {
	var out []string
	for _, a := range l.AddrInfo {
		if a.Tentative {
			out = append(out, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
		}
	}
	return out
}

// Names lists the links' names, for failure messages.
func Names(ls []Link) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.IfName)
	}
	return out
}

// DefaultRoute returns the default route in rs, if any.
func DefaultRoute(rs []Route) (Route, bool) {
	for _, r := range rs {
		if r.Dst == "default" {
			return r, true
		}
	}
	return Route{}, false
}
