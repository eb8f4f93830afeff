package cmdline

// The parsed options turned into a validated config.Config, option group by
// option group.

import (
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gopasta/gopasta/internal/config"
)

// build validates everything the command line said and fills a Config with
// pasta's defaults. Checks that need the system (a PID's namespace, a
// --netns file, a host interface, a --runas user) happen here too, so that
// every mistake fails before any namespace is touched.
func build(c *cli.Context, pos []string) (*config.Config, error) {
	cfg := &config.Config{
		MTU:          -1,
		OurMAC:       append([]byte(nil), config.DefaultMAC...),
		NoDHCPDNS:    true, // pasta mode: announce name servers only with --dhcp-dns
		NoDHCPSearch: true,
	}
	steps := []func(*cli.Context, *config.Config) error{
		buildGeneral, buildAddresses, buildDNS, buildProtocols,
		buildMapping, buildNamespaceIf, buildOffloads, buildPorts,
	}
	for _, step := range steps {
		if err := step(c, cfg); err != nil {
			return nil, err
		}
	}
	if err := buildTarget(c, cfg, pos); err != nil {
		return nil, err
	}
	if err := buildTapFD(c, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// buildTapFD reads --fd as pasta reads it (C's strtoul, 0 to INT_MAX; 0
// is allowed since passt aa1cc89) and checks what it cannot go with: the
// TAP must be open in a namespace that exists, so a PID or --netns, and
// something must carry it. Whether the descriptor is a TAP is checked at
// start (internal/run), where a copy run again in the background or in a
// user namespace finds it at a number of gopasta's choosing.
func buildTapFD(c *cli.Context, cfg *config.Config) error {
	if !c.IsSet("fd") {
		return nil
	}
	v := c.String("fd")
	n, ok := parseCRange(v, 0, math.MaxInt32)
	if !ok {
		return badValue("--fd", v, "not a descriptor number")
	}
	cfg.TapFD, cfg.TapFDSet = int(n), true
	switch {
	case cfg.Mode == config.ModeSpawn:
		return usagef("--fd needs a PID or --netns: the TAP is open in a namespace that exists already, not in the command's new one")
	case cfg.SpliceOnly:
		return usagef("--fd cannot be combined with --splice-only, which uses no TAP")
	case cfg.Vhost == config.VhostOn:
		return usagef("--fd cannot be combined with --vhost=on: the TAP was opened without vhost-net's settings")
	}
	return nil
}

func buildGeneral(c *cli.Context, cfg *config.Config) error {
	cfg.Debug = c.Bool("debug")
	cfg.Trace = c.Bool("trace")
	cfg.Quiet = c.Bool("quiet")
	if cfg.Trace {
		cfg.Debug = true
	}
	if cfg.Debug {
		cfg.Quiet = false // as pasta: asking for more output wins
	}
	cfg.Foreground = c.Bool("foreground")
	var err error
	if c.IsSet("stats") {
		if cfg.Stats, err = parseStats(c.String("stats")); err != nil {
			return err
		}
	}
	for _, o := range []struct {
		name string
		dst  *string
	}{{"log-file", &cfg.LogFile}, {"pcap", &cfg.PcapFile}, {"pid", &cfg.PidFile}} {
		if !c.IsSet(o.name) {
			continue
		}
		v := c.String(o.name)
		if err := checkOutputPath("--"+o.name, v); err != nil {
			return err
		}
		*o.dst = v
	}
	if c.IsSet("log-size") {
		if cfg.LogSize, err = parseLogSize(c.String("log-size")); err != nil {
			return err
		}
	}
	if c.IsSet("conf-path") {
		if cfg.ConfPath, err = parseConfPath(c.String("conf-path")); err != nil {
			return err
		}
	}
	if c.IsSet("runas") {
		if cfg.RunAs, err = parseRunAs(c.String("runas")); err != nil {
			return err
		}
	}
	return nil
}

// stringSlice returns the values of a repeatable option. urfave/cli's own
// copy passes through JSON between an option's names, which turns bytes
// that are not UTF-8 into U+FFFD: the parsers would check, and errors
// would quote, a value other than the one given. Surrounding white space is
// dropped, as urfave/cli does.
func stringSlice(c *cli.Context, name string) []string {
	m, ok := c.App.Metadata[repeatedKey].(map[string][]string)
	if !ok {
		return c.StringSlice(name)
	}
	vals := make([]string, len(m[name]))
	for i, v := range m[name] {
		vals[i] = strings.TrimSpace(v)
	}
	return vals
}

// perFamily parses an option that may be given once per address family;
// within a family the last value wins, as in pasta.
func perFamily(c *cli.Context, name string, parse func(string) (netip.Addr, error), v4, v6 *netip.Addr) error {
	for _, s := range stringSlice(c, name) {
		a, err := parse(s)
		if err != nil {
			return err
		}
		if a.Is4() {
			*v4 = a
		} else {
			*v6 = a
		}
	}
	return nil
}

func buildAddresses(c *cli.Context, cfg *config.Config) error {
	var err error
	if c.IsSet("mtu") {
		if cfg.MTU, err = parseMTU(c.String("mtu")); err != nil {
			return err
		}
	}
	cfg.IPv4Only, cfg.IPv6Only = c.Bool("ipv4-only"), c.Bool("ipv6-only")
	if cfg.IPv4Only && cfg.IPv6Only {
		return usagef("-4/--ipv4-only and -6/--ipv6-only cannot be used together")
	}
	if cfg.MTU > 0 && cfg.MTU < minMTUIPv6 && !cfg.IPv4Only {
		reason := fmt.Sprintf("IPv6 needs an MTU of at least %d; add -4 to run IPv4 only", minMTUIPv6)
		if v := c.String("mtu"); v != strconv.Itoa(cfg.MTU) {
			reason = fmt.Sprintf("read as %d, and %s", cfg.MTU, reason) // "01500" is octal
		}
		return badValue("--mtu", c.String("mtu"), reason)
	}
	addr4Arg := ""
	for _, s := range stringSlice(c, "address") {
		p, hasLen, err := parseAddrPrefix(s)
		if err != nil {
			return err
		}
		if p.Addr().Is4() {
			cfg.Addr4, cfg.Addr4LenGiven, addr4Arg = p, hasLen, s
		} else {
			cfg.Addr6 = p
		}
	}
	if c.IsSet("netmask") {
		if cfg.Prefix4Len, err = parseNetmask(c.String("netmask")); err != nil {
			return err
		}
		if cfg.Addr4LenGiven {
			// Two prefix lengths for one address: taking either would
			// silently ignore the other (pasta refuses this too).
			return usagef("-n/--netmask cannot be used with a prefix length in -a/--address (got %q)", addr4Arg)
		}
		if cfg.Addr4.IsValid() {
			cfg.Addr4 = netip.PrefixFrom(cfg.Addr4.Addr(), cfg.Prefix4Len)
			cfg.Addr4LenGiven = true
		}
	}
	gw := func(s string) (netip.Addr, error) { return parseAddr("--gateway", s, false, false) }
	if err := perFamily(c, "gateway", gw, &cfg.Gateway4, &cfg.Gateway6); err != nil {
		return err
	}
	out := func(s string) (netip.Addr, error) { return parseAddr("--outbound", s, true, false) }
	if err := perFamily(c, "outbound", out, &cfg.Outbound4, &cfg.Outbound6); err != nil {
		return err
	}
	if c.IsSet("mac-addr") {
		if cfg.OurMAC, err = parseMAC("--mac-addr", c.String("mac-addr")); err != nil {
			return err
		}
	}
	for _, o := range []struct {
		name string
		dst  *string
	}{{"interface", &cfg.Interface}, {"outbound-if4", &cfg.OutboundIf4}, {"outbound-if6", &cfg.OutboundIf6}} {
		if c.IsSet(o.name) {
			if err := checkHostIf("--"+o.name, c.String(o.name)); err != nil {
				return err
			}
			*o.dst = c.String(o.name)
		}
	}
	if c.IsSet("hostname") {
		// HOST_NAME_MAX is 64; underscores are tolerated as in most resolvers.
		h := c.String("hostname")
		if err := checkDomain("--hostname", h, h, 64); err != nil {
			return err
		}
		cfg.Hostname = h
	}
	if c.IsSet("fqdn") {
		f := c.String("fqdn")
		if err := checkDomain("--fqdn", f, f, 253); err != nil {
			return err
		}
		cfg.FQDN = f
	}
	return nil
}

func buildDNS(c *cli.Context, cfg *config.Config) error {
	// -D none clears what came before; a later -D adds again (pasta).
	for _, s := range stringSlice(c, "dns") {
		if s == "" {
			// Most likely an unset shell variable: saying "none" for it
			// would silently drop the name servers.
			return badValue("--dns", s, "empty (none announces no name server)")
		}
		if s == "none" {
			cfg.DNS, cfg.NoDNS = nil, true
			continue
		}
		a, err := parseAddr("--dns", s, true, true)
		if err != nil {
			return err
		}
		cfg.DNS, cfg.NoDNS = append(cfg.DNS, a), false
	}
	for _, s := range stringSlice(c, "search") {
		if len(strings.Fields(s)) == 0 {
			return badValue("--search", s, "empty (none announces no search domain)")
		}
		if s == "none" {
			cfg.Search, cfg.NoSearch = nil, true
			continue
		}
		for _, d := range strings.Fields(s) {
			if err := checkDomain("--search", s, d, 253); err != nil {
				return err
			}
			cfg.Search = append(cfg.Search, d)
		}
		cfg.NoSearch = false
	}
	fwd := func(s string) (netip.Addr, error) { return parseAddr("--dns-forward", s, false, false) }
	if err := perFamily(c, "dns-forward", fwd, &cfg.DNSForward4, &cfg.DNSForward6); err != nil {
		return err
	}
	// The host resolver may well be on loopback (systemd-resolved).
	host := func(s string) (netip.Addr, error) { return parseAddr("--dns-host", s, true, true) }
	if err := perFamily(c, "dns-host", host, &cfg.DNSHost4, &cfg.DNSHost6); err != nil {
		return err
	}
	if c.Bool("dhcp-dns") && c.Bool("no-dhcp-dns") {
		return usagef("--dhcp-dns and --no-dhcp-dns cannot be used together")
	}
	if c.Bool("dhcp-search") && c.Bool("no-dhcp-search") {
		return usagef("--dhcp-search and --no-dhcp-search cannot be used together")
	}
	cfg.NoDHCPDNS = !c.Bool("dhcp-dns")
	cfg.NoDHCPSearch = !c.Bool("dhcp-search")
	return nil
}

func buildProtocols(c *cli.Context, cfg *config.Config) error {
	cfg.NoTCP, cfg.NoUDP, cfg.NoICMP = c.Bool("no-tcp"), c.Bool("no-udp"), c.Bool("no-icmp")
	cfg.NoDHCP, cfg.NoNDP = c.Bool("no-dhcp"), c.Bool("no-ndp")
	cfg.NoDHCPv6, cfg.NoRA = c.Bool("no-dhcpv6"), c.Bool("no-ra")
	cfg.Freebind = c.Bool("freebind")
	return nil
}

func buildMapping(c *cli.Context, cfg *config.Config) error {
	cfg.NoMapGW = c.Bool("no-map-gw")
	mapAddr := func(opt string) func(string) (netip.Addr, error) {
		return func(s string) (netip.Addr, error) { return parseAddr(opt, s, false, false) }
	}
	for _, o := range []struct {
		name   string
		v4, v6 *netip.Addr
		none   *bool
	}{
		{"map-host-loopback", &cfg.MapHostLoopback4, &cfg.MapHostLoopback6, &cfg.NoMapHostLoopback},
		{"map-guest-addr", &cfg.MapGuestAddr4, &cfg.MapGuestAddr6, &cfg.NoMapGuestAddr},
	} {
		for _, s := range stringSlice(c, o.name) {
			if s == "none" {
				*o.v4, *o.v6, *o.none = netip.Addr{}, netip.Addr{}, true
				continue
			}
			a, err := mapAddr("--" + o.name)(s)
			if err != nil {
				return err
			}
			if a.Is4() {
				*o.v4 = a
			} else {
				*o.v6 = a
			}
			*o.none = false
		}
	}
	if cfg.NoMapHostLoopback {
		cfg.NoMapGW = true // pasta: "none" implies --no-map-gw
	}
	return nil
}

func buildNamespaceIf(c *cli.Context, cfg *config.Config) error {
	if c.IsSet("ns-ifname") {
		if err := checkIfName("--ns-ifname", c.String("ns-ifname")); err != nil {
			return err
		}
		cfg.NSIfName = c.String("ns-ifname")
	}
	if c.IsSet("ns-mac-addr") {
		m, err := parseMAC("--ns-mac-addr", c.String("ns-mac-addr"))
		if err != nil {
			return err
		}
		cfg.NSMAC = m
	}
	cfg.ConfigNet = c.Bool("config-net")
	cfg.NoCopyRoutes, cfg.NoCopyAddrs = c.Bool("no-copy-routes"), c.Bool("no-copy-addrs")
	if cfg.NoCopyRoutes && !cfg.ConfigNet {
		return usagef("--no-copy-routes needs --config-net")
	}
	if cfg.NoCopyAddrs && !cfg.ConfigNet {
		return usagef("--no-copy-addrs needs --config-net")
	}
	cfg.HostLoToNSLo = c.Bool("host-lo-to-ns-lo")
	cfg.NoSplice, cfg.SpliceOnly = c.Bool("no-splice"), c.Bool("splice-only")
	if cfg.NoSplice && cfg.SpliceOnly {
		return usagef("--no-splice and --splice-only cannot be used together")
	}
	if cfg.NoSplice && cfg.HostLoToNSLo {
		// Only a spliced connection can keep the host's loopback address.
		return usagef("--host-lo-to-ns-lo cannot be used with --no-splice")
	}
	return nil
}

func buildOffloads(c *cli.Context, cfg *config.Config) error {
	if c.IsSet("vhost") {
		switch v := c.String("vhost"); v {
		case "off":
			cfg.Vhost = config.VhostOff
		case "auto":
			cfg.Vhost = config.VhostAuto
		case "on":
			cfg.Vhost = config.VhostOn
		default:
			return badValue("--vhost", v, "must be auto, on or off")
		}
	}
	cfg.TapNAPI = c.Bool("tap-napi")
	return nil
}

// buildTarget decides between spawn and attach mode from the positional
// arguments, --netns and --userns, as pasta does: with --netns there must be
// no arguments; a single all-digits argument is a PID; anything else is the
// command to run.
func buildTarget(c *cli.Context, cfg *config.Config, pos []string) error {
	if c.Bool("oci-hook") {
		return buildHook(c, cfg, pos) // hook.go
	}
	netns, userns := c.String("netns"), c.String("userns")
	cfg.NoNetNSQuit = c.Bool("no-netns-quit")
	cfg.NetNSOnly = c.Bool("netns-only")
	var err error
	if c.IsSet("userns") {
		if userns, err = userNSFile("--userns", userns); err != nil {
			return err
		}
	}
	switch {
	case c.IsSet("netns"):
		if len(pos) > 0 {
			return usagef("--netns cannot be combined with a PID or a command (got %q)", pos[0])
		}
		if netns == "" || netns == "." || netns == ".." {
			return badValue("--netns", netns, "expected a path or a name under /run/netns")
		}
		path := netns
		if !strings.Contains(netns, "/") {
			path = filepath.Join("/run/netns", netns)
		} else if path, err = filepath.Abs(netns); err != nil {
			return badValue("--netns", netns, err.Error())
		}
		if _, err := nsFile("--netns", path); err != nil {
			err.(*OptionError).Value = netns
			err.(*OptionError).Reason += " (" + path + ")"
			return err
		}
		cfg.Mode, cfg.NetNS, cfg.UserNS = config.ModeAttach, path, userns
		if userns == "" {
			cfg.NetNSOnly = true
		}
	case len(pos) == 1 && isDigits(pos[0]):
		pid, err := strconv.Atoi(pos[0])
		if err != nil || pid < 1 {
			return badValue("PID", pos[0], "not a process ID")
		}
		net := fmt.Sprintf("/proc/%d/ns/net", pid)
		if _, err := os.Stat(net); err != nil {
			return badValue("PID", pos[0], "no such process (cannot access "+net+")")
		}
		cfg.Mode, cfg.PID, cfg.NetNS = config.ModeAttach, pid, net
		cfg.UserNS = userns
		if userns == "" {
			cfg.UserNS = fmt.Sprintf("/proc/%d/ns/user", pid)
		}
	default:
		// A command: its namespaces belong to the --userns given
		// (joined first), or with --netns-only to gopasta's own.
		cfg.Mode = config.ModeSpawn
		cfg.Command = append([]string(nil), pos...)
		cfg.UserNS = userns
	}
	if cfg.NetNSOnly {
		cfg.UserNS = ""
	}
	return nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
