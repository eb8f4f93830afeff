package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// runBin runs the binary as the current user outside any test namespace:
// everything here must fail (or answer) before touching a namespace.
func runBin(t *testing.T, bin string, args ...string) nstest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := nstest.Command(ctx, nstest.Current(), append([]string{bin}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := nstest.Result{Stdout: stdout.String(), Stderr: stderr.String(), Code: -1, TimedOut: ctx.Err() != nil}
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
	} else {
		r.Err = err
	}
	if r.TimedOut {
		t.Fatalf("gopasta %q: got no exit within 15s, want a prompt answer\n%s", args, r)
	}
	checkNoPanic(t, r)
	return r
}

// TestBadOptions runs the binary with every kind of invalid
// command line: each must fail with exactly one line on stderr naming the
// option and the offending value, and print nothing on stdout.
func TestBadOptions(t *testing.T) {
	bin := nstest.Binary(t)
	tests := []struct {
		name string
		args []string
		// mention: each inner list is alternatives, one of which the error
		// line must contain (option spellings, the value).
		mention [][]string
	}{
		{"port-too-big", []string{"-t", "70000", "--", "true"}, [][]string{{"-t", "tcp-ports"}, {"70000"}}},
		{"port-range-reversed", []string{"-t", "5-3", "--", "true"}, [][]string{{"-t", "tcp-ports"}, {"5-3"}}},
		{"bad-address", []string{"-a", "notanip", "--", "true"}, [][]string{{"-a", "address"}, {"notanip"}}},
		{"mtu-too-small", []string{"-m", "60", "--", "true"}, [][]string{{"-m", "mtu"}, {"60"}}},
		{"mtu-too-big", []string{"-m", "70000", "--", "true"}, [][]string{{"-m", "mtu"}, {"70000"}}},
		{"v4-and-v6-only", []string{"-4", "-6", "--", "true"}, [][]string{{"-4", "ipv4-only"}, {"-6", "ipv6-only"}}},
		{"unknown-flag", []string{"--bogus", "--", "true"}, [][]string{{"bogus"}}},
		// Above any possible pid_max (2^22).
		{"no-such-pid", []string{"4194305"}, [][]string{{"4194305"}}},
		// Bytes that are not UTF-8 come back escaped, on one line.
		{"non-utf8-ifname", []string{"-I", "\xff\n\xfe", "--", "true"}, [][]string{{"-I", "ns-ifname"}, {`\xff\n\xfe`}}},
		{"non-utf8-port", []string{"-t", "2\xff2", "--", "true"}, [][]string{{"-t", "tcp-ports"}, {`"2\xff2"`}}},
		{"bool-with-value", []string{"--no-tcp=yes", "--", "true"}, [][]string{{"no-tcp"}, {"takes no value"}}},
		{"missing-value", []string{"-t"}, [][]string{{"-t"}, {"needs a value"}}},
		// Checked before anything is set up, not once the namespace is.
		{"pid-file-no-dir", []string{"-P", "/nonexistent/gopasta-e2e/pid", "--", "true"}, [][]string{{"-P", "--pid"}, {"/nonexistent/gopasta-e2e"}}},
		{"log-file-no-dir", []string{"-l", "/nonexistent/gopasta-e2e/log", "--", "true"}, [][]string{{"-l", "--log-file"}, {"/nonexistent/gopasta-e2e"}}},
		{"empty-dns", []string{"-D", "", "--", "true"}, [][]string{{"-D", "--dns"}, {`""`}}},
		{"netmask-and-prefix", []string{"-a", "192.0.2.5/24", "-n", "16", "--", "true"}, [][]string{{"-n", "netmask"}, {"192.0.2.5/24"}}},
		// lo carries no IPv6 route outwards: refused as pasta does, not
		// silently replaced by local mode.
		{"outbound-if6-unusable", []string{"--outbound-if6", "lo", "--", "true"}, [][]string{{"--outbound-if6"}, {"lo"}}},
		{"huge-port-list", []string{"-t", longPortList(18000) + ",5", "--", "true"}, [][]string{{"-t", "tcp-ports"}, {"Too many rules (maximum 255)"}}},
		{"long-port-list", []string{"-t", longPortList(200) + ",5", "--", "true"}, [][]string{{"-t", "tcp-ports"}, {"port 5 is already forwarded"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runBin(t, bin, tc.args...)
			if r.Code == 0 || r.Code == -1 {
				t.Errorf("gopasta %q: got exit %d, want a non-zero exit status", tc.args, r.Code)
			}
			if r.Stdout != "" {
				t.Errorf("gopasta %q stdout: got %q, want nothing", tc.args, r.Stdout)
			}
			line := strings.TrimRight(r.Stderr, "\n")
			if line == "" || strings.Contains(line, "\n") {
				t.Fatalf("gopasta %.200q stderr: got %.200q, want exactly one line", tc.args, r.Stderr)
			}
			// A line nobody can read is no clear error: long values are
			// shortened.
			if len(line) > maxErrorLine {
				t.Errorf("gopasta %.200q stderr: got a line of %d bytes (%.200q...), want at most %d", tc.args, len(line), line, maxErrorLine)
			}
			for _, alts := range tc.mention {
				if !containsAny(line, alts) {
					t.Errorf("gopasta %q error: got %q, want it to mention one of %q", tc.args, line, alts)
				}
			}
		})
	}
}

// maxErrorLine bounds an error line, whatever the size of the value.
const maxErrorLine = 1024

// longPortList is "1,2,...,n", a value near the kernel's 128 KiB limit on
// one argument for n = 18000.
func longPortList(n int) string {
	var b strings.Builder
	for p := 1; p <= n; p++ {
		if p > 1 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(p))
	}
	return b.String()
}

func containsAny(s string, alts []string) bool {
	for _, a := range alts {
		if strings.Contains(s, a) {
			return true
		}
	}
	return false
}

// TestVersionHelp checks the two informational options.
func TestVersionHelp(t *testing.T) {
	bin := nstest.Binary(t)
	for _, args := range [][]string{{"--version"}, {"--help"}, {"-h"}} {
		r := runBin(t, bin, args...)
		if r.Code != 0 {
			t.Errorf("gopasta %q: got exit %d, want 0\n%s", args, r.Code, r)
		}
		if strings.TrimSpace(r.Stdout) == "" {
			t.Errorf("gopasta %q stdout: got nothing, want text", args)
		}
	}
}
