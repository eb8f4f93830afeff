package cmdline

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
