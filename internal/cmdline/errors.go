package cmdline

import (
	"errors"
	"fmt"
	"strings"
)

// OptionError is a bad value for one option. Its message names the option
// and the value so a user can find the mistake in a long podman or
// rootlesskit command line.
type OptionError struct {
	Option string // as the user knows it, e.g. "--mtu" or "-t/--tcp-ports"
	Value  string
	Reason string
	Err    error // underlying parser error, if any
}

func (e *OptionError) Error() string {
	if !strings.HasPrefix(e.Option, "-") {
		return fmt.Sprintf("invalid %s %q: %s", e.Option, e.Value, e.Reason)
	}
	return fmt.Sprintf("invalid %s value %q: %s", e.Option, e.Value, e.Reason)
}

func (e *OptionError) Unwrap() error { return e.Err }

// UsageError is a command line that is malformed as a whole: an unknown
// option, a missing value, options that contradict each other.
type UsageError struct {
	Msg string
	Err error // ErrUnknownOption for an unknown option
}

func (e *UsageError) Error() string { return e.Msg }

func (e *UsageError) Unwrap() error { return e.Err }

// ErrUnknownOption is wrapped by the UsageError for an option gopasta does
// not know, so callers can tell that case apart with errors.Is.
var ErrUnknownOption = errors.New("unknown option")

func unknownOption(opt string) error {
	return &UsageError{Msg: "unknown option " + opt + " (see gopasta --help)", Err: ErrUnknownOption}
}

// exitStatus carries the run function's exit status out of urfave/cli's
// Action, which can only return an error.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func (e *exitStatus) Unwrap() error { return e.err }

func usagef(format string, a ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, a...)}
}

func badValue(opt, value, reason string) error {
	return &OptionError{Option: opt, Value: value, Reason: reason}
}
