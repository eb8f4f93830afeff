package getopt

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// testOptions has a bit of everything: short and long, aliases, values,
// shared prefixes, a stop.
var testOptions = []Option{
	{Short: 'f', Long: []string{"foreground"}},
	{Short: 'q', Long: []string{"quiet"}},
	{Short: 'm', Long: []string{"mtu"}, Arg: true},
	{Short: 't', Long: []string{"tcp-ports"}, Arg: true},
	{Long: []string{"tcp-ns"}, Arg: true},
	{Long: []string{"conf-path"}, Arg: true},
	{Long: []string{"config-net"}},
	{Long: []string{"outbound", "out"}, Arg: true},
	{Short: 'h', Long: []string{"help"}, Stop: true},
}

// show renders what Parse read: each option by name, "=value" when it
// takes one, then "|" and the operands.
func show(got []Opt, operands []string) string {
	var b []string
	for _, o := range got {
		s := o.Name()
		if o.Arg {
			s += "=" + o.Value
		}
		b = append(b, s)
	}
	return strings.Join(b, " ") + " | " + strings.Join(operands, " ")
}

func TestParse(t *testing.T) {
	tests := []struct {
		args          string
		require, perm string // show() in each order
	}{
		{"-fq", "foreground quiet | ", "foreground quiet | "},
		{"-m1500", "mtu=1500 | ", "mtu=1500 | "},
		{"-fm 1500 x", "foreground mtu=1500 | x", "foreground mtu=1500 | x"},
		{"-fm1500 x -q", "foreground mtu=1500 | x -q", "foreground mtu=1500 quiet | x"},
		{"--mtu 1500", "mtu=1500 | ", "mtu=1500 | "},
		{"--mtu= x", "mtu= | x", "mtu= | x"},
		{"-t -1", "tcp-ports=-1 | ", "tcp-ports=-1 | "}, // a value is taken even if it looks like an option
		{"--confi", "config-net | ", "config-net | "},
		{"--conf-p /s", "conf-path=/s | ", "conf-path=/s | "},
		{"--tcp-p 22", "tcp-ports=22 | ", "tcp-ports=22 | "},
		{"--out 1", "outbound=1 | ", "outbound=1 | "},  // an alias, whole
		{"--outb 1", "outbound=1 | ", "outbound=1 | "}, // an abbreviation
		{"--o 1", "outbound=1 | ", "outbound=1 | "},    // abbreviating two names of one option
		{"sh -q x", " | sh -q x", "quiet | sh x"},      // the first operand
		{"-q -- -q", "quiet | -q", "quiet | -q"},       // "--" ends the options
		{"x -- -q", " | x -- -q", " | x -q"},           //
		{"-q - x", "quiet | - x", "quiet | - x"},       // "-" is an operand
		{"-h --bogus", "help | ", "help | "},           // stops at help
		{"x -h y", " | x -h y", "help | x"},            //
	}
	for _, tc := range tests {
		for _, o := range []struct {
			order Order
			want  string
		}{{RequireOrder, tc.require}, {Permute, tc.perm}} {
			got, ops, err := Parse(testOptions, strings.Fields(tc.args), o.order)
			if err != nil {
				t.Errorf("%q (order %d): got error %v", tc.args, o.order, err)
				continue
			}
			if s := show(got, ops); s != o.want {
				t.Errorf("%q (order %d): got %q, want %q", tc.args, o.order, s, o.want)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		args  string
		kind  error
		arg   string
		name  string   // Option.Name(), if any
		cands []string // for ErrAmbiguous
	}{
		{"-x", ErrUnknown, "-x", "", nil},
		{"-fx", ErrUnknown, "-x", "", nil},
		{"--bogus", ErrUnknown, "--bogus", "", nil},
		{"--=1", ErrUnknown, "--", "", nil},
		{"--conf", ErrAmbiguous, "--conf", "", []string{"conf-path", "config-net"}},
		{"--tcp 1", ErrAmbiguous, "--tcp", "", []string{"tcp-ns", "tcp-ports"}},
		{"--quiet=1", ErrTakesNoArg, "--quiet", "quiet", nil},
		{"--qu=1", ErrTakesNoArg, "--qu", "quiet", nil},
		{"--mtu", ErrNeedsArg, "--mtu", "mtu", nil},
		{"-fm", ErrNeedsArg, "-m", "mtu", nil},
	}
	for _, tc := range tests {
		_, _, err := Parse(testOptions, strings.Fields(tc.args), RequireOrder)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: got %v, want an *Error", tc.args, err)
			continue
		}
		if !errors.Is(err, tc.kind) || e.Arg != tc.arg {
			t.Errorf("%q: got %v on %q, want %v on %q", tc.args, e.Kind, e.Arg, tc.kind, tc.arg)
		}
		if tc.name != "" && (e.Option == nil || e.Option.Name() != tc.name) {
			t.Errorf("%q: got option %v, want %s", tc.args, e.Option, tc.name)
		}
		if tc.cands != nil && !slices.Equal(e.Candidates, tc.cands) {
			t.Errorf("%q: got candidates %q, want %q", tc.args, e.Candidates, tc.cands)
		}
	}
}

// FuzzParse: Parse never panics, and what it reads, written back in the
// canonical form ("--name=value", "--", operands), reads the same again.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"-fq\x00-m1500", "--mtu=1\x00sh\x00-c", "--\x00-x", "-t\x00-1", "--conf",
		"-\x00--out", "x\x00-h\x00y", "--o=1", "-fmq"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, permute bool) {
		order := RequireOrder
		if permute {
			order = Permute
		}
		got, ops, err := Parse(testOptions, strings.Split(s, "\x00"), order)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Arg == "" {
				t.Fatalf("%q: untyped error %#v", s, err)
			}
			return
		}
		var again []string
		for _, o := range got {
			if o.Arg {
				again = append(again, "--"+o.Name()+"="+o.Value)
			} else {
				again = append(again, "--"+o.Name())
			}
		}
		if len(got) > 0 && got[len(got)-1].Stop {
			ops = nil // the rest was not read
		}
		again = append(append(again, "--"), ops...)
		got2, ops2, err := Parse(testOptions, again, order)
		if err != nil || show(got2, ops2) != show(got, ops) {
			t.Fatalf("%q read as %q, written back as %q, read again as %q (%v)", s, show(got, ops), again, show(got2, ops2), err)
		}
	})
}
