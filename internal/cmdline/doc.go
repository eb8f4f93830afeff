package cmdline

// The options as documentation: --help's text and the entries the man page
// is generated from.

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// FlagDoc describes one option for --help and the man page.
type FlagDoc struct {
	Category   string
	Short      string // "m", or "" if none
	Long       string // "mtu"
	Arg        string // value placeholder, "" for switches
	Usage      string // one sentence, placeholder without backquotes
	Default    string // "" if none worth showing
	Repeatable bool
}

// FlagDocs lists app's options in category order (Categories), each
// category in definition order, which follows pasta's man page.
func FlagDocs(app *cli.App) []FlagDoc {
	var all []FlagDoc
	for _, f := range app.Flags {
		dg, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		d := FlagDoc{}
		for _, n := range f.Names() {
			if len(n) == 1 {
				d.Short = n
			} else if d.Long == "" {
				d.Long = n
			}
		}
		d.Arg, d.Usage = unquoteUsage(dg.GetUsage())
		if dg.TakesValue() && d.Arg == "" {
			d.Arg = "VALUE"
		}
		if cf, ok := f.(cli.CategorizableFlag); ok {
			d.Category = cf.GetCategory()
		}
		switch v := f.(type) {
		case *cli.StringFlag:
			d.Default = v.DefaultText
		case *cli.StringSliceFlag:
			d.Default, d.Repeatable = v.DefaultText, true
		}
		all = append(all, d)
	}
	var out []FlagDoc
	for _, cat := range Categories {
		for _, d := range all {
			if d.Category == cat {
				out = append(out, d)
			}
		}
	}
	for _, d := range all {
		if d.Category == "" {
			out = append(out, d)
		}
	}
	return out
}

// Spelling is how an option is written in help: "-m, --mtu MTU".
func (d FlagDoc) Spelling() string {
	s := "    --" + d.Long
	if d.Short != "" {
		s = "-" + d.Short + ", --" + d.Long
	}
	if d.Arg != "" {
		s += " " + d.Arg
	}
	return s
}

// helpLine is one option in --help: spelling, then usage and default.
func (d FlagDoc) helpLine() string {
	text := d.Usage
	if d.Default != "" {
		text += " (default: " + d.Default + ")"
	}
	return fmt.Sprintf("  %-34s %s", d.Spelling(), text)
}

func writeHelp(w io.Writer, app *cli.App) {
	fmt.Fprintf(w, "Usage: %s\n\n", strings.ReplaceAll(app.UsageText, "\n", "\n       "))
	fmt.Fprintf(w, "%s\n", app.Description)
	cat := ""
	for _, d := range FlagDocs(app) {
		if d.Category != cat {
			cat = d.Category
			fmt.Fprintf(w, "\n%s:\n", cat)
		}
		fmt.Fprintln(w, d.helpLine())
	}
	fmt.Fprintf(w, "\n  %-34s %s\n", "-h, --help", "Show this help and exit")
	fmt.Fprintln(w, "\nOptions marked repeatable, or once per family, may be given more than once.")
}

// unquoteUsage takes the first `backquoted` word of usage as the value
// placeholder (urfave/cli's convention) and drops the backquotes.
func unquoteUsage(usage string) (arg, text string) {
	i := strings.IndexByte(usage, '`')
	if i < 0 {
		return "", usage
	}
	j := strings.IndexByte(usage[i+1:], '`')
	if j < 0 {
		return "", usage
	}
	arg = usage[i+1 : i+1+j]
	return arg, usage[:i] + arg + usage[i+2+j:]
}
