package portfwd

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/sock"
)

// Port forwarding plans: which sockets the -t, -u, -T and -U rules ask for.
// Planning is a pure function of the rules and a few facts about a side,
// so every spec form is unit-tested without a namespace; route.go opens
// what the plan says.

// side is what planning needs to know about one side.
type side struct {
	v4, v6 bool // families in use (-4, -6)
	// loopbackOnly: binds without an address go to 127.0.0.1 and ::1
	// instead of any (namespace-side listeners, and --splice-only).
	loopbackOnly bool
	isNS         bool // the namespace's side (-T, -U)
}

// listenPlan is one socket to open.
type listenPlan struct {
	sock.Listen
	nsSide bool
	toAddr netip.Addr // target address, invalid = the usual one
	toPort uint16
	// strict: a single port the user named; failing to bind it is fatal.
	// Ranges, all, auto and UDP copies of TCP ports only warn.
	strict bool
	// anyAddr: bound to any address because the rule gave none, so a
	// family the host lacks is not an error.
	anyAddr bool
}

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
	return fmt.Sprintf("%s %s%s:%d->%s%d", p.proto(), p.Addr, dev, p.Port, to, p.toPort)
}

// err wraps a failure to open p.
func (p listenPlan) err(err error) error {
	return &ForwardError{Proto: p.proto(), Addr: p.Addr, Port: p.Port, Err: err}
}

// bindAddrs lists the addresses a rule binds: its own, else any (or
// loopback) in each family in use.
func bindAddrs(r *config.PortRule, f side) []netip.Addr {
	if r.BindAddr.IsValid() {
		a := r.BindAddr.Unmap()
		if (a.Is4() && !f.v4) || (a.Is6() && !f.v6) {
			return nil
		}
		return []netip.Addr{a}
	}
	var out []netip.Addr
	if f.v4 {
		if f.loopbackOnly {
			out = append(out, netip.AddrFrom4([4]byte{127, 0, 0, 1}))
		} else {
			out = append(out, netip.IPv4Unspecified())
		}
	}
	if f.v6 {
		if f.loopbackOnly {
			out = append(out, netip.IPv6Loopback())
		} else {
			out = append(out, netip.IPv6Unspecified())
		}
	}
	return out
}

// planStatic expands the static rules of spec into sockets.
func planStatic(spec *config.PortSpec, udp bool, f side) []listenPlan {
	if spec.Mode == config.PortsNone || spec.Mode == config.PortsUnset {
		return nil
	}
	var out []listenPlan
	for i := range spec.Rules {
		r := &spec.Rules[i]
		if r.Auto {
			continue
		}
		addrs := bindAddrs(r, f)
		for p := int(r.First); p <= int(r.Last); p++ {
			for _, a := range addrs {
				out = append(out, listenPlan{
					Listen: sock.Listen{UDP: udp, V6: a.Is6(), Addr: a, Ifname: r.BindIf, Port: uint16(p)},
					nsSide: f.isNS, toAddr: r.ToAddr.Unmap(),
					toPort:  r.ToFirst + uint16(p-int(r.First)),
					strict:  !r.Weak && r.First == r.Last,
					anyAddr: !r.BindAddr.IsValid(),
				})
			}
		}
	}
	return out
}

// planAuto lists the sockets auto forwarding wants while the ports in
// listening are in use on the other side (own excluded by the caller).
func planAuto(spec *config.PortSpec, udp bool, f side, listening *config.PortSet) []listenPlan {
	if spec.Mode != config.PortsAuto {
		return nil
	}
	var out []listenPlan
	for i := range spec.Rules {
		r := &spec.Rules[i]
		if !r.Auto {
			continue
		}
		addrs := bindAddrs(r, f)
		for p := int(r.First); p <= int(r.Last); p++ {
			port := uint16(p)
			if !listening.Has(port) || !spec.AutoCandidate(port) {
				continue
			}
			for _, a := range addrs {
				out = append(out, listenPlan{
					Listen: sock.Listen{UDP: udp, V6: a.Is6(), Addr: a, Ifname: r.BindIf, Port: port},
					nsSide: f.isNS, toPort: port, anyAddr: !r.BindAddr.IsValid()})
			}
		}
	}
	return out
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

// bindFailureFatal reports whether failing to open p with err stops gopasta.
func bindFailureFatal(p listenPlan, err error) bool {
	if !p.strict {
		return false
	}
	// Any address in a family the machine does not have (no IPv6) is
	// not what the user asked about.
	if p.anyAddr && p.V6 && (errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EADDRNOTAVAIL)) {
		return false
	}
	return true
}
