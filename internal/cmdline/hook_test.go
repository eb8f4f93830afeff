package cmdline

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/fwdrule"
)

// TestHookCommandLine: --oci-hook alone selects hook mode; the options of
// a hooks.d entry go with it.
func TestHookCommandLine(t *testing.T) {
	for _, args := range [][]string{
		{"--oci-hook"},
		{"--oci-hook", "--config-net", "-t", "8080:80", "-l", "/tmp/hook.log"},
		{"--config-net", "--oci", "-q"}, // abbreviated, anywhere among the options
		{"--oci-hook", "--netns-only"},
	} {
		cfg := mustParse(t, args...)
		if cfg.Mode != config.ModeOCIHook || cfg.NetNS != "" || cfg.PID != 0 || len(cfg.Command) != 0 {
			t.Errorf("Parse(%q): got mode %v netns %q pid %d command %q, want hook mode and no target",
				args, cfg.Mode, cfg.NetNS, cfg.PID, cfg.Command)
		}
	}
}

// TestHookCommandLineErrors: options that make no sense for a hook fail
// with one line and status 1, before anything runs.
func TestHookCommandLineErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--oci-hook", pid}, `--oci-hook takes no PID or command: the container's PID comes from the state on standard input (got "` + pid + `")`},
		{[]string{"--oci-hook", "sh", "-c", "true"}, `--oci-hook takes no PID or command`},
		{[]string{"--oci-hook", "--netns", "/proc/self/ns/net"}, "--netns makes no sense with --oci-hook: the namespace is the container's"},
		{[]string{"--oci-hook", "--userns", "/proc/self/ns/user"}, "--userns makes no sense with --oci-hook"},
		{[]string{"-f", "--oci-hook"}, "--foreground makes no sense with --oci-hook: the runtime waits for the hook"},
		{[]string{"--oci-hook", "--no-netns-quit"}, "--no-netns-quit makes no sense with --oci-hook: gopasta must end with the container"},
		{[]string{"--oci-hook=yes"}, "option --oci-hook takes no value"},
	} {
		var stdout, stderr bytes.Buffer
		ran := false
		code := Main(append([]string{"gopasta"}, tc.args...), &stdout, &stderr, func(*config.Config) (int, error) { ran = true; return 0, nil })
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != 1 || ran || len(lines) != 1 || !strings.Contains(lines[0], tc.want) || stdout.Len() != 0 {
			t.Errorf("%q: got code %d ran %v stdout %q stderr %q, want 1 false, nothing, one line with %q",
				tc.args, code, ran, stdout.String(), stderr.String(), tc.want)
		}
	}
}

func TestHookAttach(t *testing.T) {
	me := os.Getpid()
	for _, tc := range []struct {
		name        string
		hook, extra []string
		wantArgv    []string
		check       func(*config.Config) (got, want any)
	}{
		{
			name: "hook options only", hook: []string{"--oci-hook", "--config-net", "-t", "8080:80"},
			wantArgv: []string{"--config-net", "--tcp-ports=8080:80", "--", pid},
			check:    func(c *config.Config) (any, any) { return tcpRules(c), "8080->80" },
		},
		{
			name: "annotation adds ports", hook: []string{"--config-net", "--oci-hook", "-t", "8080:80"}, extra: []string{"-t", "9090:90", "-u", "53"},
			wantArgv: []string{"--config-net", "--tcp-ports=8080:80", "--tcp-ports=9090:90", "--udp-ports=53", "--", pid},
			check:    func(c *config.Config) (any, any) { return tcpRules(c), "8080->80 9090->90" },
		},
		{
			name: "annotation overrides", hook: []string{"--oci-hook", "-m", "1500", "-q"}, extra: []string{"-m9000", "-d"},
			wantArgv: []string{"--mtu=1500", "--quiet", "--mtu=9000", "--debug", "--", pid},
			check:    func(c *config.Config) (any, any) { return [2]any{c.MTU, c.Quiet}, [2]any{9000, false} },
		},
		{
			name: "attach to the PID, user namespace and all", hook: []string{"--oci-hook"}, extra: []string{"--"},
			wantArgv: []string{"--", pid},
			check: func(c *config.Config) (any, any) {
				return [4]any{c.Mode, c.PID, c.NetNS, c.UserNS},
					[4]any{config.ModeAttach, me, "/proc/" + pid + "/ns/net", "/proc/" + pid + "/ns/user"}
			},
		},
		{
			name: "netns-only", hook: []string{"--oci-hook", "--netns-only"},
			wantArgv: []string{"--netns-only", "--", pid},
			check:    func(c *config.Config) (any, any) { return [2]any{c.NetNSOnly, c.UserNS}, [2]any{true, ""} },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, cfg, err := HookAttach(tc.hook, tc.extra, "annotation x", me)
			if err != nil {
				t.Fatalf("HookAttach(%q, %q): got error %v, want none", tc.hook, tc.extra, err)
			}
			if !slices.Equal(argv, tc.wantArgv) {
				t.Errorf("HookAttach(%q, %q): got argv %q, want %q", tc.hook, tc.extra, argv, tc.wantArgv)
			}
			if got, want := tc.check(cfg); got != want {
				t.Errorf("HookAttach(%q, %q): got %v, want %v", tc.hook, tc.extra, got, want)
			}
			// The command line stands on its own: the background copy
			// and the nsenter re-execution parse it again.
			again := mustParse(t, argv...)
			if got, want := tc.check(again); got != want {
				t.Errorf("Parse(%q): got %v, want %v", argv, got, want)
			}
		})
	}
}

func TestHookAttachErrors(t *testing.T) {
	me := os.Getpid()
	const src = "annotation io.gopasta.args"
	for _, tc := range []struct {
		name        string
		hook, extra []string
		pid         int
		want        string
		extraFault  bool
	}{
		{"unknown option", nil, []string{"--bogus"}, me, src + ": unknown option --bogus", true},
		{"unknown short option", nil, []string{"-Z"}, me, src + ": unknown option -Z", true},
		{"missing value", nil, []string{"-t"}, me, src + ": option -t (--tcp-ports) needs a value", true},
		{"bad port", nil, []string{"-t", "99999"}, me, src + `: invalid --tcp-ports value "99999": port 99999 is out of range`, true},
		{"a command", nil, []string{"-t", "80", "sh"}, me, src + `: "sh" is not an option: a command or a PID makes no sense there`, true},
		{"a PID", nil, []string{"1"}, me, src + `: "1" is not an option`, true},
		{"after --", nil, []string{"--", "x"}, me, src + `: "x" is not an option`, true},
		{"netns", nil, []string{"--netns=/proc/1/ns/net"}, me, src + ": --netns makes no sense there: the namespace is the container's", true},
		{"userns", nil, []string{"--userns", "/proc/1/ns/user"}, me, src + ": --userns makes no sense there", true},
		{"foreground", nil, []string{"-qf"}, me, src + ": --foreground makes no sense there: the runtime waits", true},
		{"no-netns-quit", nil, []string{"--no-netns-quit"}, me, src + ": --no-netns-quit makes no sense there", true},
		{"oci-hook", nil, []string{"--oci-hook"}, me, src + ": --oci-hook makes no sense there", true},
		{"help", nil, []string{"-h"}, me, src + ": --help makes no sense there", true},
		{"version", nil, []string{"--version"}, me, src + ": --version makes no sense there", true},
		{"conflict with the hook's options", []string{"--oci-hook", "--no-tcp"}, []string{"-t", "80"}, me, src + ": --tcp-ports given but --no-tcp disables TCP", true},
		{"contradiction", nil, []string{"-4", "-6"}, me, src + ": -4/--ipv4-only and -6/--ipv6-only cannot be used together", true},
		{"process gone", nil, []string{"-t", "80"}, 4194304, `invalid PID "4194304": no such process`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook := tc.hook
			if hook == nil {
				hook = []string{"--oci-hook"}
			}
			argv, cfg, err := HookAttach(hook, tc.extra, src, tc.pid)
			if err == nil {
				t.Fatalf("HookAttach(%q, %q): got %q %+v, want an error", hook, tc.extra, argv, cfg)
			}
			if !strings.HasPrefix(err.Error(), tc.want) && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("HookAttach(%q, %q): got error %q, want %q", hook, tc.extra, err, tc.want)
			}
			var ee *ExtraArgsError
			if errors.As(err, &ee) != tc.extraFault {
				t.Errorf("HookAttach(%q, %q): got %T (%v), want an *ExtraArgsError: %v", hook, tc.extra, err, err, tc.extraFault)
			}
		})
	}
}

// hostRules lists c's HOST table, built with every capability, without
// the listing's trailing spaces.
func hostRules(c *config.Config) []string {
	host, _, err := c.Ports.Tables(fwdrule.AllCaps, fwdrule.DefaultEphemeral)
	if err != nil {
		return []string{err.Error()}
	}
	var s []string
	for _, r := range host.Rules {
		s = append(s, strings.TrimSpace(r.String()))
	}
	return s
}

// tcpRules renders the static TCP rules of c's HOST table for comparison.
func tcpRules(c *config.Config) string {
	host, _, err := c.Ports.Tables(fwdrule.AllCaps, fwdrule.DefaultEphemeral)
	if err != nil {
		return err.Error()
	}
	var s []string
	for _, r := range host.Rules {
		if r.Proto == fwdrule.ProtoTCP && !r.Scan() {
			s = append(s, fmt.Sprintf("%d->%d", r.First, r.To))
		}
	}
	return strings.Join(s, " ")
}

// FuzzHookAttach: whatever words an annotation holds, HookAttach either
// refuses them or returns an attach command line that parses on its own to
// the same target.
func FuzzHookAttach(f *testing.F) {
	for _, s := range []string{"-t 8080:80", "-t", "--netns x", "sh", "-qf", "-m9000 -d --", "--oci-hook", "-4 -6", "--tcp-ports=auto -u none"} {
		f.Add(s)
	}
	me := os.Getpid()
	f.Fuzz(func(t *testing.T, s string) {
		extra := strings.Fields(s)
		argv, cfg, err := HookAttach([]string{"--oci-hook", "--config-net"}, extra, "annotation x", me)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("HookAttach(%q): got a multi-line error %q", extra, err)
			}
			return
		}
		if cfg.Mode != config.ModeAttach || cfg.PID != me || cfg.Foreground || cfg.NoNetNSQuit {
			t.Fatalf("HookAttach(%q): got mode %v pid %d foreground %v no-netns-quit %v, want attach to %d, background, quitting with it",
				extra, cfg.Mode, cfg.PID, cfg.Foreground, cfg.NoNetNSQuit, me)
		}
		if argv[len(argv)-1] != strconv.Itoa(me) || argv[len(argv)-2] != "--" {
			t.Fatalf("HookAttach(%q): got argv %q, want it to end in -- %d", extra, argv, me)
		}
		again, err := Parse(argv)
		if err != nil || again.PID != me || again.Mode != config.ModeAttach {
			t.Fatalf("Parse(%q): got %+v, %v, want the same attach run", argv, again, err)
		}
	})
}
