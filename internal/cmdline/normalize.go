package cmdline

// The front end of the command line: getopt_long's rules (internal/getopt,
// stopping at the first operand, as pasta's leading '+') turned into the
// one form urfave/cli parses unambiguously.

import (
	"errors"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gopasta/gopasta/internal/getopt"
)

// optionTable is getopt's table of fs and the help flag.
func optionTable(fs []cli.Flag) []getopt.Option {
	var out []getopt.Option
	seen := map[string]bool{}
	for _, f := range append(fs, cli.HelpFlag) {
		names := f.Names()
		if seen[names[0]] {
			continue // app.Setup may have added the help flag already
		}
		seen[names[0]] = true
		o := getopt.Option{Stop: names[0] == "help"}
		if dg, ok := f.(cli.DocGenerationFlag); ok {
			o.Arg = dg.TakesValue()
		}
		for _, n := range names {
			if len(n) == 1 {
				o.Short = n[0]
			} else {
				o.Long = append(o.Long, n)
			}
		}
		out = append(out, o)
	}
	return out
}

// normalize rewrites a pasta-style command line into "--long" or
// "--long=value" for each option, then the operands. Doing this ourselves
// keeps urfave/cli's own quirks (single-dash long options, its
// short-option splitting, usage dumps) out of the way and gives one clear
// error per mistake. Help ends it at once, as in pasta.
func normalize(opts []getopt.Option, args []string) (norm []string, pos []string, err error) {
	got, pos, err := getopt.Parse(opts, args, getopt.RequireOrder)
	if err != nil {
		return nil, nil, usageError(err)
	}
	for _, o := range got {
		switch {
		case o.Stop:
			return append(norm, "--help"), nil, nil
		case o.Arg:
			norm = append(norm, "--"+o.Name()+"="+o.Value)
		default:
			norm = append(norm, "--"+o.Name())
		}
	}
	return norm, pos, nil
}

// usageError words getopt's error as gopasta does.
func usageError(err error) error {
	var e *getopt.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Kind {
	case getopt.ErrUnknown:
		return unknownOption(e.Arg)
	case getopt.ErrAmbiguous:
		return usagef("option %s is ambiguous (could be --%s)", e.Arg, strings.Join(e.Candidates, ", --"))
	case getopt.ErrTakesNoArg:
		return usagef("option --%s takes no value", e.Option.Name())
	case getopt.ErrNeedsArg:
		if !strings.HasPrefix(e.Arg, "--") {
			return usagef("option %s (--%s) needs a value", e.Arg, e.Option.Name())
		}
		return usagef("option --%s needs a value", e.Option.Name())
	}
	return usagef("%v", err)
}
