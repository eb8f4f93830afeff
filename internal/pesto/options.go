package pesto

// pesto's command line: GNU getopt_long's, permuting (internal/getopt), so
// that options and the one operand (the socket path) come in any order,
// worded as GNU getopt words its errors.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gopasta/gopasta/internal/getopt"
)

var options = []getopt.Option{
	{Short: 'd', Long: []string{"debug"}},
	{Short: 'h', Long: []string{"help"}, Stop: true},
	{Long: []string{"version"}, Stop: true},
	{Short: 'A', Long: []string{"add"}},
	{Short: 'D', Long: []string{"delete"}},
	{Short: 'C', Long: []string{"clear"}, Arg: true},
	{Short: 't', Long: []string{"tcp-ports"}, Arg: true},
	{Short: 'u', Long: []string{"udp-ports"}, Arg: true},
	{Short: 'T', Long: []string{"tcp-ns"}, Arg: true},
	{Short: 'U', Long: []string{"udp-ns"}, Arg: true},
	{Short: 's', Long: []string{"show"}},
}

// opt is one option as given: its short name ('V' for --version) and
// value.
type opt struct {
	name byte
	val  string
}

const versionOpt = 'V' // --version has no short name; this stands for it

// usageError is a malformed command line: the message getopt gives.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// parseArgs splits args (without the program name) into options, in order,
// and operands. It stops at the first -h/--help or --version (the caller
// acts on it at once, as pesto does); an error stops it too.
func parseArgs(prog string, args []string) (opts []opt, pos []string, err error) {
	got, pos, err := getopt.Parse(options, args, getopt.Permute)
	for _, o := range got {
		name := o.Short
		if name == 0 {
			name = versionOpt
		}
		opts = append(opts, opt{name, o.Value})
	}
	var e *getopt.Error
	if !errors.As(err, &e) {
		return opts, pos, err
	}
	var msg string
	switch {
	case e.Kind == getopt.ErrUnknown && strings.HasPrefix(e.Arg, "--"):
		msg = fmt.Sprintf("unrecognized option '%s'", e.Arg)
	case e.Kind == getopt.ErrUnknown:
		msg = fmt.Sprintf("invalid option -- '%s'", e.Arg[1:])
	case e.Kind == getopt.ErrAmbiguous:
		msg = fmt.Sprintf("option '%s' is ambiguous; possibilities: '--%s'", e.Arg, strings.Join(e.Candidates, "' '--"))
	case e.Kind == getopt.ErrTakesNoArg:
		msg = fmt.Sprintf("option '--%s' doesn't allow an argument", e.Option.Name())
	case strings.HasPrefix(e.Arg, "--"):
		msg = fmt.Sprintf("option '--%s' requires an argument", e.Option.Name())
	default:
		msg = fmt.Sprintf("option requires an argument -- '%s'", e.Arg[1:])
	}
	return opts, pos, &usageError{prog + ": " + msg}
}
