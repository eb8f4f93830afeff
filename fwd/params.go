package fwd

// NetParams: the addresses, gateway and DNS the engine answers with on the
// link.

import (
	"net"
	"net/netip"
)

// NetParams is what the engine answers with on the link: the addresses the
// namespace was given (or will get by DHCP, DHCPv6 and SLAAC), the gateway
// gopasta impersonates, and what it hands out for DNS. It is filled once at
// start-up from the configuration and the host template, and read-only after.
type NetParams struct {
	// OurMAC is the source of every frame gopasta sends (-M).
	OurMAC net.HardwareAddr
	// MTU of the namespace interface; DHCP option 26 and the RA MTU option.
	// 0 means the kernel's MTU, left as it is (-m 0): no MTU is announced,
	// or a DHCP client would change it, and frames are sized for the
	// largest.
	MTU int

	// IPv4: the namespace's address and prefix length, the gateway it routes
	// through (gopasta answers ARP for every address but Addr4).
	Addr4    netip.Addr
	Prefix4  int
	Gateway4 netip.Addr
	// IPv6: the namespace's global address (handed out by DHCPv6 as a /128,
	// and its /64 advertised for SLAAC), the gateway (often link-local), and
	// our own link-local address, the source of NDP and RA messages.
	Addr6    netip.Addr
	Prefix6  int
	Gateway6 netip.Addr
	OurLL6   netip.Addr // fe80::... derived from OurMAC unless Gateway6 is link-local

	// DNS servers and search domains advertised by DHCP, DHCPv6 and RAs
	// (empty when --no-dhcp-dns / --no-dhcp-search).
	DNS4   []netip.Addr
	DNS6   []netip.Addr
	Search []string

	Hostname string // DHCP option 12
	FQDN     string // DHCP option 81, DHCPv6 option 39

	// Switches for the responders.
	NoDHCP, NoDHCPv6, NoNDP, NoRA bool
}
