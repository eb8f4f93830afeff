package fwdrule

// The port specification grammar: the value of one -t, -u, -T or -U, on
// gopasta's command line and in pesto's alike. Parse reads one value into
// a Spec; Apply (apply.go) turns Specs into a table's rules.
//
//	spec    = "none" / [scope "/"] ports
//	scope   = [addr / "*"] ["%" ifname]     ; "*" or nothing: any address
//	                                         ; of both families
//	addr    = IPv4 / IPv6 / "[" IPv4 "]" / "[" IPv6 "]"
//	ifname  = 1*15(any byte but "/" ":" "%" "," and white space),
//	          not "." or ".."
//	ports   = item *("," item)
//	item    = range [":" target]             ; forward these ports
//	        / "~" range                      ; leave these ports out
//	        / "auto"                         ; only while bound on the
//	                                         ; other side
//	        / "all" [":" addr]               ; every non-ephemeral port
//	target  = range                          ; to these ports
//	        / addr                           ; to the same ports there
//	        / addr "/" range                 ; to these ports there
//	range   = port ["-" port]
//	port    = *WSP ["+"] 1*DIGIT             ; 0-65535, read as strtoul(3)
//	                                         ; reads it
//
// The scope is the text before the first "/" when no "," comes before it.
// Where it reads both as a scope and as the start of an item with a
// target ("1:2::3/4"), the scope wins, as in pasta; "1:[2::3]/4" spells
// the other meaning. A value that names no port ("all", "auto" or
// exclusions only) stands for every port but the ephemeral ones, with the
// target address of "all". "auto" makes the value's ports forwarded only
// while bound on the other side (the namespace for -t and -u, the host
// for -T and -U). Port 0 parses but is refused as a rule (Table.Check).

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Spec is one option value, parsed.
type Spec struct {
	Opt   byte   // 't', 'u', 'T' or 'U'
	Value string // as given
	None  bool   // "none"
	// Scoped: an address, "*" or an interface came before a '/'. Addr is
	// the listening address (invalid: any address of both families) and
	// Ifname the interface ("" for any).
	Scoped bool
	Addr   netip.Addr
	Ifname string
	Ports  string // the value after its scope
	// Includes are the ranges forwarded, in order; Excludes the ranges
	// left out of every one of them.
	Includes []Include
	Excludes []Range
	Auto     bool
	All      bool       // "all" was given
	AllTo    netip.Addr // its target address, if any
}

// Include forwards First..Last to To.. at address Target (invalid: the
// side's usual target).
type Include struct {
	First, Last uint16
	Target      netip.Addr
	To          uint16
}

// Proto is the protocol of the spec's option.
func (s *Spec) Proto() uint8 {
	if s.Opt == 'u' || s.Opt == 'U' {
		return ProtoUDP
	}
	return ProtoTCP
}

// NS reports whether the option listens in the namespace (-T, -U).
func (s *Spec) NS() bool { return s.Opt == 'T' || s.Opt == 'U' }

// excludesOnly reports a value of exclusions only, which stands for every
// non-ephemeral port but those.
func (s *Spec) excludesOnly() bool {
	return len(s.Includes) == 0 && !s.Auto && !s.All && !s.None
}

// Kinds of SpecError, for errors.Is.
var (
	ErrSyntax = errors.New("port specification syntax error")
	ErrRange  = errors.New("port out of range")
	ErrOption = errors.New("port specification not allowed here")
)

// SpecError is a value that does not parse or cannot be applied as a
// whole. Error gives gopasta's wording; PastaMessage pasta's.
type SpecError struct {
	Opt    byte   // the option's letter
	Value  string // the whole value
	Ports  string // the value's port list, which pasta's message quotes
	Reason string
	Err    error // ErrSyntax, ErrRange or ErrOption
	pasta  string
}

func (e *SpecError) Error() string { return fmt.Sprintf("%q: %s", e.Value, e.Reason) }
func (e *SpecError) Unwrap() error { return e.Err }

// PastaMessage is the line pasta prints for the same mistake.
func (e *SpecError) PastaMessage() string {
	if e.pasta != "" {
		return e.pasta
	}
	return "Invalid port specifier '" + e.Ports + "'"
}

// Parse reads value, the value of option -opt ('t', 'u', 'T' or 'U').
func Parse(opt byte, value string) (Spec, error) {
	s := Spec{Opt: opt, Value: value, Ports: value}
	bad := func(f *fault) (Spec, error) {
		return Spec{}, &SpecError{Opt: opt, Value: value, Ports: s.Ports, Reason: f.reason, Err: f.kind, pasta: f.pasta}
	}
	switch opt {
	case 't', 'u', 'T', 'U':
	default:
		return bad(faultf(ErrOption, "no port option -%c", opt))
	}
	if value == "none" {
		s.None = true
		return s, nil
	}
	if value == "" {
		return bad(faultf(ErrSyntax, "empty port specification"))
	}
	if i := strings.IndexByte(value, '/'); i >= 0 && !strings.Contains(value[:i], ",") {
		addr, ifname, f := parseScope(value[:i])
		switch {
		case f == nil:
			s.Scoped, s.Addr, s.Ifname, s.Ports = true, addr, ifname, value[i+1:]
			if s.Ports == "" {
				return bad(faultf(ErrSyntax, "no ports after %q", value[:i+1]))
			}
		case !startsWithTarget(value[:i]):
			return bad(f)
		}
	}
	for rest, more := s.Ports, true; more; {
		var item string
		item, rest, more = strings.Cut(rest, ",")
		switch {
		case item == "":
			return bad(faultf(ErrSyntax, "empty item in port list"))
		case item == "none":
			return bad(faultf(ErrSyntax, `"none" cannot be combined with other ports`))
		case item == "auto":
			s.Auto = true
		case item == "all" || strings.HasPrefix(item, "all:"):
			s.All = true
			if to, ok := strings.CutPrefix(item, "all:"); ok {
				a, f := parseAddr(to)
				if f != nil {
					return bad(f)
				}
				s.AllTo = a
			}
		case item[0] == '~':
			r, f := parseRange(item[1:])
			if f != nil {
				return bad(f)
			}
			s.Excludes = append(s.Excludes, r)
		default:
			inc, f := parseInclude(item)
			if f != nil {
				return bad(f)
			}
			s.Includes = append(s.Includes, inc)
		}
	}
	return s, nil
}

// fault is why part of a value does not parse: its kind, gopasta's
// wording, and pasta's where pasta has a message of its own.
type fault struct {
	kind          error
	reason, pasta string
}

func faultf(kind error, format string, a ...any) *fault {
	return &fault{kind: kind, reason: fmt.Sprintf(format, a...)}
}

// parseInclude reads "range[:target]".
func parseInclude(item string) (Include, *fault) {
	src, dst, mapped := strings.Cut(item, ":")
	r, f := parseRange(src)
	if f != nil {
		return Include{}, f
	}
	inc := Include{First: r.First, Last: r.Last, To: r.First}
	if !mapped {
		return inc, nil
	}
	if !strings.Contains(dst, "/") {
		if a, f := parseAddr(dst); f == nil {
			inc.Target = a // address only: the ports stay
			return inc, nil
		}
	}
	ports := dst
	if j := strings.LastIndexByte(dst, '/'); j >= 0 {
		a, f := parseAddr(dst[:j])
		if f != nil {
			return Include{}, f
		}
		inc.Target, ports = a, dst[j+1:]
	}
	t, f := parseRange(ports)
	if f != nil {
		return Include{}, f
	}
	if t.Last-t.First != r.Last-r.First {
		return Include{}, faultf(ErrRange, "target %s has %d ports, source %s has %d",
			ports, int(t.Last-t.First)+1, src, int(r.Last-r.First)+1)
	}
	inc.To = t.First
	return inc, nil
}

// startsWithTarget reports whether s, the text before a value's first
// '/', starts like "range:": the '/' belongs to a target, not a scope.
func startsWithTarget(s string) bool {
	src, _, ok := strings.Cut(s, ":")
	_, f := parseRange(src)
	return ok && f == nil
}

// parseScope reads [addr / "*"] ["%" ifname]; no address (or "*") is an
// invalid addr.
func parseScope(s string) (addr netip.Addr, ifname string, f *fault) {
	s, ifname, hasIf := strings.Cut(s, "%")
	if s != "" && s != "*" {
		if addr, f = parseAddr(s); f != nil {
			return addr, "", f
		}
	}
	if hasIf {
		if f = checkIfname(ifname); f != nil {
			return netip.Addr{}, "", f
		}
	}
	return addr, ifname, nil
}

// parseAddr reads an IPv4 or IPv6 address, optionally in brackets.
func parseAddr(s string) (netip.Addr, *fault) {
	t := s
	if len(t) > 2 && t[0] == '[' && t[len(t)-1] == ']' {
		t = t[1 : len(t)-1]
	}
	a, err := netip.ParseAddr(t)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, faultf(ErrSyntax, "%q is not an IP address", t)
	}
	return a, nil
}

// checkIfname applies the kernel's rules for interface names
// (dev_valid_name), and refuses '%' and ',' that no name the kernel makes
// has.
func checkIfname(s string) *fault {
	switch {
	case s == "":
		return faultf(ErrSyntax, "empty interface name after '%%'")
	case len(s) >= IfNameSize:
		return faultf(ErrSyntax, "interface name %q is longer than %d bytes", s, IfNameSize-1)
	case s == "." || s == "..":
		f := faultf(ErrSyntax, "%q is not a valid interface name", s)
		f.pasta = "Invalid interface name: " + s
		return f
	case strings.ContainsAny(s, "/:%, \t\n\r\v\f"):
		return faultf(ErrSyntax, "%q is not a valid interface name", s)
	}
	return nil
}

// parseRange reads "port[-port]" with the first not above the second.
func parseRange(s string) (Range, *fault) {
	a, b, isRange := strings.Cut(s, "-")
	first, f := parsePort(a)
	if f != nil {
		return Range{}, f
	}
	last := first
	if isRange {
		if last, f = parsePort(b); f != nil {
			return Range{}, f
		}
		if last < first {
			return Range{}, faultf(ErrRange, "range %s ends before it starts", s)
		}
	}
	return Range{first, last}, nil
}

// parsePort reads a decimal port number as pasta reads it (strtoul(3),
// base 10): white space and a plus sign may come first.
func parsePort(s string) (uint16, *fault) {
	d := strings.TrimPrefix(strings.TrimLeft(s, " \t\n\v\f\r"), "+")
	if d == "" {
		return 0, faultf(ErrSyntax, "missing port number")
	}
	n := 0
	for i := 0; i < len(d); i++ {
		c := d[i]
		if c < '0' || c > '9' {
			return 0, faultf(ErrSyntax, "%q is not a port number", s)
		}
		if n < NumPorts {
			n = n*10 + int(c-'0')
		}
	}
	if n >= NumPorts {
		return 0, faultf(ErrRange, "port %s is out of range 1-65535", s)
	}
	return uint16(n), nil
}
