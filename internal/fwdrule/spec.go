package fwdrule

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// pasta's port specification grammar, as pesto applies a -t, -u, -T or -U
// value to a table (gopasta's own command line has a richer dialect in
// internal/config; this one must match what pasta's pesto sends):
//
//	none
//	[PREFIX/]CHUNK[,CHUNK]...
//	PREFIX = ADDR[%IF] | [*][%IF]           (not for -T, -U)
//	CHUNK  = N[-M][:T[-U] | :TADDR | :TADDR/T[-U]]   include
//	       | ~N[-M]                                    exclude
//	       | auto                                      FlagScan on every rule
//	       | all[:TADDR]                               only without includes
//
// ADDR and TADDR are IPv6 or IPv4, optionally in brackets, IPv6 tried
// first. Each include range minus the exclusions becomes one rule per
// contiguous run. A value without includes forwards 1-65535 minus the
// exclusions and the ephemeral range, FlagWeak. No address means FlagDual
// when the side has both families, else the one family's any address.
// -T and -U listen on the namespace's loopback: interface "lo" when
// binding to a device works, else one rule set per loopback address.

// SpecError is a value that does not parse; pesto's message for it.
type SpecError struct{ Spec, Msg string }

func (e *SpecError) Error() string { return e.Msg }

// ApplyError is a rule from a value that could not be added or deleted:
// Err says why (a *RuleError), Op is "add" or "delete".
type ApplyError struct {
	Op   string
	Rule Rule
	Err  error
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("%v; Unable to %s rule %s", e.Err, e.Op, e.Rule)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Ephemeral is the port range "all" and exclusions-only values leave out.
type Ephemeral struct{ First, Last uint16 }

// DefaultEphemeral is RFC 6335's dynamic range.
var DefaultEphemeral = Ephemeral{49152, 65535}

// ApplySpec applies one option value to t: opt is 't', 'u', 'T' or 'U'; del
// deletes the resulting rules instead of adding them. Rules are added or
// deleted one at a time, so an error leaves t partly changed: the caller
// (pesto) then gives up without sending anything. warn receives
// non-fatal notes (nil discards them).
func ApplySpec(t *Table, opt byte, spec string, del bool, eph Ephemeral, warn func(string)) error {
	var proto uint8
	switch opt {
	case 't', 'T':
		proto = ProtoTCP
	case 'u', 'U':
		proto = ProtoUDP
	default:
		return fmt.Errorf("fwdrule: bad option -%c", opt)
	}
	ns := opt == 'T' || opt == 'U'
	if warn == nil {
		warn = func(string) {}
	}
	if spec == "none" {
		for i := range t.Rules {
			if t.Rules[i].Proto == proto {
				return &SpecError{Spec: spec, Msg: fmt.Sprintf("-%c none conflicts with previous options", opt)}
			}
		}
		return nil
	}
	addr, ifname, rest, ok := parseAddrIfname(spec)
	p := spec
	if ok {
		if ns {
			return &SpecError{Spec: spec, Msg: fmt.Sprintf("Listening address not allowed for -%c %s", opt, spec)}
		}
		if ifname == "." || ifname == ".." {
			return &SpecError{Spec: spec, Msg: "Invalid interface name: " + ifname}
		}
		p = rest
	} else {
		addr, ifname = nil, ""
	}
	a := applier{t: t, del: del, proto: proto, eph: eph, spec: p}
	if ns {
		if t.Caps&CapIfname == 0 {
			warn(fmt.Sprintf("SO_BINDTODEVICE unavailable, forwarding only 127.0.0.1 and ::1 for '-%c %s'", opt, spec))
			if t.Caps&CapIPv4 != 0 {
				lo4 := Inany(netip.AddrFrom4([4]byte{127, 0, 0, 1}))
				if err := a.ports(&lo4, ""); err != nil {
					return err
				}
			}
			if t.Caps&CapIPv6 != 0 {
				lo6 := Inany(netip.IPv6Loopback())
				return a.ports(&lo6, "")
			}
			return nil
		}
		ifname = "lo"
	}
	if addr == nil && t.Caps&CapIPv4 == 0 {
		any6 := Any6
		addr = &any6
	} else if addr == nil && t.Caps&CapIPv6 == 0 {
		any4 := Any4
		addr = &any4
	}
	if ifname != "" && t.Caps&CapIfname == 0 {
		return &SpecError{Spec: spec, Msg: fmt.Sprintf("Device binding for '-%c %s' unsupported (requires kernel 5.7+)", opt, spec)}
	}
	return a.ports(addr, ifname)
}

// applier carries one value's application to a table.
type applier struct {
	t     *Table
	del   bool
	proto uint8
	eph   Ephemeral
	spec  string // the port part, for messages
}

type chunkKind int

const (
	chunkAll chunkKind = iota
	chunkAuto
	chunkExclude
	chunkInclude
)

type chunk struct {
	kind          chunkKind
	first, last   uint16 // listen range (include, exclude)
	taddr         [16]byte
	tfirst, tlast uint16 // target range (include)
}

func (a *applier) bad() error {
	return &SpecError{Spec: a.spec, Msg: fmt.Sprintf("Invalid port specifier '%s'", a.spec)}
}

// ports parses the chunks of a.spec in two passes, as pasta: exclusions
// and auto first, so that they apply to every include of the value.
func (a *applier) ports(addr *[16]byte, ifname string) error {
	var exclude [NumPorts / 64]uint64
	excluded := func(p int) bool { return exclude[p>>6]&(1<<(p&63)) != 0 }
	var flags uint8
	err := a.eachChunk(func(c chunk) error {
		switch c.kind {
		case chunkAuto:
			if a.t.Caps&CapScan == 0 {
				return &SpecError{Spec: a.spec, Msg: "'auto' port forwarding is only allowed for pasta"}
			}
			flags |= FlagScan
		case chunkExclude:
			for q := int(c.first); q <= int(c.last); q++ {
				exclude[q>>6] |= 1 << (q & 63)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	excludeOnly := true
	allTaddr := Any6
	err = a.eachChunk(func(c chunk) error {
		switch c.kind {
		case chunkAll:
			allTaddr = c.taddr
		case chunkInclude:
			excludeOnly = false
			if c.tlast-c.tfirst != c.last-c.first {
				return a.bad()
			}
			return a.rangeExcept(addr, ifname, int(c.first), int(c.last), excluded, c.taddr, c.tfirst, flags)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if excludeOnly {
		for q := int(a.eph.First); q <= int(a.eph.Last) && a.eph.First <= a.eph.Last; q++ {
			exclude[q>>6] |= 1 << (q & 63)
		}
		return a.rangeExcept(addr, ifname, 1, NumPorts-1, excluded, allTaddr, 1, flags|FlagWeak)
	}
	return nil
}

// eachChunk calls fn for every comma-separated chunk of a.spec in order,
// stopping at fn's first error; a chunk that does not parse, or text left
// after the last one, is a.bad().
func (a *applier) eachChunk(fn func(c chunk) error) error {
	p := a.spec
	for {
		c, rest, ok := parseChunk(p)
		if !ok {
			return a.bad()
		}
		if err := fn(c); err != nil {
			return err
		}
		if p, ok = strings.CutPrefix(rest, ","); !ok {
			break
		}
	}
	if p != "" {
		return a.bad() // trailing garbage
	}
	return nil
}

// rangeExcept adds (or deletes) one rule per contiguous run of
// first..last outside the exclusions, targets shifted along.
func (a *applier) rangeExcept(addr *[16]byte, ifname string, first, last int, excluded func(int) bool,
	taddr [16]byte, tfirst uint16, flags uint8) error {
	r := Rule{TAddr: taddr, Proto: a.proto, Flags: flags}
	if addr != nil {
		r.Addr = *addr
	} else {
		r.Flags |= FlagDual
	}
	if !r.SetIfname(ifname) {
		return &SpecError{Spec: a.spec, Msg: "Invalid interface name: " + ifname}
	}
	delta := tfirst - uint16(first)
	for base := first; base <= last; base++ {
		if excluded(base) {
			continue
		}
		i := base
		for i <= last && !excluded(i) {
			i++
		}
		r.First, r.Last, r.To = uint16(base), uint16(i-1), uint16(base)+delta
		var err error
		op := "add"
		if a.del {
			op = "delete"
			err = a.t.Delete(r)
		} else {
			err = a.t.Add(r)
		}
		if err != nil {
			return &ApplyError{Op: op, Rule: r, Err: err}
		}
		base = i - 1
	}
	return nil
}

// parseChunk parses one chunk at the start of s.
func parseChunk(s string) (c chunk, rest string, ok bool) {
	switch {
	case strings.HasPrefix(s, "all"):
		c.kind, rest = chunkAll, s[3:]
		if t, ok := strings.CutPrefix(rest, ":"); ok {
			if a, r, ok := parseInany(t); ok {
				c.taddr, rest = a, r
			}
		}
		return c, rest, true
	case strings.HasPrefix(s, "auto"):
		c.kind = chunkAuto
		return c, s[4:], true
	case strings.HasPrefix(s, "~"):
		f, l, r, ok := parsePortRange(s[1:])
		if !ok {
			return c, s, false
		}
		c.kind, c.first, c.last = chunkExclude, f, l
		return c, r, true
	}
	f, l, r, ok := parsePortRange(s)
	if !ok {
		return c, s, false
	}
	c.kind, c.first, c.last = chunkInclude, f, l
	c.tfirst, c.tlast = f, l
	if t, ok := strings.CutPrefix(r, ":"); ok {
		if a, r2, ok := parseInany(t); ok {
			if t2, ok := strings.CutPrefix(r2, "/"); ok {
				if tf, tl, r3, ok := parsePortRange(t2); ok {
					c.taddr, c.tfirst, c.tlast = a, tf, tl
					return c, r3, true
				}
			}
			c.taddr = a // target address only
			return c, r2, true
		}
		if tf, tl, r2, ok := parsePortRange(t); ok {
			c.tfirst, c.tlast = tf, tl
			return c, r2, true
		}
	}
	return c, r, true
}

// parseAddrIfname parses "ADDR[%IF]/" or "[*][%IF]/" at the start of s;
// addr is nil for the second form (any address).
func parseAddrIfname(s string) (addr *[16]byte, ifname, rest string, ok bool) {
	if a, r, ok := parseInany(s); ok {
		if ifn, r2, ok := parseIfspec(r); ok {
			if r3, ok := strings.CutPrefix(r2, "/"); ok {
				return &a, ifn, r3, true
			}
		}
	}
	r := strings.TrimPrefix(s, "*")
	if ifn, r2, ok := parseIfspec(r); ok {
		if r3, ok := strings.CutPrefix(r2, "/"); ok {
			return nil, ifn, r3, true
		}
	}
	return nil, "", s, false
}

// parseIfspec parses an optional "%IF": IF is 1-15 bytes up to a '/' or
// whitespace.
func parseIfspec(s string) (ifname, rest string, ok bool) {
	t, found := strings.CutPrefix(s, "%")
	if !found {
		return "", s, true
	}
	n := strings.IndexAny(t, "/ \f\n\r\t\v")
	if n < 0 {
		n = len(t)
	}
	if n == 0 || n >= IfNameSize {
		return "", s, false
	}
	return t[:n], t[n:], true
}

// parseInany parses an IPv6 address, else an IPv4 one, either optionally
// in brackets, at the start of s.
func parseInany(s string) (a [16]byte, rest string, ok bool) {
	if a, rest, ok = parseIP(s, true); ok {
		return a, rest, true
	}
	return parseIP(s, false)
}

// parseIP parses one address of a family: bracketed, everything up to
// ']'; else the longest run of characters the family's text form uses.
func parseIP(s string, v6 bool) (a [16]byte, rest string, ok bool) {
	p, bracket := strings.CutPrefix(s, "[")
	var n int
	if bracket {
		n = strings.IndexByte(p, ']')
		if n < 0 {
			n = len(p)
		}
	} else {
		chars := "0123456789."
		if v6 {
			chars = "0123456789aAbBcCdDeEfF:."
		}
		for n < len(p) && strings.IndexByte(chars, p[n]) >= 0 {
			n++
		}
	}
	max := 16 // INET_ADDRSTRLEN
	if v6 {
		max = 46 // INET6_ADDRSTRLEN
	}
	if n >= max {
		return a, s, false
	}
	ip, err := netip.ParseAddr(p[:n])
	if err != nil || ip.Zone() != "" || ip.Is4() == v6 {
		return a, s, false
	}
	p = p[n:]
	if bracket {
		if p, ok = strings.CutPrefix(p, "]"); !ok {
			return a, s, false
		}
	}
	return Inany(ip), p, true
}

// parsePortRange parses "N[-M]" with N <= M <= 65535 at the start of s.
func parsePortRange(s string) (first, last uint16, rest string, ok bool) {
	f, r, ok := parseUnsigned(s)
	if !ok {
		return 0, 0, s, false
	}
	l := f
	if t, found := strings.CutPrefix(r, "-"); found {
		if l, r, ok = parseUnsigned(t); !ok {
			return 0, 0, s, false
		}
	}
	if l < f || l >= NumPorts {
		return 0, 0, s, false
	}
	return uint16(f), uint16(l), r, true
}

// parseUnsigned reads a decimal number as strtoul(3) does: leading
// whitespace and a sign are allowed ("-1" is the largest value), and a
// value that overflows fails.
func parseUnsigned(s string) (v uint64, rest string, ok bool) {
	i := 0
	for i < len(s) && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		d := uint64(s[i] - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, s, false // ERANGE
		}
		v = v*10 + d
		i++
	}
	if i == start {
		return 0, s, false
	}
	if neg {
		v = -v
	}
	return v, s[i:], true
}

// IsSpecError reports whether err is a value that does not parse.
func IsSpecError(err error) bool {
	var se *SpecError
	return errors.As(err, &se)
}
