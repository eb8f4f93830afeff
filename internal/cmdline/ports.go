package cmdline

// The -t, -u, -T and -U options parsed into port specifications.

import (
	"errors"
	"strings"

	"github.com/gopasta/gopasta/internal/config"
)

// parsePortSpecs turns one port option's repeated values into a PortSpec.
// The ephemeral range that "all" and exclusion-only specs leave out is the
// host's (we are still in the host namespace here), as pasta reads it.
func parsePortSpecs(specs []string) (config.PortSpec, error) {
	opt := config.ParseOptions{}
	if r, err := config.ReadEphemeralRange(); err == nil {
		opt.Ephemeral = r
	}
	return config.ParsePortSpecsWith(specs, opt)
}

// portOption parses the values of -t/-u/-T/-U (opt is the long name); the
// error names the option and the offending value.
func portOption(opt string, specs []string) (config.PortSpec, error) {
	ps, err := parsePortSpecs(specs)
	if err == nil {
		return ps, nil
	}
	var pe *config.PortSpecError
	if errors.As(err, &pe) {
		return config.PortSpec{}, &OptionError{Option: "--" + opt, Value: pe.Spec, Reason: pe.Reason, Err: err}
	}
	return config.PortSpec{}, &OptionError{Option: "--" + opt, Value: strings.Join(specs, " "), Reason: err.Error(), Err: err}
}
