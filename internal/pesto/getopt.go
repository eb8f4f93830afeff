package pesto

import (
	"fmt"
	"sort"
	"strings"
)

// pesto's command line is GNU getopt_long's, permuting: options and the
// one non-option argument (the socket path) may come in any order, "--"
// ends the options, short options may be grouped (-As) and take their
// value attached (-t8080) or as the next argument, long options take it
// after '=' or as the next argument and may be abbreviated while
// unambiguous.

// option is one option pesto knows.
type option struct {
	short byte   // 0: long only
	long  string // canonical long name
	arg   bool   // takes a value
}

var options = []option{
	{'d', "debug", false},
	{'h', "help", false},
	{0, "version", false},
	{'A', "add", false},
	{'D', "delete", false},
	{'C', "clear", true},
	{'t', "tcp-ports", true},
	{'u', "udp-ports", true},
	{'T', "tcp-ns", true},
	{'U', "udp-ns", true},
	{'s', "show", false},
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

// getopt splits args (without the program name) into options, in order,
// and positional arguments. It stops at the first -h/--help or --version
// (the caller acts on it at once, as pesto does); an error stops it too.
func getopt(prog string, args []string) (opts []opt, pos []string, err error) {
	byShort := map[byte]*option{}
	for i := range options {
		if options[i].short != 0 {
			byShort[options[i].short] = &options[i]
		}
	}
	stop := func(o opt) bool { return o.name == 'h' || o.name == versionOpt }
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return opts, append(pos, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o, err := lookupLong(prog, name)
			if err != nil {
				return opts, pos, err
			}
			switch {
			case !o.arg && hasVal:
				return opts, pos, &usageError{fmt.Sprintf("%s: option '--%s' doesn't allow an argument", prog, o.long)}
			case o.arg && !hasVal:
				if i+1 >= len(args) {
					return opts, pos, &usageError{fmt.Sprintf("%s: option '--%s' requires an argument", prog, o.long)}
				}
				i++
				val = args[i]
			}
			name8 := o.short
			if name8 == 0 {
				name8 = versionOpt
			}
			opts = append(opts, opt{name8, val})
			if stop(opts[len(opts)-1]) {
				return opts, pos, nil
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o, ok := byShort[a[j]]
				if !ok {
					return opts, pos, &usageError{fmt.Sprintf("%s: invalid option -- '%c'", prog, a[j])}
				}
				if !o.arg {
					opts = append(opts, opt{name: o.short})
					if stop(opts[len(opts)-1]) {
						return opts, pos, nil
					}
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return opts, pos, &usageError{fmt.Sprintf("%s: option requires an argument -- '%c'", prog, a[j])}
					}
					i++
					val = args[i]
				}
				opts = append(opts, opt{o.short, val})
				break
			}
		default:
			pos = append(pos, a)
		}
	}
	return opts, pos, nil
}

// lookupLong finds a long option by its name or an unambiguous prefix.
func lookupLong(prog, name string) (*option, error) {
	var cands []*option
	for i := range options {
		o := &options[i]
		if o.long == name {
			return o, nil
		}
		if name != "" && strings.HasPrefix(o.long, name) {
			cands = append(cands, o)
		}
	}
	switch len(cands) {
	case 1:
		return cands[0], nil
	case 0:
		return nil, &usageError{fmt.Sprintf("%s: unrecognized option '--%s'", prog, name)}
	}
	var names []string
	for _, o := range cands {
		names = append(names, "'--"+o.long+"'")
	}
	sort.Strings(names)
	return nil, &usageError{fmt.Sprintf("%s: option '--%s' is ambiguous; possibilities: %s", prog, name, strings.Join(names, " "))}
}
