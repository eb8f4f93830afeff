package cmdline

// The command line's errors, their one-line messages and their exit
// statuses.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
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
		return fmt.Sprintf("invalid %s %s: %s", e.Option, quoteValue(e.Value), e.Reason)
	}
	return fmt.Sprintf("invalid %s value %s: %s", e.Option, quoteValue(e.Value), e.Reason)
}

// maxQuotedValue is the longest value an error message repeats whole; a
// port list near the kernel's 128 KiB argument limit would otherwise make
// a line nobody reads.
const maxQuotedValue = 128

// quoteValue quotes s as %q does, eliding the middle of a long value: its
// start finds it on the command line, its end shows where it stops.
func quoteValue(s string) string {
	if len(s) <= maxQuotedValue {
		return strconv.Quote(s)
	}
	head, tail := s[:runeStart(s, 80)], s[runeStart(s, len(s)-32):]
	return fmt.Sprintf("%q...%q (%d bytes)", head, tail, len(s))
}

// runeStart moves i back to the start of the UTF-8 sequence it falls in, so
// that cutting there splits no character.
func runeStart(s string, i int) int {
	for j := i; j > 0 && j > i-utf8.UTFMax; j-- {
		if utf8.RuneStart(s[j]) {
			return j
		}
	}
	return i
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
