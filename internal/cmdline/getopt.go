package cmdline

import (
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

// optSpec is what getopt needs to know about one option.
type optSpec struct {
	long      string // canonical long name
	takesArg  bool
	shortName byte // 0 if none
}

// optTable indexes options by long and by short name.
type optTable struct {
	long  map[string]*optSpec
	short map[byte]*optSpec
	names []string // sorted long names, for prefix matching
}

func newOptTable(fs []cli.Flag) *optTable {
	t := &optTable{long: map[string]*optSpec{}, short: map[byte]*optSpec{}}
	for _, f := range append(fs, cli.HelpFlag) {
		if _, dup := t.long[f.Names()[0]]; dup {
			continue // app.Setup may have added the help flag already
		}
		names := f.Names()
		takes := false
		if dg, ok := f.(cli.DocGenerationFlag); ok {
			takes = dg.TakesValue()
		}
		s := &optSpec{long: names[0], takesArg: takes}
		for _, n := range names {
			if len(n) == 1 {
				s.shortName = n[0]
				t.short[n[0]] = s
			} else {
				t.long[n] = s
				t.names = append(t.names, n)
			}
		}
	}
	sort.Strings(t.names)
	return t
}

// lookupLong resolves a long option the way getopt_long does: an exact
// match, else an unambiguous prefix.
func (t *optTable) lookupLong(name string) (*optSpec, error) {
	if name == "" {
		return nil, unknownOption("--")
	}
	if s, ok := t.long[name]; ok {
		return s, nil
	}
	var cands []string
	seen := map[*optSpec]bool{}
	for _, n := range t.names {
		if strings.HasPrefix(n, name) && !seen[t.long[n]] {
			seen[t.long[n]] = true
			cands = append(cands, "--"+n)
		}
	}
	switch len(cands) {
	case 0:
		return nil, unknownOption("--" + name)
	case 1:
		return t.long[strings.TrimPrefix(cands[0], "--")], nil
	}
	return nil, usagef("option --%s is ambiguous (could be %s)", name, strings.Join(cands, ", "))
}

// getopt rewrites a pasta-style command line (getopt_long with a leading
// '+': short options may be clustered, values may be attached, long options
// may be abbreviated, parsing stops at the first non-option or "--") into
// the one form urfave/cli and Go's flag package parse unambiguously:
// "--long" or "--long=value" for each option, then "--", then the
// positional arguments. Doing this ourselves keeps urfave/cli's own quirks
// (single-dash long options, its short-option splitting, usage dumps) out
// of the way and gives one clear error per mistake.
func getopt(t *optTable, args []string) (norm []string, pos []string, err error) {
	i := 0
	for i < len(args) {
		a := args[i]
		switch {
		case a == "--":
			return norm, args[i+1:], nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			s, err := t.lookupLong(name)
			if err != nil {
				return nil, nil, err
			}
			i++
			if s.long == "help" {
				// pasta prints help as soon as it reads the option.
				return append(norm, "--help"), nil, nil
			}
			if !s.takesArg {
				if hasVal {
					return nil, nil, usagef("option --%s takes no value", s.long)
				}
				norm = append(norm, "--"+s.long)
				continue
			}
			if !hasVal {
				if i >= len(args) {
					return nil, nil, usagef("option --%s needs a value", s.long)
				}
				val = args[i]
				i++
			}
			norm = append(norm, "--"+s.long+"="+val)
		case len(a) > 1 && a[0] == '-':
			i++
			for j := 1; j < len(a); j++ {
				s, ok := t.short[a[j]]
				if !ok {
					return nil, nil, unknownOption("-" + string(a[j]))
				}
				if s.long == "help" {
					return append(norm, "--help"), nil, nil
				}
				if !s.takesArg {
					norm = append(norm, "--"+s.long)
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i >= len(args) {
						return nil, nil, usagef("option -%c (--%s) needs a value", a[j], s.long)
					}
					val = args[i]
					i++
				}
				norm = append(norm, "--"+s.long+"="+val)
				break
			}
		default:
			// First non-option: everything from here on belongs to the
			// command (or is the PID), even if it looks like an option.
			return norm, args[i:], nil
		}
	}
	return norm, nil, nil
}
