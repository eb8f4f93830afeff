package portfwd

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/sock"
)

// Port forwarding plans: which sockets the rules of a table ask for.
// Planning is a pure function of the rules and a few facts about a side
// (and, for auto rules, of the ports listening on the other side), so
// every rule form is unit-tested without a namespace; sync.go opens and
// closes what the plans say.

// side is what planning needs to know about one side.
type side struct {
	v4, v6 bool // families in use (-4, -6)
	// loopbackOnly: binds to an unspecified address go to 127.0.0.1 and
	// ::1 instead (namespace-side listeners, and --splice-only), except on
	// the namespace's side when bound to interface lo (see bindAddrs).
	loopbackOnly bool
	isNS         bool // the namespace's side (SPLICE: -T, -U)
	// loopbackSplice: a host socket on the any address gets a loopback
	// companion (see listenPlan.companion); set when the engine serves
	// the host side and splicing is on.
	loopbackSplice bool
}

// listenPlan is one socket to open.
type listenPlan struct {
	sock.Listen
	nsSide bool
	toAddr netip.Addr // target address, invalid = the usual one
	toPort uint16
	// strict: a single port the user named (not weak, not auto); at
	// start, failing to bind it is fatal. Ranges, all, auto and UDP
	// copies of TCP ports only warn.
	strict bool
	// anyAddr: bound to any address because the rule gave none, so a
	// family the host lacks is not an error.
	anyAddr bool
	// scan: opened while the target port listens on the other side.
	scan bool
	// companion: the loopback twin of a host socket on the any address,
	// served by the splice forwarder. Loopback peers connect to it
	// rather than to its twin, which the engine serves (the kernel
	// prefers the listener bound to a connection's exact address), so a
	// spliced connection is accepted, dialled and pumped on the splice
	// forwarder's one thread instead of being handed over by the engine.
	// Failing to bind it costs nothing but that shortcut: the engine's
	// splice hook takes loopback peers then.
	companion bool
}

// sockKey is what makes two sockets the same socket: a new rule that
// plans a socket with the key of an open one keeps that socket.
type sockKey struct {
	nsSide, udp, v6 bool
	addr            netip.Addr
	port            uint16
	ifname          string
}

// route is where a socket's connections go.
type route struct {
	toAddr netip.Addr
	toPort uint16
}

func (p *listenPlan) key() sockKey {
	return sockKey{nsSide: p.nsSide, udp: p.UDP, v6: p.V6, addr: p.Addr, port: p.Port, ifname: p.Ifname}
}

func (p *listenPlan) route() route { return route{p.toAddr, p.toPort} }

func (p listenPlan) proto() string {
	if p.UDP {
		return "UDP"
	}
	return "TCP"
}

func (p listenPlan) String() string {
	to := ""
	if p.toAddr.IsValid() {
		to = p.toAddr.String() + "/"
	}
	dev := ""
	if p.Ifname != "" {
		dev = "%" + p.Ifname
	}
	spliced := ""
	if p.companion {
		spliced = " (spliced)"
	}
	return fmt.Sprintf("%s %s%s:%d->%s%d%s", p.proto(), p.Addr, dev, p.Port, to, p.toPort, spliced)
}

// err wraps a failure to open p.
func (p listenPlan) err(err error) error {
	return &ForwardError{Proto: p.proto(), Addr: p.Addr, Port: p.Port, Err: err}
}

// bindAddrs lists the addresses a rule binds: its own, else any (or
// loopback) in each family in use. On a loopback-only side an
// unspecified address means that family's loopback, but for the
// namespace's rules bound to interface lo (-T and -U where binding to a
// device works): those bind to any address on lo, which takes
// connections to every address of 127.0.0.0/8 (and ::1) but no other, as
// pasta's do (passt 653705c); the kernel counts a connection to the
// namespace's own address as not on lo, though it goes through it.
func bindAddrs(r *fwdrule.Rule, f side) []netip.Addr {
	lo := f.loopbackOnly && !(f.isNS && r.IfnameString() == "lo")
	var fam []bool // v6?
	if r.Dual() {
		if f.v4 {
			fam = append(fam, false)
		}
		if f.v6 {
			fam = append(fam, true)
		}
	} else {
		a := fwdrule.AddrFrom(r.Addr)
		if (a.Is4() && !f.v4) || (a.Is6() && !f.v6) {
			return nil
		}
		if !a.IsUnspecified() || !lo {
			return []netip.Addr{a}
		}
		fam = append(fam, a.Is6())
	}
	out := make([]netip.Addr, 0, len(fam))
	for _, v6 := range fam {
		switch {
		case lo:
			out = append(out, sock.Loopback(v6))
		case v6:
			out = append(out, netip.IPv6Unspecified())
		default:
			out = append(out, netip.IPv4Unspecified())
		}
	}
	return out
}

// planPort appends the sockets of rule r for listen port p.
func planPort(out []listenPlan, r *fwdrule.Rule, addrs []netip.Addr, f side, p uint16) []listenPlan {
	for _, a := range addrs {
		lp := listenPlan{
			Listen: sock.Listen{UDP: r.UDP(), V6: a.Is6(), Addr: a, Ifname: r.IfnameString(), Port: p},
			nsSide: f.isNS, toAddr: r.Target(), toPort: r.ToPort(p),
			strict:  !r.Weak() && !r.Scan() && r.First == r.Last,
			anyAddr: r.Dual() || fwdrule.IsUnspecified(r.Addr),
			scan:    r.Scan(),
		}
		if f.loopbackSplice && a.IsUnspecified() && lp.Ifname == "" {
			lp.ReusePort = !lp.UDP // UDP shares the port through SO_REUSEADDR
			c := lp
			c.Addr, c.companion, c.strict = sock.Loopback(a.Is6()), true, false
			out = append(out, lp, c)
			continue
		}
		out = append(out, lp)
	}
	return out
}

// planStatic expands the table's rules other than auto (FlagScan) into
// sockets.
func planStatic(t *fwdrule.Table, f side) []listenPlan {
	var out []listenPlan
	for i := range t.Rules {
		r := &t.Rules[i]
		if r.Scan() {
			continue
		}
		addrs := bindAddrs(r, f)
		for p := int(r.First); p <= int(r.Last); p++ {
			out = planPort(out, r, addrs, f, uint16(p))
		}
	}
	return out
}

// planScan lists the sockets the table's auto rules want while the
// target ports in tcp and udp listen on the other side (our own sockets
// there already left out by the caller).
func planScan(t *fwdrule.Table, f side, tcp, udp *fwdrule.PortSet) []listenPlan {
	var out []listenPlan
	for i := range t.Rules {
		r := &t.Rules[i]
		if !r.Scan() {
			continue
		}
		set := tcp
		if r.UDP() {
			set = udp
		}
		var addrs []netip.Addr
		for p := int(r.First); p <= int(r.Last); p++ {
			if !set.Has(r.ToPort(uint16(p))) {
				continue
			}
			if addrs == nil {
				addrs = bindAddrs(r, f)
			}
			out = planPort(out, r, addrs, f, uint16(p))
		}
	}
	return out
}

// hasScan reports whether t has auto rules.
func hasScan(t *fwdrule.Table) bool {
	for i := range t.Rules {
		if t.Rules[i].Scan() {
			return true
		}
	}
	return false
}

// ForwardError says that a port could not be forwarded.
type ForwardError struct {
	Proto string // "TCP" or "UDP"
	Addr  netip.Addr
	Port  uint16
	Err   error
}

func (e *ForwardError) Error() string {
	where := ""
	if e.Addr.IsValid() && !e.Addr.IsUnspecified() {
		where = " on " + e.Addr.String()
	}
	msg := fmt.Sprintf("cannot forward %s port %d%s: %s", e.Proto, e.Port, where, errText(e.Err))
	if errors.Is(e.Err, syscall.EACCES) && e.Port < 1024 {
		msg += " (binding ports below 1024 needs CAP_NET_BIND_SERVICE, or a lower net.ipv4.ip_unprivileged_port_start)"
	}
	return msg
}

func (e *ForwardError) Unwrap() error { return e.Err }

// errText is an errno's plain text ("address already in use").
func errText(err error) string {
	var en unix.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return err.Error()
}

// familyMissing reports a failure that says the machine lacks the
// socket's family for an unscoped rule (no IPv6): not what the user asked
// about, and nothing a retry would change.
func familyMissing(p listenPlan, err error) bool {
	return p.anyAddr && p.V6 && (errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EADDRNOTAVAIL))
}

// bindFailureFatal reports whether failing to open p with err at start
// stops gopasta.
func bindFailureFatal(p listenPlan, err error) bool {
	return p.strict && !familyMissing(p, err)
}
