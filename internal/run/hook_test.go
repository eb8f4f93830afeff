package run

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/cmdline"
	"github.com/gopasta/gopasta/internal/ocihook"
	"github.com/gopasta/gopasta/ns"
)

// goneProcess returns the PID of a process that has exited and been reaped.
func goneProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatalf("running true: %v", err)
	}
	return cmd.Process.Pid
}

// ownNetNSProcess starts a process with a network namespace of its own
// (unshare -rn: works for root and for users allowed user namespaces) and
// returns its PID once it is there.
func ownNetNSProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("unshare", "-rn", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("skipping: unshare -rn: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if same, err := sameFile("/proc/self/ns/net", "/proc/"+strconv.Itoa(pid)+"/ns/net"); err == nil && !same {
			return pid
		}
		if cmd.ProcessState != nil {
			break
		}
	}
	t.Skipf("skipping: unshare -rn sleep did not get a network namespace of its own within 5s (user namespaces not allowed?)")
	return 0
}

func TestCheckHookTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		want string // "" = accepted
		is   error
	}{
		{"our own namespace", os.Getpid(), "shares the network namespace the hook runs in (the host's)", nil},
		{"gone", goneProcess(t), "no such process (the container is gone)", ns.ErrNoProcess},
		{"a namespace of its own", ownNetNSProcess(t), "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkHookTarget(tc.pid)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkHookTarget(%d): got %v, want nil", tc.pid, err)
				}
				return
			}
			var he *HookTargetError
			if !errors.As(err, &he) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkHookTarget(%d): got %v, want a *HookTargetError with %q", tc.pid, err, tc.want)
			}
			if want := "container process " + strconv.Itoa(tc.pid) + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("checkHookTarget(%d): got %q, want it to start with %q", tc.pid, err, want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("checkHookTarget(%d): got %v, want it to wrap %v", tc.pid, err, tc.is)
			}
		})
	}
}

// TestRunHookBadInput: every refusal happens before anything is started,
// and is the error of the step at fault.
func TestRunHookBadInput(t *testing.T) {
	other := ownNetNSProcess(t)
	state := func(pid int, args string) string {
		return `{"ociVersion":"1.0.2","id":"c","status":"creating","pid":` + strconv.Itoa(pid) +
			`,"bundle":"/b","annotations":{"io.gopasta.args":` + strconv.Quote(args) + `}}`
	}
	saved := os.Args
	t.Cleanup(func() { os.Args = saved })
	os.Args = []string{"gopasta", "--oci-hook", "--config-net"}
	for _, tc := range []struct {
		name, stdin, want string
		as                any
	}{
		{"malformed", `{"pid":`, "OCI state on standard input: malformed JSON", new(*ocihook.StateError)},
		{"no pid", `{"ociVersion":"1.0.2","id":"c","status":"creating","bundle":"/b"}`, "OCI state on standard input: pid: missing", new(*ocihook.StateError)},
		{"gone", state(goneProcess(t), ""), "no such process (the container is gone)", new(*HookTargetError)},
		{"host's namespace", state(os.Getpid(), ""), "shares the network namespace the hook runs in", new(*HookTargetError)},
		{"unterminated quote", state(other, "-t '80"), "annotation io.gopasta.args: unterminated single quote (at byte 3)", new(*cmdline.ExtraArgsError)},
		{"unknown option", state(other, "--bogus"), "annotation io.gopasta.args: unknown option --bogus", new(*cmdline.ExtraArgsError)},
		{"a command", state(other, "sh"), `annotation io.gopasta.args: "sh" is not an option`, new(*cmdline.ExtraArgsError)},
		{"bad value", state(other, "-t 0"), `annotation io.gopasta.args: invalid --tcp-ports value "0"`, new(*cmdline.ExtraArgsError)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, err := runHook(strings.NewReader(tc.stdin))
			if code != 1 || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("runHook(%q): got %d, %v, want 1 and an error with %q", tc.stdin, code, err, tc.want)
			}
			switch as := tc.as.(type) {
			case **ocihook.StateError:
				if !errors.As(err, as) {
					t.Errorf("runHook(%q): got %T, want *ocihook.StateError", tc.stdin, err)
				}
			case **HookTargetError:
				if !errors.As(err, as) {
					t.Errorf("runHook(%q): got %T, want *HookTargetError", tc.stdin, err)
				}
			case **cmdline.ExtraArgsError:
				if !errors.As(err, as) {
					t.Errorf("runHook(%q): got %T, want *cmdline.ExtraArgsError", tc.stdin, err)
				}
			}
			if len(os.Args) != 3 || os.Args[1] != "--oci-hook" {
				t.Errorf("runHook(%q): os.Args became %q, want it untouched on a refusal", tc.stdin, os.Args)
			}
		})
	}
}
