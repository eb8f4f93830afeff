// Package header gives typed, allocation-free views over the packet headers
// gopasta reads and writes on the namespace link: Ethernet, ARP, IPv4, IPv6
// (with its extension header chain), TCP (with options), UDP, ICMPv4 and
// ICMPv6 (with NDP options), plus the internet checksum.
//
// Each view is a byte slice type (type IPv4 []byte) whose methods read and
// write fields in place at named offsets, so parsing a frame costs nothing
// but bounds checks. Accessors assume the view was validated first (IsValid,
// or a length check against the *MinimumSize constants); validators never
// panic on any input, which the fuzz targets in this package check.
package header
