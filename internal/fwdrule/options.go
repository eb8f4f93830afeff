package fwdrule

// The command line's port forwarding: -t, -u, -T and -U in gopasta's
// dialect, with pasta's defaults.

// Options are the values of -t, -u, -T and -U, parsed, in the order
// given; nil: the option was not given.
type Options struct {
	TCP, UDP, TCPNS, UDPNS []Spec
}

// AllCaps is every capability: what a table checked without knowing the
// host can hold.
const AllCaps = CapIPv4 | CapIPv6 | CapTCP | CapUDP | CapScan | CapIfname

// Tables builds the HOST (-t, -u) and SPLICE (-T, -U) tables of o for a
// side with caps, in gopasta's dialect, leaving eph out of values without
// includes. An option not given is "auto" (nothing for a protocol caps
// lack); -u (-U) not given also forwards the ports -t (-T) forwards
// statically, best effort and without changing the port number. An error
// is a *SpecError or an *ApplyError.
func (o *Options) Tables(caps Caps, eph Range) (host, splice Table, err error) {
	host = Table{Pif: PifHost, Caps: caps}
	splice = Table{Pif: PifSplice, Caps: caps}
	for _, side := range []struct {
		t        *Table
		tcp, udp []Spec
		topt     byte
		uopt     byte
	}{{&host, o.TCP, o.UDP, 't', 'u'}, {&splice, o.TCPNS, o.UDPNS, 'T', 'U'}} {
		tcp := newApplier(side.t, false, Gopasta, eph, nil)
		if caps&CapTCP != 0 {
			if err := tcp.apply(orAuto(side.tcp, side.topt)); err != nil {
				return host, splice, err
			}
		}
		if caps&CapUDP == 0 {
			continue
		}
		udp := newApplier(side.t, false, Gopasta, eph, nil)
		if side.udp == nil && len(side.tcp) > 0 {
			if err := copyToUDP(side.t, &side.tcp[len(side.tcp)-1]); err != nil {
				return host, splice, err
			}
			udp.static = tcp.static
		}
		if err := udp.apply(orAuto(side.udp, side.uopt)); err != nil {
			return host, splice, err
		}
	}
	return host, splice, nil
}

// orAuto is specs, or pasta's default "auto" if the option was not given.
func orAuto(specs []Spec, opt byte) []Spec {
	if specs != nil {
		return specs
	}
	s, _ := Parse(opt, "auto")
	return []Spec{s}
}

// copyToUDP adds a UDP twin of every TCP rule of t but auto ones: the
// same listening address and target, the port number kept, best effort.
// from is the value an error names.
func copyToUDP(t *Table, from *Spec) error {
	n := len(t.Rules)
	for i := range n {
		r := t.Rules[i]
		if r.Proto != ProtoTCP || r.Scan() {
			continue
		}
		r.Proto, r.To, r.Flags = ProtoUDP, r.First, r.Flags|FlagWeak
		if err := t.Add(r); err != nil {
			return &ApplyError{Op: "add", Rule: r, Err: err, Spec: from}
		}
	}
	return nil
}
