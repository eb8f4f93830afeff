package cmdline

// The option set: every pasta option with its spelling, category and help
// text.

import "github.com/urfave/cli/v2"

// Flag categories, in the order the help text and the man page show them.
const (
	catGeneral   = "General"
	catAddress   = "Addresses and interfaces"
	catDNS       = "DNS"
	catProtocol  = "Protocols"
	catMapping   = "Address mapping"
	catPorts     = "Port forwarding"
	catNamespace = "Namespace"
	catOffload   = "Offloads (gopasta only)"
)

// Categories lists the flag categories in display order (the man page
// generator uses it; urfave/cli would otherwise sort them by name).
var Categories = []string{catGeneral, catAddress, catDNS, catProtocol, catMapping, catPorts, catNamespace, catOffload}

// Placeholders in Usage strings are in backquotes: urfave/cli shows them as
// the value name in --help, and the man page generator italicises them.

func boolFlag(cat, name, short, usage string) *cli.BoolFlag {
	f := &cli.BoolFlag{Name: name, Usage: usage, Category: cat, DisableDefaultText: true}
	if short != "" {
		f.Aliases = []string{short}
	}
	return f
}

func stringFlag(cat, name, short, usage, def string) *cli.StringFlag {
	f := &cli.StringFlag{Name: name, Usage: usage, Category: cat, DefaultText: def}
	if short != "" {
		f.Aliases = []string{short}
	}
	return f
}

func sliceFlag(cat, name, short, usage, def string) *cli.StringSliceFlag {
	f := &cli.StringSliceFlag{Name: name, Usage: usage, Category: cat, DefaultText: def}
	if short != "" {
		f.Aliases = []string{short}
	}
	return f
}

// flags is pasta's pasta-mode option set with the same long and short
// names, followed by gopasta's own. Every value is taken as a string and
// validated in build.go, so errors read the same for every option. Options
// that may be repeated are slices; the rest follow "last one wins", as in
// pasta.
func flags() []cli.Flag {
	return []cli.Flag{
		boolFlag(catGeneral, "debug", "d", "Be verbose"),
		boolFlag(catGeneral, "trace", "", "Be extra verbose, show single packets (a line per flow and batch of frames from the namespace, and per event on a flow's host socket); implies --debug"),
		stringFlag(catGeneral, "stats", "", "Log event counters every `DELAY` seconds", "off"),
		boolFlag(catGeneral, "quiet", "q", "Don't print informational messages"),
		boolFlag(catGeneral, "foreground", "f", "Don't go to the background once ready (attach mode)"),
		boolFlag(catGeneral, "stderr", "e", "Deprecated, accepted and ignored (gopasta logs to standard error unless --log-file, and to the system logger once in the background)"),
		stringFlag(catGeneral, "log-file", "l", "Log to file `PATH` instead of standard error, and of the system logger (/dev/log) once in the background", ""),
		stringFlag(catGeneral, "log-size", "", "Limit the log file to `SIZE` bytes (suffixes k, M, G allowed); when it is full, the oldest lines make room", "1048576"),
		stringFlag(catGeneral, "runas", "", "Run as `USER`: UID[:GID] or LOGIN[:GROUP] (needs privileges)", "nobody, if started as root"),
		boolFlag(catGeneral, "chroot-fallback", "", "Accepted for pasta's command line: gopasta always enters its empty root with chroot(2), never pivot_root(2)"),
		stringFlag(catGeneral, "pcap", "p", "Capture namespace-side traffic to `FILE` in pcap format", ""),
		stringFlag(catGeneral, "pid", "P", "Write own PID to `FILE` once ready (kept at exit, as pasta keeps it)", ""),
		stringFlag(catGeneral, "conf-path", "c", "Serve the port forwarding rules at control socket `PATH` (created 0600, removed at exit), for pesto to read and replace at run time (protocol version 2)", ""),
		boolFlag(catGeneral, "version", "", "Show version and exit"),

		stringFlag(catAddress, "mtu", "m", "Set the namespace interface's MTU to `MTU`; 0 leaves the kernel's default", "65520"),
		sliceFlag(catAddress, "address", "a", "Assign IPv4 or IPv6 address `ADDR[/LEN]` (once per family)", "from the host template interface"),
		stringFlag(catAddress, "netmask", "n", "IPv4 netmask `MASK`, dot-decimal or prefix length", "from the host"),
		stringFlag(catAddress, "mac-addr", "M", "Use `ADDR` as gopasta's own MAC address on the tap", "9a:55:9a:55:9a:55"),
		sliceFlag(catAddress, "gateway", "g", "IPv4 or IPv6 gateway `ADDR` (once per family)", "from the host template interface"),
		stringFlag(catAddress, "interface", "i", "Host template interface `NAME` for addresses and routes", "interface with the first default route"),
		sliceFlag(catAddress, "outbound", "o", "Bind outbound sockets to source `ADDR` (once per family)", "chosen by the routing table"),
		stringFlag(catAddress, "outbound-if4", "", "Bind IPv4 outbound sockets to host interface `NAME`", ""),
		stringFlag(catAddress, "outbound-if6", "", "Bind IPv6 outbound sockets to host interface `NAME`", ""),
		stringFlag(catAddress, "hostname", "H", "Host name `NAME` for the namespace (and DHCP option 12)", "pasta-<host name>"),
		stringFlag(catAddress, "fqdn", "", "Fully qualified domain name `NAME` for DHCP option 81 and DHCPv6", ""),

		sliceFlag(catDNS, "dns", "D", "Name server `ADDR` to announce, or none (repeatable)", "from /etc/resolv.conf"),
		sliceFlag(catDNS, "dns-forward", "", "Redirect DNS traffic for `ADDR` to the host's resolver (once per family)", ""),
		sliceFlag(catDNS, "dns-host", "", "Host resolver `ADDR` that --dns-forward traffic goes to (once per family)", "first name server in /etc/resolv.conf"),
		sliceFlag(catDNS, "search", "S", "Space-separated search domain `LIST`, or none (repeatable)", "from /etc/resolv.conf"),
		boolFlag(catDNS, "dhcp-dns", "", "Announce name servers via DHCP, DHCPv6 and NDP"),
		boolFlag(catDNS, "no-dhcp-dns", "", "Don't announce name servers (the default in pasta mode)"),
		boolFlag(catDNS, "dhcp-search", "", "Announce the search list via DHCP, DHCPv6 and NDP"),
		boolFlag(catDNS, "no-dhcp-search", "", "Don't announce the search list (the default in pasta mode)"),

		boolFlag(catProtocol, "no-tcp", "", "Disable TCP"),
		boolFlag(catProtocol, "no-udp", "", "Disable UDP"),
		boolFlag(catProtocol, "no-icmp", "", "Disable ICMP and ICMPv6 echo"),
		boolFlag(catProtocol, "no-dhcp", "", "Disable the DHCP server"),
		boolFlag(catProtocol, "no-ndp", "", "Disable NDP responses"),
		boolFlag(catProtocol, "no-dhcpv6", "", "Disable the DHCPv6 server"),
		boolFlag(catProtocol, "no-ra", "", "Disable router advertisements"),
		boolFlag(catProtocol, "freebind", "", "Allow binding forwarded ports to addresses the host does not have (yet)"),
		boolFlag(catProtocol, "ipv4-only", "4", "IPv4 only"),
		boolFlag(catProtocol, "ipv6-only", "6", "IPv6 only"),

		sliceFlag(catMapping, "map-host-loopback", "", "Namespace traffic to `ADDR` goes to the host's loopback, or none", "the gateway address"),
		boolFlag(catMapping, "no-map-gw", "", "Don't map the gateway address to the host's loopback"),
		sliceFlag(catMapping, "map-guest-addr", "", "Namespace traffic to `ADDR` goes to the host's own address, or none", "none"),

		sliceFlag(catPorts, "tcp-ports", "t", "Forward host TCP ports to the namespace: `SPEC` is none or [ADDR[%IF]/]PORTS, e.g. 8080:80 or 8000-8010,auto (repeatable; PORT FORWARDING in gopasta(1))", "auto"),
		sliceFlag(catPorts, "udp-ports", "u", "Forward host UDP ports to the namespace, `SPEC` as for -t (repeatable)", "auto"),
		sliceFlag(catPorts, "tcp-ns", "T", "Forward namespace loopback TCP ports to the host, `SPEC` as for -t (repeatable)", "auto"),
		sliceFlag(catPorts, "udp-ns", "U", "Forward namespace loopback UDP ports to the host, `SPEC` as for -t (repeatable)", "auto"),

		stringFlag(catNamespace, "fd", "F", "Use the TAP device open at descriptor `FD` instead of creating one: the caller opened it in the target namespace (a PID or --netns) and configures it, unless --config-net", ""),
		stringFlag(catNamespace, "ns-ifname", "I", "Name of the tap interface `NAME` in the namespace", "host template interface's name, else tap0"),
		stringFlag(catNamespace, "userns", "", "User namespace `PATH` to join: with a PID or --netns, the target's; with a command, the one its namespaces belong to", "the PID's user namespace"),
		stringFlag(catNamespace, "netns", "", "Network namespace to join: a `PATH|NAME`, NAME meaning /run/netns/NAME", ""),
		boolFlag(catNamespace, "netns-only", "", "Join only the network namespace, not a user namespace (implied by --netns without --userns); with a command, create no user namespace: its namespaces belong to gopasta's own, which needs CAP_SYS_ADMIN there"),
		boolFlag(catNamespace, "no-netns-quit", "", "Keep running when the target namespace goes away"),
		boolFlag(catNamespace, "oci-hook", "", "Run as an OCI runtime hook (createRuntime or prestart): read the container's state from standard input and attach to its PID, adding the options in its io.gopasta.args annotation"),
		boolFlag(catNamespace, "config-net", "", "Configure addresses, routes and link state in the namespace; the routes name reno as TCP congestion control"),
		boolFlag(catNamespace, "no-copy-routes", "", "Deprecated: with --config-net, set up only the default route"),
		boolFlag(catNamespace, "no-copy-addrs", "", "Deprecated: with --config-net, set up only one address"),
		stringFlag(catNamespace, "ns-mac-addr", "", "MAC address `ADDR` of the tap interface in the namespace", "chosen by the kernel"),
		boolFlag(catNamespace, "host-lo-to-ns-lo", "", "Spliced connections to a host loopback address reach the same address in the namespace, not its own address"),
		boolFlag(catNamespace, "no-splice", "", "Disable the loopback bypass (splice) path"),
		boolFlag(catNamespace, "splice-only", "", "No tap interface: loopback forwarding only"),

		stringFlag(catOffload, "vhost", "", "Use vhost-net for the tap data path: `MODE` is auto, on or off", "off"),
		boolFlag(catOffload, "tap-napi", "", "Open the tap with IFF_NAPI"),
	}
}
