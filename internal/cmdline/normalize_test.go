package cmdline

import (
	"reflect"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	tab := optionTable(NewApp(nil).Flags)
	tests := []struct {
		args     string
		wantNorm string
		wantPos  string
	}{
		{"-fq", "--foreground --quiet", ""},
		{"-f -q", "--foreground --quiet", ""},
		{"-m1500", "--mtu=1500", ""},
		{"-fm 1500", "--foreground --mtu=1500", ""},
		{"-fm1500 x", "--foreground --mtu=1500", "x"},
		{"--mtu 1500", "--mtu=1500", ""},
		{"--mtu=1500", "--mtu=1500", ""},
		{"--mtu= x", "--mtu=", "x"},
		{"-t -1", "--tcp-ports=-1", ""}, // a required value is taken even if it looks like an option
		{"--confi", "--config-net", ""}, // "--conf" is ambiguous since --conf-path, as in pasta
		{"--conf-p /tmp/s", "--conf-path=/tmp/s", ""},
		{"-c/tmp/s", "--conf-path=/tmp/s", ""},
		{"--tcp-p 22", "--tcp-ports=22", ""},
		{"-46", "--ipv4-only --ipv6-only", ""},
		{"sh -c x", "", "sh -c x"},
		{"-q -- -q", "--quiet", "-q"},
		{"-q - x", "--quiet", "- x"},
		{"-h --bogus", "--help", ""},
	}
	for _, tt := range tests {
		norm, pos, err := normalize(tab, strings.Fields(tt.args))
		if err != nil {
			t.Errorf("%q: got error %v", tt.args, err)
			continue
		}
		if got, want := strings.Join(norm, " "), tt.wantNorm; got != want {
			t.Errorf("%q: got options %q, want %q", tt.args, got, want)
		}
		if got, want := pos, strings.Fields(tt.wantPos); !reflect.DeepEqual(got, want) && len(got)+len(want) > 0 {
			t.Errorf("%q: got positional %q, want %q", tt.args, got, want)
		}
	}
}

// FuzzNormalize: the front end never panics and, when it accepts a command
// line, its output parses again to the same thing (it is a fixed point).
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"-fq\x00-m1500", "--mtu=1\x00sh\x00-c", "--\x00-x", "-t\x00-1", "--no-d", "-"} {
		f.Add(s)
	}
	tab := optionTable(NewApp(nil).Flags)
	f.Fuzz(func(t *testing.T, s string) {
		norm, _, err := normalize(tab, strings.Split(s, "\x00"))
		if err != nil {
			return
		}
		again, pos, err := normalize(tab, norm)
		if err != nil || !reflect.DeepEqual(again, norm) || len(pos) != 0 {
			t.Fatalf("normalised %q re-parsed as %q %q %v", norm, again, pos, err)
		}
	})
}

// FuzzParse: no command line makes the parser panic, and a rejected one
// always yields a one-line message.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"-m\x0060", "-t\x0070000", "-a\x00notanip", "--netns\x00x", "-4\x00-6", "-S\x00a b", "--log-size\x001G", "-n\x00255.255.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		for _, a := range args {
			// Positional arguments would spawn nothing here, but a PID
			// or a path could name real files; keep to options.
			if !strings.HasPrefix(a, "-") {
				return
			}
		}
		if _, err := Parse(args); err != nil && strings.Contains(oneLine(err.Error()), "\n") {
			t.Fatalf("multi-line error %q", err)
		}
	})
}
