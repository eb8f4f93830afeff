// Package fwdrule is port forwarding's one rule model and one grammar:
// pasta's 56-byte forwarding rule and rule table, which the control
// protocol carries and run-time port forwarding (internal/portfwd) keeps
// as its one description of what is forwarded; the checks a rule must pass
// to enter a table; the text form pesto lists; and the port specification
// grammar (grammar.go) that gopasta's command line, pesto and the tests
// all read, applied to a table in pasta's meaning or in the command line's
// dialect of it (apply.go, options.go).
//
// # Theory of operation
//
// A Rule forwards the ports First..Last of one protocol, listened on at an
// address (or, with FlagDual, at any address of both families) and
// optionally on one interface, to To+(p-First) at the target address (or
// the usual target when that is unspecified). Addresses are kept as
// pasta's 16-byte "inany" form, IPv4 as IPv4-mapped IPv6, so that a Rule is
// exactly its wire record and two rules are the same rule when their bytes
// are (Rule is comparable with ==, padding included).
//
// A Table is the rules of one initiating side ("pif": HOST for -t/-u,
// SPLICE for -T/-U) with the capabilities of that side. Table.Add is the
// single gate into a table: it checks the rule alone (ports, flags,
// families and protocols against the capabilities, target address), then
// against the rules already there (a conflict is the same protocol,
// overlapping ports and overlapping listen addresses), then the table's
// limits. The control server builds a pending table with Add and applies
// it only if every rule passed; pesto's edits and the command line's
// options go through the same Add, so a conflict has one definition.
//
// A value of -t, -u, -T or -U is parsed once (Parse) into a Spec. Apply
// adds a Spec's rules to a table: with Pasta, as pasta and its pesto do;
// with Gopasta, with the command line's extensions (see Dialect).
// Options.Tables builds both tables from the command line's four options,
// pasta's defaults applied.
package fwdrule

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Pif identifies the interface a table's connections come from, as the
// protocol numbers them. Only HOST and SPLICE have tables in pasta mode.
type Pif uint8

const (
	PifNone   Pif = 0 // terminates a list of tables on the wire
	PifHost   Pif = 1 // host sockets: -t, -u
	PifTap    Pif = 2 // the guest's interface: never has a table
	PifSplice Pif = 3 // namespace loopback sockets: -T, -U
	NumPifs       = 4
)

// String is the pif's protocol name ("HOST", "SPLICE").
func (p Pif) String() string {
	switch p {
	case PifNone:
		return "<none>"
	case PifHost:
		return "HOST"
	case PifTap:
		return "TAP"
	case PifSplice:
		return "SPLICE"
	}
	return "pif" + strconv.Itoa(int(p))
}

// Caps are the forwarding capabilities of a table's side.
type Caps uint32

const (
	CapIPv4   Caps = 1 << 0
	CapIPv6   Caps = 1 << 1
	CapTCP    Caps = 1 << 2
	CapUDP    Caps = 1 << 3
	CapScan   Caps = 1 << 4 // "auto" rules (pasta only)
	CapIfname Caps = 1 << 5 // binding to a device (SO_BINDTODEVICE) works
)

// Rule flags.
const (
	FlagDual uint8 = 1 << 0 // any IPv4 and IPv6 address; Addr must be ::
	FlagWeak uint8 = 1 << 1 // some ports of the range may fail to bind
	FlagScan uint8 = 1 << 2 // only while the target port listens on the other side

	flagsAllowed = FlagDual | FlagWeak | FlagScan
)

// IP protocol numbers a rule may carry.
const (
	ProtoTCP uint8 = 6
	ProtoUDP uint8 = 17
)

// Limits of the record and of one table.
const (
	RuleSize   = 56        // bytes of one encoded rule
	IfNameSize = 16        // IFNAMSIZ: the interface name field, NUL included
	MaxRules   = 255       // rules in one table
	MaxPorts   = 65536 * 5 // ports summed over a table's rules
	NumPorts   = 65536     // port numbers 0..65535
	maxIfname  = IfNameSize - 1
)

// Rule is one forwarding rule, field for field the wire record.
type Rule struct {
	Addr   [16]byte // listen address (inany); :: with FlagDual
	TAddr  [16]byte // target address (inany); unspecified = the default target
	Ifname [IfNameSize]byte
	First  uint16 // first listen port
	Last   uint16 // last listen port, inclusive
	To     uint16 // target port of First
	Proto  uint8  // ProtoTCP or ProtoUDP
	Flags  uint8
}

// Inany is a's 16-byte form: IPv6 as is, IPv4 as IPv4-mapped IPv6. An
// invalid a is ::.
func Inany(a netip.Addr) [16]byte {
	if !a.IsValid() {
		return [16]byte{}
	}
	return netip.AddrFrom16(a.As16()).As16() // As16 maps IPv4
}

// AddrFrom is the address an inany form stands for, IPv4 unmapped.
func AddrFrom(b [16]byte) netip.Addr { return netip.AddrFrom16(b).Unmap() }

// IsV4 reports whether b is an IPv4(-mapped) address.
func IsV4(b [16]byte) bool {
	for _, c := range b[:10] {
		if c != 0 {
			return false
		}
	}
	return b[10] == 0xff && b[11] == 0xff
}

// IsUnspecified reports whether b is :: or 0.0.0.0.
func IsUnspecified(b [16]byte) bool {
	if IsV4(b) {
		return b[12]|b[13]|b[14]|b[15] == 0
	}
	return b == [16]byte{}
}

// isMulticast: IPv6 multicast, IPv4 multicast or limited broadcast.
func isMulticast(b [16]byte) bool {
	if b[0] == 0xff {
		return true
	}
	if IsV4(b) {
		return b[12]&0xf0 == 0xe0 || (b[12]&b[13]&b[14]&b[15]) == 0xff
	}
	return false
}

// Any6 and Any4 are the unspecified addresses in inany form.
var (
	Any6 = [16]byte{}
	Any4 = [16]byte{10: 0xff, 11: 0xff}
)

// IfnameString is the interface name up to its NUL.
func (r *Rule) IfnameString() string {
	n := 0
	for n < len(r.Ifname) && r.Ifname[n] != 0 {
		n++
	}
	return string(r.Ifname[:n])
}

// SetIfname stores name NUL-padded; it reports false when the name does
// not fit (15 bytes at most).
func (r *Rule) SetIfname(name string) bool {
	if len(name) > maxIfname {
		return false
	}
	r.Ifname = [IfNameSize]byte{}
	copy(r.Ifname[:], name)
	return true
}

// Dual reports FlagDual.
func (r *Rule) Dual() bool { return r.Flags&FlagDual != 0 }

// Weak reports FlagWeak.
func (r *Rule) Weak() bool { return r.Flags&FlagWeak != 0 }

// Scan reports FlagScan.
func (r *Rule) Scan() bool { return r.Flags&FlagScan != 0 }

// UDP reports whether the rule forwards UDP.
func (r *Rule) UDP() bool { return r.Proto == ProtoUDP }

// ListenAddr is the listen address; invalid for a dual-stack rule, which
// listens on any address of both families.
func (r *Rule) ListenAddr() netip.Addr {
	if r.Dual() {
		return netip.Addr{}
	}
	return AddrFrom(r.Addr)
}

// Target is the target address; invalid when unspecified (the default
// target of the side applies).
func (r *Rule) Target() netip.Addr {
	if IsUnspecified(r.TAddr) {
		return netip.Addr{}
	}
	return AddrFrom(r.TAddr)
}

// ToPort is where listen port p goes (p in First..Last).
func (r *Rule) ToPort(p uint16) uint16 { return r.To + (p - r.First) }

// Ports is the number of ports the rule covers (0 for an invalid range).
func (r *Rule) Ports() int {
	if r.Last < r.First {
		return 0
	}
	return int(r.Last) - int(r.First) + 1
}

// Append appends the 56-byte wire record of r: fields in order, ports in
// network byte order.
func (r *Rule) Append(b []byte) []byte {
	b = append(b, r.Addr[:]...)
	b = append(b, r.TAddr[:]...)
	b = append(b, r.Ifname[:]...)
	b = binary.BigEndian.AppendUint16(b, r.First)
	b = binary.BigEndian.AppendUint16(b, r.Last)
	b = binary.BigEndian.AppendUint16(b, r.To)
	return append(b, r.Proto, r.Flags)
}

// Decode reads a rule from the first RuleSize bytes of b, which must be
// that long. Nothing is checked: Table.Add does that.
func Decode(b []byte) Rule {
	_ = b[RuleSize-1]
	var r Rule
	copy(r.Addr[:], b[0:16])
	copy(r.TAddr[:], b[16:32])
	copy(r.Ifname[:], b[32:48])
	r.First = binary.BigEndian.Uint16(b[48:])
	r.Last = binary.BigEndian.Uint16(b[50:])
	r.To = binary.BigEndian.Uint16(b[52:])
	r.Proto, r.Flags = b[54], b[55]
	return r
}

// ProtoName is the protocol's name as listings show it.
func ProtoName(p uint8) string {
	switch p {
	case ProtoTCP:
		return "TCP"
	case ProtoUDP:
		return "UDP"
	case 1:
		return "ICMP"
	case 58:
		return "ICMPv6"
	}
	return "<unknown protocol>"
}

// FormatAddr renders an inany address as pasta does: IPv4-mapped as dotted
// IPv4, the rest as inet_ntop(3) prints IPv6 (including its dotted tail
// for IPv4-compatible addresses such as ::1.2.3.4).
func FormatAddr(b [16]byte) string {
	if IsV4(b) {
		return netip.AddrFrom4([4]byte(b[12:16])).String()
	}
	zero12 := true
	for _, c := range b[:12] {
		if c != 0 {
			zero12 = false
			break
		}
	}
	if zero12 && (b[12] != 0 || b[13] != 0) {
		return "::" + netip.AddrFrom4([4]byte(b[12:16])).String()
	}
	return netip.AddrFrom16(b).String()
}

// String is the rule as pesto lists it and pasta logs it, e.g.
// "TCP [*]:8080  =>  8080 " or
// "UDP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)". Lines
// without flags end in one space, as pasta's do.
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(ProtoName(r.Proto))
	b.WriteString(" [")
	if r.Dual() {
		b.WriteByte('*')
	} else {
		b.WriteString(FormatAddr(r.Addr))
	}
	b.WriteByte(']')
	if n := r.IfnameString(); n != "" {
		b.WriteByte('%')
		b.WriteString(n)
	}
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(int(r.First)))
	if r.Last != r.First {
		b.WriteByte('-')
		b.WriteString(strconv.Itoa(int(r.Last)))
	}
	b.WriteString("  =>  ")
	if !IsUnspecified(r.TAddr) {
		b.WriteString(FormatAddr(r.TAddr))
		b.WriteByte(':')
	}
	b.WriteString(strconv.Itoa(int(r.To)))
	if r.Last != r.First {
		b.WriteByte('-')
		b.WriteString(strconv.Itoa(int(r.Last - r.First + r.To)))
	}
	b.WriteByte(' ')
	if r.Weak() {
		b.WriteString(" (best effort)")
	}
	if r.Scan() {
		b.WriteString(" (auto-scan)")
	}
	return b.String()
}

// GoString helps test failures: the text form and the raw flags.
func (r Rule) GoString() string { return fmt.Sprintf("Rule{%s flags=%#x}", r.String(), r.Flags) }
