package fwdrule

// The rule table: the checks a rule must pass, conflicts with the rules
// already there, adding and deleting.

import (
	"errors"
	"fmt"
)

// Table is the forwarding rules of one side, in order.
type Table struct {
	Pif   Pif
	Caps  Caps
	Rules []Rule
}

// Clone is a deep copy of t.
func (t Table) Clone() Table {
	t.Rules = append([]Rule(nil), t.Rules...)
	return t
}

// Ports is the number of ports summed over t's rules.
func (t *Table) Ports() int {
	n := 0
	for i := range t.Rules {
		n += t.Rules[i].Ports()
	}
	return n
}

// Clear empties the table.
func (t *Table) Clear() { t.Rules = t.Rules[:0] }

// Error kinds, for errors.Is on a *RuleError.
var (
	ErrInvalid  = errors.New("invalid forwarding rule")
	ErrConflict = errors.New("conflicting forwarding rule")
	ErrFull     = errors.New("forwarding table full")
	ErrNotFound = errors.New("no such forwarding rule")
)

// RuleError says why a rule cannot enter (or leave) a table. Its message
// is pasta's diagnostic for the case.
type RuleError struct {
	Rule  Rule
	Other Rule // the rule of the table it conflicts with (ErrConflict, ErrNotFound)
	Msg   string
	Kind  error // ErrInvalid, ErrConflict, ErrFull or ErrNotFound
}

func (e *RuleError) Error() string { return e.Msg }
func (e *RuleError) Unwrap() error { return e.Kind }

func invalid(r *Rule, format string, a ...any) error {
	return &RuleError{Rule: *r, Msg: fmt.Sprintf(format, a...), Kind: ErrInvalid}
}

// Check validates r on its own against the table's capabilities: a port
// range that starts at 1 or above and does not run past 65535 on either
// side, known flags, listen and target addresses of families and a
// protocol the side has, a unicast target of the listen address's family
// and never with FlagDual. The interface name's terminating NUL is the
// wire decoder's business (it cannot be expressed once decoded).
func (t *Table) Check(r *Rule) error {
	if err := checkPorts(r); err != nil {
		return err
	}
	switch {
	case r.Flags&^flagsAllowed != 0:
		return invalid(r, "Rule has invalid flags 0x%x", r.Flags&^flagsAllowed)
	}
	if r.Dual() {
		switch {
		case r.Addr != Any6:
			return invalid(r, "Dual stack rule has non-wildcard address %s", FormatAddr(r.Addr))
		case t.Caps&CapIPv4 == 0:
			return invalid(r, "Dual stack forward, but IPv4 not enabled")
		case t.Caps&CapIPv6 == 0:
			return invalid(r, "Dual stack forward, but IPv6 not enabled")
		}
	} else if IsV4(r.Addr) && t.Caps&CapIPv4 == 0 {
		return invalid(r, "IPv4 forward, but IPv4 not enabled")
	} else if !IsV4(r.Addr) && t.Caps&CapIPv6 == 0 {
		return invalid(r, "IPv6 forward, but IPv6 not enabled")
	}
	switch r.Proto {
	case ProtoTCP:
		if t.Caps&CapTCP == 0 {
			return invalid(r, "Can't add TCP forwarding rule, TCP not enabled")
		}
	case ProtoUDP:
		if t.Caps&CapUDP == 0 {
			return invalid(r, "Can't add UDP forwarding rule, UDP not enabled")
		}
	default:
		return invalid(r, "Unsupported protocol 0x%x (%s) for forwarding rule", r.Proto, ProtoName(r.Proto))
	}
	if !IsUnspecified(r.TAddr) {
		fam := func(b [16]byte) string {
			if IsV4(b) {
				return "IPv4"
			}
			return "IPv6"
		}
		switch {
		case isMulticast(r.TAddr):
			return invalid(r, "Multicast target address %s for forwarding rule", FormatAddr(r.TAddr))
		case r.Dual():
			any := "[::]"
			if IsV4(r.TAddr) {
				any = "0.0.0.0"
			}
			// Two lines, as pasta prints them.
			return invalid(r, "Dual stack forward to %s address %s unsupported\nDid you mean %s/... instead?",
				fam(r.TAddr), FormatAddr(r.TAddr), any)
		case IsV4(r.Addr) != IsV4(r.TAddr):
			return invalid(r, "Forward from %s (%s) to %s (%s) unsupported",
				fam(r.Addr), FormatAddr(r.Addr), fam(r.TAddr), FormatAddr(r.TAddr))
		}
	}
	return nil
}

// checkPorts checks r's port ranges: from 1 or above, to no more than
// 65535.
func checkPorts(r *Rule) error {
	switch {
	case r.First > r.Last:
		return invalid(r, "Rule has invalid port range %d-%d", r.First, r.Last)
	case r.First == 0:
		return invalid(r, "Forwarding rule attempts to map from port 0")
	case r.To == 0 || r.To+(r.Last-r.First) < r.To:
		return invalid(r, "Forwarding rule attempts to map to port 0")
	}
	return nil
}

// addrsOverlap reports whether one address could match both rules' listen
// addresses: a dual-stack rule matches everything, an unspecified address
// every address of its family, anything else only itself. Interface names
// and targets play no part, as in pasta.
func addrsOverlap(a, b *Rule) bool {
	if a.Dual() || b.Dual() {
		return true
	}
	if IsUnspecified(a.Addr) || IsUnspecified(b.Addr) {
		return IsV4(a.Addr) == IsV4(b.Addr)
	}
	return a.Addr == b.Addr
}

// Conflicts reports whether a and b cannot both be in one table: same
// protocol, overlapping listen addresses and overlapping port ranges.
func Conflicts(a, b *Rule) bool {
	return a.Proto == b.Proto && addrsOverlap(a, b) && a.First <= b.Last && b.First <= a.Last
}

// Add checks r (Check, then conflicts with the rules already in t, then
// the table's limits) and appends it.
func (t *Table) Add(r Rule) error {
	if err := t.Check(&r); err != nil {
		return err
	}
	for i := range t.Rules {
		if Conflicts(&r, &t.Rules[i]) {
			return &RuleError{Rule: r, Other: t.Rules[i], Kind: ErrConflict,
				Msg: fmt.Sprintf("Forwarding configuration conflict: %s versus %s", r, t.Rules[i])}
		}
	}
	if len(t.Rules) >= MaxRules {
		return &RuleError{Rule: r, Kind: ErrFull, Msg: fmt.Sprintf("Too many rules (maximum %d)", MaxRules)}
	}
	if t.Ports()+r.Ports() > MaxPorts {
		return &RuleError{Rule: r, Kind: ErrFull,
			Msg: fmt.Sprintf("Rules require too many listening sockets (maximum %d)", MaxPorts)}
	}
	t.Rules = append(t.Rules, r)
	return nil
}

// Delete removes the first rule identical to r. A rule met first that
// conflicts with r without being identical stops the search, as in pasta:
// deleting part of a rule is not possible.
func (t *Table) Delete(r Rule) error {
	for i := range t.Rules {
		if t.Rules[i] == r {
			t.Rules = append(t.Rules[:i], t.Rules[i+1:]...)
			return nil
		}
		if Conflicts(&r, &t.Rules[i]) {
			return &RuleError{Rule: r, Other: t.Rules[i], Kind: ErrNotFound,
				Msg: fmt.Sprintf("Specifier %s conflicts with rule %s, but doesn't match it, can't delete", r, t.Rules[i])}
		}
	}
	return &RuleError{Rule: r, Kind: ErrNotFound, Msg: fmt.Sprintf("Couldn't find forwarding rule to delete: %s", r)}
}

// Validate checks every rule of t as Add would add them in order into an
// empty table with t's capabilities.
func (t *Table) Validate() error {
	v := Table{Pif: t.Pif, Caps: t.Caps, Rules: make([]Rule, 0, len(t.Rules))}
	for _, r := range t.Rules {
		if err := v.Add(r); err != nil {
			return err
		}
	}
	return nil
}
