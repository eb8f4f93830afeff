// Package getopt reads a command line as GNU getopt_long(3) does, from a
// table of options: short options group ("-fq") and take their value
// attached ("-m1500") or as the next argument, even one that looks like an
// option ("-t -1"); long options take it after '=' or as the next argument
// and may be abbreviated while the abbreviation is unambiguous; "--" ends
// the options, and "-" alone is an operand. Order says what the first
// operand does: pesto's getopt permutes (options and operands in any
// order); pasta's stops there, as with a leading '+' in its option string,
// so that a command keeps its own options.
//
// Errors are typed (*Error) so that each program words them its own way:
// gopasta in its own style, pesto as GNU getopt does.
package getopt

import (
	"errors"
	"slices"
	"strings"
)

// Option is one option a program knows.
type Option struct {
	Short byte     // its letter; 0 for none
	Long  []string // its long names, the canonical one first
	Arg   bool     // takes a value
	// Stop ends parsing once this option is read, the rest unread: help
	// and version, which programs act on at once.
	Stop bool
}

// Name is the option's canonical long name, or its letter.
func (o *Option) Name() string {
	if len(o.Long) > 0 {
		return o.Long[0]
	}
	return string(o.Short)
}

// Order is what parsing does at the first operand.
type Order int

const (
	// Permute takes options and operands in any order (GNU's default).
	Permute Order = iota
	// RequireOrder stops at the first operand: it and everything after it
	// are operands.
	RequireOrder
)

// Opt is one option as given, with its value.
type Opt struct {
	*Option
	Value string
}

// Kinds of Error, for errors.Is.
var (
	ErrUnknown    = errors.New("unknown option")
	ErrAmbiguous  = errors.New("ambiguous option")
	ErrTakesNoArg = errors.New("option takes no value")
	ErrNeedsArg   = errors.New("option needs a value")
)

// Error is a command line getopt cannot read.
type Error struct {
	Kind error
	// Arg is the option as written without its value: "-x", "--bogus".
	Arg string
	// Option is the option meant (ErrTakesNoArg, ErrNeedsArg).
	Option *Option
	// Candidates are the long names an ambiguous abbreviation could be,
	// sorted, one per option (ErrAmbiguous).
	Candidates []string
}

func (e *Error) Error() string {
	msg := e.Kind.Error() + " " + e.Arg
	if len(e.Candidates) > 0 {
		msg += " (could be --" + strings.Join(e.Candidates, ", --") + ")"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Kind }

// Parse reads args (without the program name) against opts. It returns
// the options in the order given and the operands; with an error, what
// was read before it.
func Parse(opts []Option, args []string, order Order) (got []Opt, operands []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return got, append(operands, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o, err := lookupLong(opts, name)
			if err != nil {
				return got, operands, err
			}
			switch {
			case !o.Arg && hasVal:
				return got, operands, &Error{Kind: ErrTakesNoArg, Arg: "--" + name, Option: o}
			case o.Arg && !hasVal:
				if i+1 >= len(args) {
					return got, operands, &Error{Kind: ErrNeedsArg, Arg: "--" + name, Option: o}
				}
				i++
				val = args[i]
			}
			got = append(got, Opt{o, val})
			if o.Stop {
				return got, operands, nil
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o := lookupShort(opts, a[j])
				if o == nil {
					return got, operands, &Error{Kind: ErrUnknown, Arg: "-" + a[j:j+1]}
				}
				if !o.Arg {
					got = append(got, Opt{Option: o})
					if o.Stop {
						return got, operands, nil
					}
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return got, operands, &Error{Kind: ErrNeedsArg, Arg: "-" + a[j:j+1], Option: o}
					}
					i++
					val = args[i]
				}
				got = append(got, Opt{o, val})
				if o.Stop {
					return got, operands, nil
				}
				break
			}
		case order == RequireOrder:
			return got, append(operands, args[i:]...), nil
		default:
			operands = append(operands, a)
		}
	}
	return got, operands, nil
}

func lookupShort(opts []Option, c byte) *Option {
	for i := range opts {
		if opts[i].Short == c && c != 0 {
			return &opts[i]
		}
	}
	return nil
}

// lookupLong finds a long option by one of its names, else by an
// abbreviation of names of one option only.
func lookupLong(opts []Option, name string) (*Option, error) {
	if name == "" {
		return nil, &Error{Kind: ErrUnknown, Arg: "--"}
	}
	var match *Option
	var cands []string
	for i := range opts {
		o := &opts[i]
		var first string // o's first name, in sorted order, that name abbreviates
		for _, n := range o.Long {
			if n == name {
				return o, nil
			}
			if strings.HasPrefix(n, name) && (first == "" || n < first) {
				first = n
			}
		}
		if first != "" {
			match = o
			cands = append(cands, first)
		}
	}
	switch len(cands) {
	case 0:
		return nil, &Error{Kind: ErrUnknown, Arg: "--" + name}
	case 1:
		return match, nil
	}
	slices.Sort(cands)
	return nil, &Error{Kind: ErrAmbiguous, Arg: "--" + name, Candidates: cands}
}
