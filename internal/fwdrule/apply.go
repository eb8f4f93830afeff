package fwdrule

// What a parsed value means: the rules it adds to (or deletes from) a
// table. Apply is pasta's meaning, which pesto uses, with gopasta's
// extensions as a Dialect for the command line.
//
// In pasta's meaning each value stands alone. Its exclusions leave ports
// out of its includes; a value without includes ("all", exclusions only,
// or "auto" alone) forwards 1-65535 but its exclusions and the ephemeral
// range, best effort (FlagWeak). "auto" marks every rule of the value
// FlagScan. Each run of ports left is one rule, listening on the value's
// address, or on any address of both families (FlagDual) when it has none
// and the table has both, else on the one family's any address. -T and -U
// listen on the namespace's loopback: interface "lo" when binding to a
// device works (CapIfname), else one rule set per loopback address.

import (
	"errors"
	"fmt"
	"net/netip"
)

// Dialect says which of gopasta's extensions apply. The zero Dialect,
// Pasta, is pasta's meaning: pesto must send what pasta's pesto sends.
type Dialect struct {
	// OptionWide reads the values of one option together: exclusions
	// leave ports out of every value; a value of exclusions only without
	// an address or interface stands for no ports when another value
	// names some (and several stand for one); values that leave no port
	// at all are an error. pasta reads each value alone.
	OptionWide bool
	// AutoYields: rules of auto leave out the ports the option's other
	// values forward, whatever their address (and, for -u and -U not
	// given, the ports of -t and -T they copy). pasta refuses such
	// overlaps.
	AutoYields bool
	// NSScope lets -T and -U take an address and interface. pasta
	// refuses them.
	NSScope bool
	// FitFamilies leaves out a rule whose listening or target address is
	// of a family the table does not have, and a rule with a target
	// address but no listening address listens on the target family's any
	// address. pasta refuses both.
	FitFamilies bool
}

// Pasta and Gopasta are the dialects of pesto and of gopasta's command
// line.
var (
	Pasta   = Dialect{}
	Gopasta = Dialect{OptionWide: true, AutoYields: true, NSScope: true, FitFamilies: true}
)

// ApplyError is a rule of a value that could not be added or deleted: Err
// (a *RuleError) says why, Op is "add" or "delete".
type ApplyError struct {
	Op   string
	Rule Rule
	Err  error
	Spec *Spec // the value the rule came from
	// With is the value of the rule it conflicts with, when the same
	// Apply added that one.
	With *Spec
}

// Error is pasta's message and pesto's two lines, on one.
func (e *ApplyError) Error() string {
	return fmt.Sprintf("%v; Unable to %s rule %s", e.Err, e.Op, e.Rule)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Reason says why in gopasta's words: for a conflict between two values,
// the port and the value that forwards it already.
func (e *ApplyError) Reason() string {
	var re *RuleError
	if errors.As(e.Err, &re) && re.Kind == ErrConflict && e.With != nil {
		if e.Rule.Scan() && re.Other.Scan() {
			return "auto given twice for overlapping addresses"
		}
		return fmt.Sprintf("port %d is already forwarded by %q", max(e.Rule.First, re.Other.First), e.With.Value)
	}
	return e.Err.Error()
}

// Apply adds the rules of specs, values of one option in the order given,
// to t, or deletes them with del. eph is the ephemeral range that values
// without includes leave out (zero: DefaultEphemeral); warn receives
// notes (nil discards them).
// Rules are added one at a time: an error leaves t partly changed.
func Apply(t *Table, specs []Spec, del bool, d Dialect, eph Range, warn func(string)) error {
	a := newApplier(t, del, d, eph, warn)
	if d.OptionWide {
		return a.apply(specs)
	}
	for i := range specs {
		if err := a.apply(specs[i : i+1]); err != nil {
			return err
		}
	}
	return nil
}

func newApplier(t *Table, del bool, d Dialect, eph Range, warn func(string)) *applier {
	if eph == (Range{}) || eph.First > eph.Last {
		eph = DefaultEphemeral
	}
	if warn == nil {
		warn = func(string) {}
	}
	return &applier{t: t, del: del, d: d, eph: eph, warn: warn}
}

// applier applies the values of one option read together.
type applier struct {
	t    *Table
	del  bool
	d    Dialect
	eph  Range
	warn func(string)

	specs  []Spec
	base   int   // t's rules before this apply
	origin []int // for each rule added since: the index of its value
	// static is every port the values forward other than by auto, whether
	// or not a rule of its family made it into the table: what auto
	// yields with AutoYields.
	static PortSet
}

// run is a range of listen ports with where it goes, before it is given
// an address.
type run struct {
	Range
	to     uint16
	target netip.Addr
	flags  uint8
	spec   int
}

func (a *applier) apply(specs []Spec) error {
	a.specs, a.base, a.origin = specs, len(a.t.Rules), a.origin[:0]
	var excl PortSet
	given := false // a value other than "none" so far
	for i := range specs {
		s := &specs[i]
		if err := a.check(s, given); err != nil {
			return err
		}
		given = given || !s.None
		for _, r := range s.Excludes {
			excl.AddRange(r.First, r.Last)
		}
	}
	use := a.used(specs)
	var runs []run
	auto := false
	for i := range specs {
		if use[i] {
			runs = a.runs(runs, i, &excl)
			auto = auto || specs[i].Auto
		}
	}
	if a.d.OptionWide && given && len(runs) == 0 && !auto {
		last := &specs[len(specs)-1]
		return &SpecError{Opt: last.Opt, Value: last.Value, Ports: last.Ports, Err: ErrRange,
			Reason: "every port it forwards is excluded"}
	}
	if !a.d.AutoYields {
		return a.place(runs)
	}
	var static, scan []run
	for _, r := range runs {
		if r.flags&FlagScan != 0 {
			scan = append(scan, r)
		} else {
			static = append(static, r)
			a.static.AddRange(r.First, r.Last)
		}
	}
	if err := a.place(static); err != nil {
		return err
	}
	return a.place(a.yield(scan))
}

// check refuses what a value cannot ask of this table: "none" after
// ports, an address where none is allowed, features the table lacks.
func (a *applier) check(s *Spec, given bool) error {
	bad := func(reason string) error {
		return &SpecError{Opt: s.Opt, Value: s.Value, Ports: s.Ports, Err: ErrOption, Reason: reason, pasta: reason}
	}
	if s.None {
		for i := range a.t.Rules {
			given = given || a.t.Rules[i].Proto == s.Proto()
		}
		if given {
			return &SpecError{Opt: s.Opt, Value: s.Value, Ports: s.Ports, Err: ErrOption,
				Reason: "conflicts with the ports given before it",
				pasta:  fmt.Sprintf("-%c none conflicts with previous options", s.Opt)}
		}
		return nil
	}
	if s.NS() && s.Scoped && !a.d.NSScope {
		return bad(fmt.Sprintf("Listening address not allowed for -%c %s", s.Opt, s.Value))
	}
	if s.NS() && !s.Addr.IsValid() && s.Ifname == "" && a.t.Caps&CapIfname == 0 {
		a.warn(fmt.Sprintf("SO_BINDTODEVICE unavailable, forwarding only 127.0.0.1 and ::1 for '-%c %s'", s.Opt, s.Value))
	}
	if s.Ifname != "" && a.t.Caps&CapIfname == 0 {
		return bad(fmt.Sprintf("Device binding for '-%c %s' unsupported (requires kernel 5.7+)", s.Opt, s.Value))
	}
	if s.Auto && a.t.Caps&CapScan == 0 {
		return bad("'auto' port forwarding is only allowed for pasta")
	}
	return nil
}

// used says which values count: with OptionWide, values of exclusions
// only and without an address or interface stand for no ports when
// another value names some, and for one "every port" together.
func (a *applier) used(specs []Spec) []bool {
	use := make([]bool, len(specs))
	bare := func(s *Spec) bool { return s.excludesOnly() && !s.Addr.IsValid() && s.Ifname == "" }
	other := false
	for i := range specs {
		use[i] = !specs[i].None
		other = other || (use[i] && !bare(&specs[i]))
	}
	if !a.d.OptionWide {
		return use
	}
	for i := range specs {
		if bare(&specs[i]) {
			use[i], other = !other, true
		}
	}
	return use
}

// runs appends the runs of ports value i forwards, excl left out.
func (a *applier) runs(out []run, i int, excl *PortSet) []run {
	s := &a.specs[i]
	var flags uint8
	if s.Auto {
		flags = FlagScan
	}
	for _, inc := range s.Includes {
		excl.Runs(inc.First, inc.Last, func(first, last uint16) {
			out = append(out, run{Range{first, last}, inc.To + (first - inc.First), inc.Target, flags, i})
		})
	}
	if len(s.Includes) == 0 {
		broad := *excl
		broad.AddRange(a.eph.First, a.eph.Last)
		broad.Runs(1, NumPorts-1, func(first, last uint16) {
			out = append(out, run{Range{first, last}, first, s.AllTo, flags | FlagWeak, i})
		})
	}
	return out
}

// yield cuts the runs of auto around the ports forwarded otherwise.
func (a *applier) yield(scan []run) []run {
	var out []run
	for _, r := range scan {
		a.static.Runs(r.First, r.Last, func(first, last uint16) {
			out = append(out, run{Range{first, last}, r.to + (first - r.First), r.target, r.flags, r.spec})
		})
	}
	return out
}

// place gives each run its listening address and adds (or deletes) the
// rules. Where a run listens on both loopback addresses, the rules of
// 127.0.0.1 come first, then those of ::1, as pasta adds them.
func (a *applier) place(runs []run) error {
	for slot := range 2 {
		for _, rn := range runs {
			s := &a.specs[rn.spec]
			r := Rule{First: rn.First, Last: rn.Last, To: rn.to, Proto: s.Proto(), Flags: rn.flags, TAddr: Inany(rn.target)}
			rs := a.listen(s, r, rn.target.Unmap())
			if slot == 0 && !a.del {
				// Port 0 is wrong even where the rule is left out for
				// its family.
				for _, l := range rs {
					if l.Proto != 0 {
						r = l
						break
					}
				}
				if err := checkPorts(&r); err != nil {
					return &ApplyError{Op: "add", Rule: r, Err: err, Spec: s}
				}
			}
			if slot >= len(rs) || rs[slot].Proto == 0 {
				continue
			}
			if err := a.put(rs[slot], rn.spec); err != nil {
				return err
			}
		}
	}
	return nil
}

// listen completes r with the value's listening address and interface:
// none, one, or one per loopback address (IPv4, then IPv6; a zero Rule
// for one left out).
func (a *applier) listen(s *Spec, r Rule, target netip.Addr) []Rule {
	v4, v6 := a.t.Caps&CapIPv4 != 0, a.t.Caps&CapIPv6 != 0
	fits := func(ip netip.Addr) bool { return !a.d.FitFamilies || (ip.Is4() && v4) || (ip.Is6() && v6) }
	if target.IsValid() && !fits(target) {
		return nil
	}
	if s.Addr.IsValid() {
		if !fits(s.Addr.Unmap()) {
			return nil
		}
		r.Addr = Inany(s.Addr)
		r.SetIfname(s.Ifname)
		return []Rule{r}
	}
	ifname := s.Ifname
	if s.NS() && ifname == "" {
		if a.t.Caps&CapIfname == 0 {
			out := make([]Rule, 2)
			for i, lo := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()} {
				famOK := (lo.Is4() && v4) || (lo.Is6() && v6)
				if famOK && (!a.d.FitFamilies || !target.IsValid() || target.Is4() == lo.Is4()) {
					out[i], out[i].Addr = r, Inany(lo)
				}
			}
			return out
		}
		ifname = "lo"
	}
	r.SetIfname(ifname)
	switch {
	case a.d.FitFamilies && target.IsValid() && target.Is4():
		r.Addr = Any4
	case a.d.FitFamilies && target.IsValid():
		r.Addr = Any6
	case v4 && v6:
		r.Addr, r.Flags = Any6, r.Flags|FlagDual
	case v4:
		r.Addr = Any4
	case v6 || !a.d.FitFamilies:
		r.Addr = Any6
	default:
		return nil
	}
	return []Rule{r}
}

// put adds or deletes r, the rule of value i.
func (a *applier) put(r Rule, i int) error {
	op, err := "add", error(nil)
	if a.del {
		op, err = "delete", a.t.Delete(r)
	} else {
		err = a.t.Add(r)
	}
	if err == nil {
		if !a.del {
			a.origin = append(a.origin, i)
		}
		return nil
	}
	ae := &ApplyError{Op: op, Rule: r, Err: err, Spec: &a.specs[i]}
	var re *RuleError
	if !a.del && errors.As(err, &re) && re.Kind == ErrConflict {
		for j := range a.t.Rules {
			if a.t.Rules[j] == re.Other && j >= a.base && j-a.base < len(a.origin) {
				ae.With = &a.specs[a.origin[j-a.base]]
				break
			}
		}
	}
	return ae
}
