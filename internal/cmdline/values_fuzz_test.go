package cmdline

import (
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// valueOptions are the long names of the options that take a value, in
// flag order, for FuzzOptionValue to pick from.
func valueOptions() []string {
	var names []string
	for _, f := range flags() {
		if dg, ok := f.(cli.DocGenerationFlag); ok && dg.TakesValue() {
			names = append(names, f.Names()[0])
		}
	}
	return names
}

// FuzzOptionValue gives one option (picked by opt) an arbitrary value, so
// that every value parser sees every kind of input: Parse never panics, and
// a refused value gets one line that names the option, as an *OptionError
// for it or a *UsageError. FuzzParse cannot reach these parsers well, as it
// keeps to arguments that start with '-'.
func FuzzOptionValue(f *testing.F) {
	names := valueOptions()
	seeds := []string{"", "0", "-1", "65520", "65521", "0x5dc", "99999999999999999999", "1.2.3.4", "::1", "[::1]",
		"fe80::1%lo", "192.0.2.1/24", "255.255.255.0", "9a:55:9a:55:9a:55", "none", "auto", "all", "22:127.0.0.1",
		"~1-65535", "%lo/22", "a b", "\xff\xfe", "a\nb", "/nonexistent/x", "root:root", "4294967295", "1k", "on"}
	// Every option with an empty and a junk value, every seed with some
	// option: Parse takes milliseconds, and seeds run with every go test.
	for i := range names {
		f.Add(uint8(i), "")
		f.Add(uint8(i), "x")
	}
	for j, s := range seeds {
		f.Add(uint8(j*7), s)
	}
	f.Fuzz(func(t *testing.T, opt uint8, v string) {
		name := names[int(opt)%len(names)]
		if name == "netns" || name == "userns" {
			// A value naming a real namespace file would be accepted;
			// that is fine, but keeps the check below simple.
			if !strings.HasPrefix(v, "/nonexistent/") {
				v = "/nonexistent/" + v
			}
		}
		_, err := Parse([]string{"--" + name + "=" + v})
		if err == nil {
			return
		}
		msg := err.Error()
		if strings.Contains(oneLine(msg), "\n") || strings.TrimSpace(msg) == "" {
			t.Fatalf("--%s=%q: got error %q, want one non-empty line", name, v, msg)
		}
		var oe *OptionError
		var ue *UsageError
		switch {
		case errors.As(err, &oe):
			if !strings.Contains(oe.Option, "--"+name) && oe.Option != "PID" {
				t.Fatalf("--%s=%q: got an error for %s (%q), want one for --%s", name, v, oe.Option, msg, name)
			}
		case errors.As(err, &ue):
		default:
			t.Fatalf("--%s=%q: got error %T %q, want *OptionError or *UsageError", name, v, err, msg)
		}
	})
}
