// Package config holds gopasta's run-time configuration: one struct built by
// the command line (internal/cmdline) and read by every other package.
// Values here are already validated; consumers never re-parse strings.
package config

import (
	"net"
	"net/netip"
	"time"

	"github.com/gopasta/gopasta/internal/fwdrule"
)

// Mode says how gopasta finds the namespace it serves.
type Mode int

const (
	// ModeSpawn runs Command in new user, net, UTS, IPC, mount and PID
	// namespaces and stays in the foreground until it exits.
	ModeSpawn Mode = iota
	// ModeAttach joins an existing network namespace, given by PID or by
	// --netns, and goes to the background once ready unless Foreground.
	ModeAttach
	// ModeOCIHook (--oci-hook) reads an OCI runtime's container state on
	// standard input and then runs as ModeAttach on the container's PID,
	// with the options of its annotation added (cmdline.HookAttach).
	ModeOCIHook
)

// VhostMode is the --vhost setting.
type VhostMode int

const (
	VhostOff VhostMode = iota
	VhostAuto
	VhostOn
)

// Config is everything the command line said, validated, with pasta's
// defaults filled in. Zero netip.Addr / empty slices mean "not given".
type Config struct {
	Mode Mode

	// Spawn mode: the command and its arguments (empty: $SHELL, else /bin/sh).
	Command []string
	// Attach mode: the target process (0 when --netns is used instead).
	PID int
	// NetNS is the netns file to join (--netns, with NAME expanded to
	// /run/netns/NAME), or /proc/PID/ns/net in PID mode; empty in spawn mode.
	NetNS string
	// UserNS is --userns PATH (or /proc/PID/ns/user in PID mode).
	UserNS string
	// NetNSOnly: join only the network namespace (--netns-only, implied by
	// --netns without --userns).
	NetNSOnly bool
	// NoNetNSQuit: keep running when the namespace goes away.
	NoNetNSQuit bool
	// TapFD (--fd, when TapFDSet) is a TAP device the caller opened in the
	// target namespace and passed at this descriptor: gopasta uses it
	// instead of creating one. Attach mode only.
	TapFD    int
	TapFDSet bool

	// Logging.
	Debug, Trace, Quiet bool
	LogFile             string
	LogSize             int64         // bytes; 0 = pasta's default (1 MiB)
	Stats               time.Duration // --stats DELAY; 0 = off

	Foreground bool
	PidFile    string
	PcapFile   string
	RunAs      *RunAs // nil unless --runas
	// ConfPath is -c/--conf-path: the control socket through which pesto
	// reads and replaces the forwarding rules at run time; "" = none.
	ConfPath string

	// Addresses. MTU -1 means "not given" (65520 applies), 0 means leave the
	// kernel's default alone.
	MTU         int
	Addr4       netip.Prefix // -a (IPv4), prefix length from -n or the template
	Addr6       netip.Prefix // -a (IPv6)
	Gateway4    netip.Addr   // -g
	Gateway6    netip.Addr
	OurMAC      net.HardwareAddr // -M, default 9a:55:9a:55:9a:55
	NSMAC       net.HardwareAddr // --ns-mac-addr, nil = kernel's choice
	Interface   string           // -i: host template interface (both families)
	Outbound4   netip.Addr       // -o (IPv4)
	Outbound6   netip.Addr       // -o (IPv6)
	OutboundIf4 string           // --outbound-if4
	OutboundIf6 string           // --outbound-if6
	Hostname    string           // -H
	FQDN        string           // --fqdn

	// Addr4LenGiven: Addr4's prefix length came from -a ADDR/LEN or -n. When
	// false it is the address class's (RFC 4632's historical guess), which
	// pasta uses too.
	Addr4LenGiven bool
	// Prefix4Len is -n as a prefix length (1-32), 0 if not given; it also
	// applies to the template's address when -a is not given.
	Prefix4Len int

	// DNS.
	DNS          []netip.Addr // -D; nil = from /etc/resolv.conf
	NoDNS        bool         // -D none
	Search       []string     // -S
	NoSearch     bool         // -S none
	DNSForward4  netip.Addr   // --dns-forward (IPv4)
	DNSForward6  netip.Addr   // --dns-forward (IPv6)
	DNSHost4     netip.Addr   // --dns-host
	DNSHost6     netip.Addr
	NoDHCPDNS    bool // --no-dhcp-dns
	NoDHCPSearch bool // --no-dhcp-search

	// Protocol switches.
	NoTCP, NoUDP, NoICMP          bool
	NoDHCP, NoNDP, NoDHCPv6, NoRA bool
	IPv4Only, IPv6Only            bool
	Freebind                      bool

	// Mapping.
	MapHostLoopback4, MapHostLoopback6 netip.Addr // --map-host-loopback
	NoMapHostLoopback                  bool       // --map-host-loopback none
	NoMapGW                            bool       // --no-map-gw
	MapGuestAddr4, MapGuestAddr6       netip.Addr // --map-guest-addr
	NoMapGuestAddr                     bool       // --map-guest-addr none

	// Namespace interface.
	NSIfName     string // -I
	ConfigNet    bool   // --config-net
	NoCopyRoutes bool
	NoCopyAddrs  bool
	HostLoToNSLo bool
	NoSplice     bool
	SpliceOnly   bool

	// Ports: host to namespace (-t, -u) and namespace to host (-T, -U),
	// checked against each other; port forwarding builds its tables
	// from them (fwdrule.Options.Tables).
	Ports fwdrule.Options

	// Offloads.
	Vhost   VhostMode // --vhost
	TapNAPI bool      // --tap-napi
}

// RunAs is a parsed --runas UID[:GID]|LOGIN[:GROUP].
type RunAs struct {
	UID, GID int
}

// DefaultMAC is the address gopasta answers with on the TAP, as pasta's.
var DefaultMAC = net.HardwareAddr{0x9a, 0x55, 0x9a, 0x55, 0x9a, 0x55}

// DefaultMTU is the namespace interface's MTU unless -m says otherwise.
const DefaultMTU = 65520
