package cmdline

// The -t, -u, -T and -U options parsed into port specifications.

import (
	"errors"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/fwdrule"
)

// portOptions are -t, -u, -T and -U: long name, letter, protocol.
var portOptions = []struct {
	name   string
	letter byte
	proto  string
}{{"tcp-ports", 't', "tcp"}, {"udp-ports", 'u', "udp"}, {"tcp-ns", 'T', "tcp"}, {"udp-ns", 'U', "udp"}}

// buildPorts parses the values of -t, -u, -T and -U, then builds their
// tables as a host with every capability would, so that values which
// conflict with each other fail here, on one line naming the option and
// the value. The ephemeral range that "all" and exclusions-only values
// leave out is the host's (we are still in the host namespace here), as
// pasta reads it. An option not given stays nil: port forwarding applies
// pasta's default (auto) and, for UDP, forwards the TCP ports too.
func buildPorts(c *cli.Context, cfg *config.Config) error {
	caps := fwdrule.AllCaps
	if cfg.NoTCP {
		caps &^= fwdrule.CapTCP
	}
	if cfg.NoUDP {
		caps &^= fwdrule.CapUDP
	}
	dst := map[byte]*[]fwdrule.Spec{'t': &cfg.Ports.TCP, 'u': &cfg.Ports.UDP, 'T': &cfg.Ports.TCPNS, 'U': &cfg.Ports.UDPNS}
	for _, o := range portOptions {
		values := stringSlice(c, o.name)
		if len(values) == 0 {
			continue
		}
		if (o.proto == "tcp" && cfg.NoTCP) || (o.proto == "udp" && cfg.NoUDP) {
			return usagef("--%s given but --no-%s disables %s", o.name, o.proto, strings.ToUpper(o.proto))
		}
		for _, v := range values {
			s, err := fwdrule.Parse(o.letter, v)
			if err != nil {
				return portError(err)
			}
			*dst[o.letter] = append(*dst[o.letter], s)
		}
	}
	_, _, err := cfg.Ports.Tables(caps, fwdrule.Ephemeral())
	return portError(err)
}

// portError names the option and the value err is about.
func portError(err error) error {
	long := func(letter byte) string {
		for _, o := range portOptions {
			if o.letter == letter {
				return "--" + o.name
			}
		}
		return "-" + string(letter)
	}
	var se *fwdrule.SpecError
	var ae *fwdrule.ApplyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return &OptionError{Option: long(se.Opt), Value: se.Value, Reason: se.Reason, Err: err}
	case errors.As(err, &ae) && ae.Spec != nil:
		return &OptionError{Option: long(ae.Spec.Opt), Value: ae.Spec.Value, Reason: ae.Reason(), Err: err}
	}
	return usagef("port forwarding options: %v", err)
}

// PortsManual is the man page's PORT FORWARDING section (man/gen), laid
// out as OCIHookManual.
const PortsManual = `-t and -u forward ports of the host to the namespace, -T and -U ports of
the namespace's loopback to the host's. Each takes a SPEC and may be given
several times; pesto(1) takes the same SPECs. A SPEC is "none", or a list of
ports, optionally after a listening address, interface or both:

	none
	[ADDR][%IF]/PORTS
	PORTS

PORTS is a comma-separated list of these items:

	N[-M]               forward ports N to M to the same ports
	N[-M]:T[-U]         ... to ports T to U
	N[-M]:TADDR[/T[-U]] ... to another address than the usual one
	~N[-M]              leave ports N to M out
	all[:TADDR]         every port but the ephemeral ones
	auto                only while bound on the other side

ADDR and TADDR are IPv4 or IPv6 addresses, optionally in brackets; ADDR
may also be "*", any address of both families, as when it is left out. IF
is an interface name. A SPEC that names no port ("all", "auto", or exclusions
only) stands for every port but the host's ephemeral ones
(net.ipv4.ip_local_port_range). With "auto", the ports of the SPEC are
forwarded only while their target port is bound on the other side: in the
namespace for -t and -u, on the host for -T and -U, as scanned every second.
The default of all four options is "auto"; without -u (-U), UDP also
forwards the ports -t (-T) forwards, best effort.

Exclusions apply to every SPEC of the option, and other SPECs win over the
ports of auto. -T and -U listen on the namespace's loopback unless given an
address. For example:

	-t 8080:80            host port 8080 to the namespace's port 80
	-t 127.0.0.1/8443:443 the same, listening on 127.0.0.1 only
	-t *%eth0/8080        port 8080 of any address, through eth0 only
	-t 2000-5000,~3000    ports 2000 to 5000 but 3000
	-t 8000-8010,auto     a port of 8000 to 8010 while the namespace
	                      listens on it, and no other port
	-t ::1/auto           ports the namespace listens on, from ::1`
