package portfwd

// The forwarding tables: the command line's port options become pasta's
// two rule tables at start (HOST for -t/-u, SPLICE for -T/-U), and from
// then on the tables are the one description of what is forwarded: the
// listeners follow them, and the control socket reads and replaces them.
//
// Conversion keeps gopasta's meaning of every option:
//   - A rule without an address is dual-stack (FlagDual) when both
//     families are in use, else the one family's any address; with a
//     target address, the target's family (a dual-stack rule cannot have
//     one).
//   - auto becomes FlagScan|FlagWeak rules over its ports minus the
//     excluded and the statically forwarded ones, split into runs, so no
//     two rules overlap. Unlike pasta, auto keeps the ephemeral range: a
//     namespace service on such a port is forwarded too (UDP scanning
//     skips bound ephemeral ports, which are clients).
//   - The namespace's rules (-T, -U) listen on loopback: interface "lo"
//     when binding to a device works (CapIfname), as pasta lists them,
//     else one rule per loopback address.
//   - A rule for a family not in use is left out, as its sockets were.

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/fwdrule"
)

// Table indexes: the host's side (HOST) and the namespace's (SPLICE).
const (
	tHost = 0
	tNS   = 1
)

var tablePifs = [2]fwdrule.Pif{fwdrule.PifHost, fwdrule.PifSplice}

// ifnameWorks probes SO_BINDTODEVICE (unprivileged since Linux 5.7).
func ifnameWorks() bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.BindToDevice(fd, "lo") == nil
}

// capsFor is what both tables may hold: the families in use, the
// protocols not turned off, auto, and devices if binding to one works.
func capsFor(v4, v6, noTCP, noUDP, ifname bool) fwdrule.Caps {
	c := fwdrule.CapScan
	if v4 {
		c |= fwdrule.CapIPv4
	}
	if v6 {
		c |= fwdrule.CapIPv6
	}
	if !noTCP {
		c |= fwdrule.CapTCP
	}
	if !noUDP {
		c |= fwdrule.CapUDP
	}
	if ifname {
		c |= fwdrule.CapIfname
	}
	return c
}

// ConfigError is a set of port options that cannot be expressed as
// pasta's tables (a conflict pasta would refuse as well).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string {
	return "port forwarding options: " + e.Err.Error()
}
func (e *ConfigError) Unwrap() error { return e.Err }

// tablesFrom converts the four options into the HOST and SPLICE tables.
func tablesFrom(r *Rules, caps fwdrule.Caps) ([2]fwdrule.Table, error) {
	var ts [2]fwdrule.Table
	for i := range ts {
		ts[i] = fwdrule.Table{Pif: tablePifs[i], Caps: caps}
	}
	for _, o := range []struct {
		t     int
		spec  *config.PortSpec
		proto uint8
	}{
		{tHost, &r.TCP, fwdrule.ProtoTCP}, {tHost, &r.UDP, fwdrule.ProtoUDP},
		{tNS, &r.TCPNS, fwdrule.ProtoTCP}, {tNS, &r.UDPNS, fwdrule.ProtoUDP},
	} {
		for _, rule := range specRules(o.spec, o.proto, o.t == tNS, caps) {
			if err := ts[o.t].Add(rule); err != nil {
				return ts, &ConfigError{Err: err}
			}
		}
	}
	return ts, nil
}

// specRules converts one option's rules: static ones in option order,
// then the auto runs.
func specRules(spec *config.PortSpec, proto uint8, ns bool, caps fwdrule.Caps) []fwdrule.Rule {
	if spec.Mode != config.PortsSpec && spec.Mode != config.PortsAuto {
		return nil
	}
	var out []fwdrule.Rule
	for i := range spec.Rules {
		pr := &spec.Rules[i]
		if pr.Auto {
			continue
		}
		var flags uint8
		if pr.Weak {
			flags = fwdrule.FlagWeak
		}
		out = scoped(out, pr, ns, caps, fwdrule.Rule{
			First: pr.First, Last: pr.Last, To: pr.ToFirst, Proto: proto, Flags: flags,
			TAddr: fwdrule.Inany(pr.ToAddr.Unmap()),
		})
	}
	for i := range spec.Rules {
		pr := &spec.Rules[i]
		if !pr.Auto {
			continue
		}
		for p := int(pr.First); p <= int(pr.Last); {
			if !spec.AutoCandidate(uint16(p)) {
				p++
				continue
			}
			end := p
			for end < int(pr.Last) && spec.AutoCandidate(uint16(end+1)) {
				end++
			}
			out = scoped(out, pr, ns, caps, fwdrule.Rule{
				First: uint16(p), Last: uint16(end), To: uint16(p), Proto: proto,
				Flags: fwdrule.FlagScan | fwdrule.FlagWeak,
			})
			p = end + 1
		}
	}
	return out
}

// scoped appends r with the listen address and interface of pr's scope.
func scoped(out []fwdrule.Rule, pr *config.PortRule, ns bool, caps fwdrule.Caps, r fwdrule.Rule) []fwdrule.Rule {
	v4, v6 := caps&fwdrule.CapIPv4 != 0, caps&fwdrule.CapIPv6 != 0
	famOK := func(a netip.Addr) bool { return (a.Is4() && v4) || (a.Is6() && v6) }
	ifname := pr.BindIf
	target := pr.ToAddr.Unmap()
	if target.IsValid() && !famOK(target) {
		return out
	}
	if a := pr.BindAddr.Unmap(); a.IsValid() {
		if !famOK(a) {
			return out
		}
		r.Addr = fwdrule.Inany(a)
		r.SetIfname(ifname)
		return append(out, r)
	}
	if ns && ifname == "" {
		if caps&fwdrule.CapIfname == 0 {
			// One rule per loopback address, as pasta without
			// SO_BINDTODEVICE.
			for _, lo := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()} {
				if famOK(lo) && (!target.IsValid() || target.Is4() == lo.Is4()) {
					r.Addr = fwdrule.Inany(lo)
					out = append(out, r)
				}
			}
			return out
		}
		ifname = "lo"
	}
	r.SetIfname(ifname)
	switch {
	case target.IsValid() && target.Is4():
		r.Addr = fwdrule.Any4
	case target.IsValid():
		r.Addr = fwdrule.Any6
	case v4 && v6:
		r.Addr, r.Flags = fwdrule.Any6, r.Flags|fwdrule.FlagDual
	case v6:
		r.Addr = fwdrule.Any6
	case v4:
		r.Addr = fwdrule.Any4
	default:
		return out
	}
	return append(out, r)
}

// Tables returns the HOST and SPLICE tables in force (copies).
func (pf *Forwarder) Tables() []fwdrule.Table {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return []fwdrule.Table{pf.tables[tHost].Clone(), pf.tables[tNS].Clone()}
}

// Replace makes ts the tables (matched by pif; a table not given becomes
// empty), all or nothing: every rule is checked against this side's
// capabilities first. Then listeners of new rules open before listeners
// of rules that went away close; a listener whose address, port and
// interface stay keeps its socket (re-pointed if the target changed), and
// established connections are never touched. A port that cannot be
// bound is logged and retried every second; its rule stays in the table.
func (pf *Forwarder) Replace(ts []fwdrule.Table) error {
	var next [2]fwdrule.Table
	for i := range next {
		next[i] = fwdrule.Table{Pif: tablePifs[i], Caps: pf.caps}
		for _, t := range ts {
			if t.Pif == tablePifs[i] {
				next[i].Rules = append(next[i].Rules, t.Rules...)
			}
		}
		if err := next[i].Validate(); err != nil {
			return err
		}
	}
	for _, t := range ts {
		if t.Pif != fwdrule.PifHost && t.Pif != fwdrule.PifSplice {
			return fmt.Errorf("portfwd: no %s table", t.Pif)
		}
	}
	return pf.apply(next, false)
}
