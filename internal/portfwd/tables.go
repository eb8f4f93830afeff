package portfwd

// The forwarding tables: the command line's port options become pasta's
// two rule tables at start (HOST for -t/-u, SPLICE for -T/-U, built by
// fwdrule.Options.Tables), and from then on the tables are the one
// description of what is forwarded: the listeners follow them, and the
// control socket reads and replaces them.

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

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
	var ae *fwdrule.ApplyError
	if errors.As(e.Err, &ae) && ae.Spec != nil {
		return fmt.Sprintf("port forwarding options: -%c %s: %s", ae.Spec.Opt, ae.Spec.Value, ae.Reason())
	}
	return "port forwarding options: " + e.Err.Error()
}
func (e *ConfigError) Unwrap() error { return e.Err }

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
