package config

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
)

// Port forwarding specifications: the values of -t, -u, -T and -U.
//
// Grammar of one option value (pasta's, plus the extensions noted):
//
//	none
//	[SCOPE/]ITEM[,ITEM...]
//	SCOPE  = ADDR | ADDR%IFNAME | %IFNAME        (IPv6 may be bracketed)
//	ITEM   = FIRST[-LAST][:[TOADDR/]TOFIRST[-TOLAST]]
//	       | FIRST[-LAST]:TOADDR                 same ports, other address
//	       | ~FIRST[-LAST]                       exclusion
//	       | auto                                dynamic forwarding
//	       | all[:TOADDR]                        all non-ephemeral ports
//
// A value made only of exclusions means "all non-ephemeral ports but these",
// unless it has no scope and another value of the option includes ports:
// then its exclusions just apply to those.
// Where an IPv6 scope and an item with a target address read the same
// ("1:2::3/4"), the scope wins: that is the older, common syntax, and
// "1:[2::3]/4" spells the other meaning.
//
// Differences from pasta, deliberate:
//   - Exclusions apply to every value of the option, not only to the value
//     they appear in, so "-t 2000-5000 -t ~3000-3010" does what it says.
//   - Ranges may overlap when their bind scopes cannot both receive the same
//     connection (127.0.0.1/80 and ::1/80); pasta rejects any repeated port.
//   - Overlapping exclusions are accepted; they are harmless.
//   - Port 0 is rejected (pasta accepts it and binds an ephemeral port).
//   - auto and all may be combined with other items and scoped by address.
//   - A value that excludes every port it includes is an error at parse time
//     rather than a bind failure at start-up.

// PortMode summarises what a PortSpec asks for.
type PortMode uint8

const (
	// PortsUnset: the option was not given; the caller applies the default
	// (DefaultPortSpec, or MergeUDPFromTCP for UDP).
	PortsUnset PortMode = iota
	// PortsNone: "none", forward nothing.
	PortsNone
	// PortsSpec: only static rules (explicit ranges, all, exclusions only).
	PortsSpec
	// PortsAuto: at least one auto rule, possibly with static rules.
	PortsAuto
)

// DefaultEphemeral is RFC 6335's dynamic port range, used when the kernel's
// ip_local_port_range is not known (pasta falls back to the same).
var DefaultEphemeral = PortRange{49152, 65535}

// PortRange is an inclusive range of port numbers.
type PortRange struct{ First, Last uint16 }

// PortSet is a set of port numbers, one bit each.
type PortSet [1024]uint64

// Has reports whether p is in the set.
func (s *PortSet) Has(p uint16) bool { return s[p>>6]&(1<<(p&63)) != 0 }

// Add puts p in the set.
func (s *PortSet) Add(p uint16) { s[p>>6] |= 1 << (p & 63) }

// AddRange puts first..last (inclusive) in the set.
func (s *PortSet) AddRange(first, last uint16) {
	for p := int(first); p <= int(last); {
		if p&63 == 0 && p+63 <= int(last) { // whole word: long ranges stay cheap
			s[p>>6], p = ^uint64(0), p+64
			continue
		}
		s.Add(uint16(p))
		p++
	}
}

// next returns the first port in p..last whose membership equals member,
// or -1. Word at a time, so splitting 65535-port ranges stays cheap.
func (s *PortSet) next(p, last int, member bool) int {
	for p <= last {
		w := s[p>>6]
		if !member {
			w = ^w
		}
		if w >>= uint(p & 63); w != 0 {
			if p += bits.TrailingZeros64(w); p <= last {
				return p
			}
			return -1
		}
		p = (p | 63) + 1
	}
	return -1
}

// PortRule forwards the source ports First..Last. A connection to port p on
// the source side goes to port ToFirst+(p-First) on the other side.
type PortRule struct {
	BindAddr netip.Addr // source-side address to bind; zero = any, both families
	BindIf   string     // source-side interface (SO_BINDTODEVICE); "" = any
	First    uint16
	Last     uint16
	ToAddr   netip.Addr // target address; zero = the usual one for the direction
	ToFirst  uint16
	// Auto: First..Last are only candidates; forward a port while something
	// listens on it on the other side. Static rules take precedence.
	Auto bool
	// Weak: the rule came from all, exclusions only, or a UDP copy of TCP
	// ports; failing to bind some of its ports is not fatal.
	Weak bool
}

// String renders r in the option syntax, for logs and test messages.
func (r PortRule) String() string {
	var b strings.Builder
	if r.BindAddr.IsValid() {
		b.WriteString(r.BindAddr.String())
	}
	if r.BindIf != "" {
		b.WriteString("%" + r.BindIf)
	}
	if b.Len() > 0 {
		b.WriteByte('/')
	}
	fmt.Fprintf(&b, "%d-%d", r.First, r.Last)
	if r.Auto {
		b.WriteString("(auto)")
		return b.String()
	}
	b.WriteByte(':')
	if r.ToAddr.IsValid() {
		fmt.Fprintf(&b, "[%s]/", r.ToAddr)
	}
	fmt.Fprintf(&b, "%d-%d", r.ToFirst, int(r.ToFirst)+int(r.Last-r.First))
	return b.String()
}

// PortSpec is the parsed, merged value of every -t (or -u, -T, -U) given.
// Rules already have exclusions (and, for all, the ephemeral range) cut out,
// so each port of a rule is really forwarded; consumers just iterate.
type PortSpec struct {
	Mode     PortMode
	Rules    []PortRule
	Excluded PortSet // every ~ exclusion; auto forwarding must skip these too
}

// DefaultPortSpec is pasta's default for all four options: auto, any address.
func DefaultPortSpec() PortSpec {
	return PortSpec{Mode: PortsAuto, Rules: []PortRule{{First: 1, Last: 65535, ToFirst: 1, Auto: true}}}
}

// Forwarded reports where a static rule sends port, whatever its bind scope
// (the first matching rule, in option order).
func (s *PortSpec) Forwarded(port uint16) (dst uint16, ok bool) {
	for i := range s.Rules {
		r := &s.Rules[i]
		if !r.Auto && r.First <= port && port <= r.Last {
			return r.ToFirst + (port - r.First), true
		}
	}
	return 0, false
}

// AutoCandidate reports whether auto forwarding may pick port: an auto rule
// covers it, it is not excluded, and no static rule already forwards it.
func (s *PortSpec) AutoCandidate(port uint16) bool {
	if _, static := s.Forwarded(port); static || s.Excluded.Has(port) {
		return false
	}
	for i := range s.Rules {
		if r := &s.Rules[i]; r.Auto && r.First <= port && port <= r.Last {
			return true
		}
	}
	return false
}

// MergeUDPFromTCP applies pasta's rule for an unset UDP option: UDP also
// forwards the port numbers TCP forwards statically, with the same bind
// scope and target address but without port translation, on top of the
// default (auto). A given UDP option (udp.Mode != PortsUnset, including
// "none") is returned unchanged. The auto part's extra half of the rule —
// UDP auto also follows TCP listeners — belongs to the scanner, not here.
// The copies are Weak: the user never asked for UDP on them.
func MergeUDPFromTCP(tcp, udp PortSpec) PortSpec {
	if udp.Mode != PortsUnset {
		return udp
	}
	out := DefaultPortSpec()
	for _, r := range tcp.Rules {
		if r.Auto {
			continue
		}
		r.ToFirst, r.Weak = r.First, true
		out.Rules = append(out.Rules, r)
	}
	return out
}

// Sentinel errors, wrapped by PortSpecError, for errors.Is.
var (
	ErrPortSyntax   = errors.New("syntax error")
	ErrPortRange    = errors.New("port out of range")
	ErrPortOverlap  = errors.New("overlapping forwarding")
	ErrPortConflict = errors.New("conflicting port options")
)

// PortSpecError says which option value is wrong and why.
type PortSpecError struct {
	Spec   string // the whole option value
	Reason string
	Err    error // one of the ErrPort* sentinels
}

func (e *PortSpecError) Error() string { return fmt.Sprintf("%q: %s", e.Spec, e.Reason) }
func (e *PortSpecError) Unwrap() error { return e.Err }

func specErr(spec string, err error, format string, args ...any) error {
	return &PortSpecError{Spec: spec, Reason: fmt.Sprintf(format, args...), Err: err}
}

// ParseOptions are the host facts the parser needs, passed in so that it
// stays a pure function.
type ParseOptions struct {
	// Ephemeral is excluded from all and exclusions-only values; zero means
	// DefaultEphemeral. See ReadEphemeralRange.
	Ephemeral PortRange
}

// ParsePortSpecs parses every value given to one option, in order, with the
// default ephemeral range. No values gives PortsUnset.
func ParsePortSpecs(specs []string) (PortSpec, error) {
	return ParsePortSpecsWith(specs, ParseOptions{})
}

// rawRule is a rule before exclusions are cut out of it.
type rawRule struct {
	PortRule
	spec     int  // index into specs, for error messages
	all      bool // expand to every non-ephemeral port
	exclOnly bool // from a value with only exclusions
}

// ParsePortSpecsWith is ParsePortSpecs with explicit host facts.
func ParsePortSpecsWith(specs []string, opt ParseOptions) (PortSpec, error) {
	var out PortSpec
	if len(specs) == 0 {
		return out, nil
	}
	eph := opt.Ephemeral
	if eph == (PortRange{}) || eph.First > eph.Last {
		eph = DefaultEphemeral
	}
	raw := make([]rawRule, 0, len(specs))
	given := false // a value other than "none" so far
	for i, v := range specs {
		if v == "none" {
			// "none" ends the default (auto); it conflicts with ports
			// given before it, not with ports given after it (pasta).
			if given {
				return PortSpec{}, specErr(v, ErrPortConflict, "conflicts with the ports given before it")
			}
			continue
		}
		given = true
		var err error
		if raw, err = parseValue(v, i, raw, &out.Excluded); err != nil {
			return PortSpec{}, err
		}
	}
	if !given {
		// Only "none" (any number of times).
		out.Mode = PortsNone
		return out, nil
	}

	raw = dropBareExclusions(raw)
	out.Mode = PortsSpec
	origin := make([]int, 0, len(raw)) // spec index of each final rule
	for _, r := range raw {
		emit := func(first, last int) {
			nr := r.PortRule
			nr.First, nr.Last = uint16(first), uint16(last)
			nr.ToFirst = r.ToFirst + uint16(first-int(r.First))
			out.Rules = append(out.Rules, nr)
			origin = append(origin, r.spec)
		}
		switch {
		case r.all:
			out.Excluded.split(1, int(eph.First)-1, emit)
			out.Excluded.split(int(eph.Last)+1, 65535, emit)
		default:
			out.Excluded.split(int(r.First), int(r.Last), emit)
		}
		if r.Auto {
			out.Mode = PortsAuto
		}
	}
	if out.Mode == PortsSpec && len(out.Rules) == 0 {
		return PortSpec{}, specErr(specs[len(specs)-1], ErrPortRange, "every port it forwards is excluded")
	}
	if err := checkOverlaps(specs, out.Rules, origin); err != nil {
		return PortSpec{}, err
	}
	return out, nil
}

// checkOverlaps rejects two static (or two auto) rules sharing a port in
// bind scopes that overlap. A sweep in port order keeps this near-linear even
// when exclusions cut a rule into thousands of pieces; pieces of one rule
// never overlap each other, so every hit is a real conflict.
func checkOverlaps(specs []string, rules []PortRule, origin []int) error {
	order := make([]int, len(rules))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(rules[a].First, rules[b].First), cmp.Compare(a, b))
	})
	var active []int
	for _, j := range order {
		b := &rules[j]
		active = slices.DeleteFunc(active, func(i int) bool { return rules[i].Last < b.First })
		for _, i := range active {
			a := &rules[i]
			if a.Auto != b.Auto || !scopesOverlap(a, b) {
				continue
			}
			early, late := min(i, j), max(i, j)
			if a.Auto {
				return specErr(specs[origin[late]], ErrPortOverlap, "auto given twice for overlapping addresses")
			}
			return specErr(specs[origin[late]], ErrPortOverlap,
				"port %d is already forwarded by %q", b.First, specs[origin[early]])
		}
		active = append(active, j)
	}
	return nil
}

// dropBareExclusions removes the "everything" an unscoped exclusions-only
// value stands for when another value includes ports: exclusions apply to
// the whole option, so "-t 2000-5000 -t ~3000-3010" means what it says
// instead of clashing with itself. A scoped one ("127.0.0.1/~22") keeps its
// meaning, as the scope only makes sense with ports to bind.
func dropBareExclusions(raw []rawRule) []rawRule {
	bare, other := false, false
	for i := range raw {
		r := &raw[i]
		if r.exclOnly && !r.BindAddr.IsValid() && r.BindIf == "" {
			bare = true
		} else {
			other = true
		}
	}
	if !bare {
		return raw
	}
	out := raw[:0]
	for _, r := range raw {
		if !r.exclOnly || r.BindAddr.IsValid() || r.BindIf != "" {
			out = append(out, r)
		} else if !other { // several bare ones stand for one "everything"
			out, other = append(out, r), true
		}
	}
	return out
}

// split calls emit for each maximal run of first..last outside s.
func (s *PortSet) split(first, last int, emit func(first, last int)) {
	for first <= last {
		if first = s.next(first, last, false); first < 0 {
			return
		}
		end := s.next(first, last, true)
		if end < 0 {
			end = last + 1
		}
		emit(first, end-1)
		first = end
	}
}

// parseValue parses one option value other than "none", appending its
// inclusions to raw and recording its exclusions in excl.
func parseValue(v string, idx int, raw []rawRule, excl *PortSet) ([]rawRule, error) {
	if v == "" {
		return raw, specErr(v, ErrPortSyntax, "empty port specification")
	}
	var scope PortRule
	items := v
	if i := strings.IndexByte(v, '/'); i >= 0 && !strings.Contains(v[:i], ",") {
		addr, ifname, reason := parseScope(v[:i])
		switch {
		case reason == "":
			scope.BindAddr, scope.BindIf, items = addr, ifname, v[i+1:]
			if items == "" {
				return raw, specErr(v, ErrPortSyntax, "no ports after %q", v[:i+1])
			}
		case !hasTarget(v[:i]):
			return raw, specErr(v, ErrPortSyntax, "%s", reason)
		}
	}
	included := false
list:
	for rest := items; ; {
		item, more, found := strings.Cut(rest, ",")
		rest = more
		r := rawRule{PortRule: scope, spec: idx}
		switch {
		case item == "":
			return raw, specErr(v, ErrPortSyntax, "empty item in port list")
		case item == "none":
			return raw, specErr(v, ErrPortConflict, `"none" cannot be combined with other ports`)
		case item[0] == '~':
			first, last, err := parseRange(v, item[1:])
			if err != nil {
				return raw, err
			}
			excl.AddRange(first, last)
			if !found {
				break list
			}
			continue
		case item == "auto":
			r.First, r.Last, r.ToFirst, r.Auto = 1, 65535, 1, true
		case item == "all" || strings.HasPrefix(item, "all:"):
			r.all, r.Weak = true, true
			if to, ok := strings.CutPrefix(item, "all:"); ok {
				a, reason := parseAddr(to)
				if reason != "" {
					return raw, specErr(v, ErrPortSyntax, "%s", reason)
				}
				r.ToAddr = a
			}
		default:
			src, dst, mapped := strings.Cut(item, ":")
			first, last, err := parseRange(v, src)
			if err != nil {
				return raw, err
			}
			r.First, r.Last, r.ToFirst = first, last, first
			if mapped && !strings.Contains(dst, "/") {
				if a, reason := parseAddr(dst); reason == "" {
					r.ToAddr = a // address only: the ports stay
					mapped = false
				}
			}
			if mapped {
				if j := strings.LastIndexByte(dst, '/'); j >= 0 {
					a, reason := parseAddr(dst[:j])
					if reason != "" {
						return raw, specErr(v, ErrPortSyntax, "%s", reason)
					}
					r.ToAddr, dst = a, dst[j+1:]
				}
				tf, tl, err := parseRange(v, dst)
				if err != nil {
					return raw, err
				}
				if tl-tf != last-first {
					return raw, specErr(v, ErrPortRange, "target %s has %d ports, source %s has %d",
						dst, int(tl-tf)+1, src, int(last-first)+1)
				}
				r.ToFirst = tf
			}
		}
		raw = append(raw, r)
		included = true
		if !found {
			break list
		}
	}
	if !included { // exclusions only: everything else
		raw = append(raw, rawRule{PortRule: scope, spec: idx, all: true, exclOnly: true})
		raw[len(raw)-1].Weak = true
	}
	return raw, nil
}

// hasTarget reports whether s starts like "FIRST[-LAST]:", i.e. the '/' that
// ended s belongs to a target address rather than a bind scope.
func hasTarget(s string) bool {
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '-') {
		i++
	}
	return i > 0 && i < len(s) && s[i] == ':'
}

// parseScope parses ADDR, ADDR%IFNAME or %IFNAME; reason is "" on success.
func parseScope(s string) (addr netip.Addr, ifname, reason string) {
	if a, ifn, ok := strings.Cut(s, "%"); ok {
		if reason = checkIfName(ifn); reason != "" {
			return addr, "", reason
		}
		s, ifname = a, ifn
		if s == "" {
			return addr, ifname, ""
		}
	}
	if s == "" {
		return addr, "", "missing address before '/'"
	}
	addr, reason = parseAddr(s)
	return addr, ifname, reason
}

// parseAddr parses an IPv4 or IPv6 address, the latter optionally bracketed.
func parseAddr(s string) (netip.Addr, string) {
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Sprintf("%q is not an IP address", s)
	}
	return a, ""
}

// checkIfName applies the kernel's rules for interface names (dev_valid_name).
func checkIfName(s string) string {
	switch {
	case s == "":
		return "empty interface name after '%'"
	case len(s) > 15:
		return fmt.Sprintf("interface name %q is longer than 15 bytes", s)
	case s == "." || s == ".." || strings.ContainsAny(s, "/:% \t\n\r\v\f"):
		return fmt.Sprintf("%q is not a valid interface name", s)
	}
	return ""
}

// parseRange parses FIRST[-LAST] within option value v.
func parseRange(v, s string) (first, last uint16, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if first, err = parsePort(v, a); err != nil {
		return 0, 0, err
	}
	last = first
	if isRange {
		if last, err = parsePort(v, b); err != nil {
			return 0, 0, err
		}
		if last < first {
			return 0, 0, specErr(v, ErrPortRange, "range %s ends before it starts", s)
		}
	}
	return first, last, nil
}

// parsePort parses a decimal port number 1-65535. As pasta reads it
// (strtoul(3), base 10), white space and a plus sign may come first.
func parsePort(v, s string) (uint16, error) {
	d := strings.TrimPrefix(strings.TrimLeft(s, " \t\n\v\f\r"), "+")
	if d == "" {
		return 0, specErr(v, ErrPortSyntax, "missing port number")
	}
	n := 0
	for i := 0; i < len(d); i++ {
		c := d[i]
		if c < '0' || c > '9' {
			return 0, specErr(v, ErrPortSyntax, "%q is not a port number", s)
		}
		if n <= 65535 {
			n = n*10 + int(c-'0')
		}
	}
	if n < 1 || n > 65535 {
		return 0, specErr(v, ErrPortRange, "port %s is out of range 1-65535", s)
	}
	return uint16(n), nil
}

// scopesOverlap reports whether one connection could match both rules' bind
// scopes, so that binding both would conflict or be ambiguous.
func scopesOverlap(a, b *PortRule) bool {
	if a.BindIf != "" && b.BindIf != "" && a.BindIf != b.BindIf {
		return false
	}
	return covers(a.BindAddr, b.BindAddr) || covers(b.BindAddr, a.BindAddr)
}

// covers reports whether binding a also receives traffic for b. "::" is
// dual-stack on Linux by default, so it covers IPv4 too.
func covers(a, b netip.Addr) bool {
	switch {
	case !a.IsValid() || a == netip.IPv6Unspecified():
		return true
	case a == netip.IPv4Unspecified():
		return !b.IsValid() || b.Unmap().Is4()
	}
	return a.Unmap() == b.Unmap()
}

// ParseEphemeralRange parses /proc/sys/net/ipv4/ip_local_port_range: two
// port numbers separated by whitespace.
func ParseEphemeralRange(content string) (PortRange, error) {
	f := strings.Fields(content)
	if len(f) != 2 {
		return PortRange{}, specErr(content, ErrPortSyntax, "want two port numbers")
	}
	first, last, err := parseRange(content, f[0]+"-"+f[1])
	return PortRange{first, last}, err
}

// ephemeralFile is /proc/sys/net/ipv4/ip_local_port_range, opened by the
// first ReadEphemeralRange and kept: gopasta's sandbox takes the file
// system away after set-up, and the open file keeps showing the namespace
// it was opened in, current values included.
var ephemeralFile struct {
	sync.Mutex
	f   *os.File
	buf [64]byte
}

// ReadEphemeralRange reads the ephemeral port range of the network
// namespace of its first caller (gopasta calls it first from the host's
// namespace, before its sandbox is on), through a descriptor kept open.
func ReadEphemeralRange() (PortRange, error) {
	e := &ephemeralFile
	e.Lock()
	defer e.Unlock()
	if e.f == nil {
		f, err := os.Open("/proc/sys/net/ipv4/ip_local_port_range")
		if err != nil {
			return PortRange{}, err
		}
		e.f = f
	}
	// A sysctl file reads whole from offset 0, and as EOF from anywhere else.
	n, err := e.f.ReadAt(e.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return PortRange{}, err
	}
	return ParseEphemeralRange(string(e.buf[:n]))
}
