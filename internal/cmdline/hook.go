package cmdline

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gopasta/gopasta/internal/config"
)

// The OCI hook (--oci-hook). An OCI runtime runs the hook with the options
// of its hooks.d entry and the container's state on standard input. The
// command line alone says only "hook mode" (config.ModeOCIHook); internal/run
// reads the state, and HookAttach turns the hook's options, the container's
// annotation and its PID into the attach command line the run stands for,
// `gopasta [OPTION]... PID`, validated like any other.

// hookForbidden are the options that make no sense in hook mode, with why.
// The hook's own command line and the annotation are both held to them.
var hookForbidden = map[string]string{
	"netns":         "the namespace is the container's, from the state on standard input",
	"fd":            "the TAP is created in the container's namespace",
	"userns":        "the user namespace is the container process's",
	"foreground":    "the runtime waits for the hook to exit before it starts the container",
	"no-netns-quit": "gopasta must end with the container",
}

// annotationOnlyForbidden are further options an annotation may not hold:
// they change what the hook is, not how it serves.
var annotationOnlyForbidden = map[string]string{
	"oci-hook": "it is for the hooks.d entry",
	"help":     "there is no terminal to show it on",
	"version":  "there is no terminal to show it on",
}

// buildHook validates the hook's own command line: options only, none of
// hookForbidden. The target comes later, from the state (HookAttach).
func buildHook(c *cli.Context, cfg *config.Config, pos []string) error {
	if len(pos) > 0 {
		return usagef("--oci-hook takes no PID or command: the container's PID comes from the state on standard input (got %q)", pos[0])
	}
	for _, name := range sortedKeys(hookForbidden) {
		if c.IsSet(name) {
			return usagef("--%s makes no sense with --oci-hook: %s", name, hookForbidden[name])
		}
	}
	cfg.Mode = config.ModeOCIHook
	cfg.NetNSOnly = c.Bool("netns-only")
	return nil
}

// An ExtraArgsError is a mistake in options that came from somewhere other
// than the command line (the container's annotation); Source names where.
type ExtraArgsError struct {
	Source string
	Err    error
}

func (e *ExtraArgsError) Error() string { return e.Source + ": " + e.Err.Error() }

func (e *ExtraArgsError) Unwrap() error { return e.Err }

// HookAttach returns the attach command line an --oci-hook run stands for,
// without the program name, and its validated configuration: hook (the
// hook's own arguments, os.Args[1:], as accepted by Parse) without
// --oci-hook, then extra (the words of the container's annotation, whose
// options add to and override the hook's as if they followed them on the
// command line), then "--" and pid. A mistake in extra, or one that extra
// makes with the hook's options, is an *ExtraArgsError naming source.
func HookAttach(hook, extra []string, source string, pid int) ([]string, *config.Config, error) {
	t := optionTable(flags())
	base, pos, err := normalize(t, hook)
	if err != nil {
		return nil, nil, err
	}
	if len(pos) > 0 {
		return nil, nil, usagef("--oci-hook takes no PID or command (got %q)", pos[0])
	}
	base = slices.DeleteFunc(base, func(a string) bool { return a == "--oci-hook" })
	more, pos, err := normalize(t, extra)
	if err != nil {
		return nil, nil, &ExtraArgsError{Source: source, Err: err}
	}
	if len(pos) > 0 {
		return nil, nil, &ExtraArgsError{Source: source, Err: usagef("%q is not an option: a command or a PID makes no sense there", pos[0])}
	}
	for _, a := range more {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		why, bad := hookForbidden[name]
		if !bad {
			why, bad = annotationOnlyForbidden[name]
		}
		if bad {
			return nil, nil, &ExtraArgsError{Source: source, Err: usagef("--%s makes no sense there: %s", name, why)}
		}
	}
	target := []string{"--", strconv.Itoa(pid)}
	argv := slices.Concat(base, more, target)
	cfg, err := Parse(argv)
	if err != nil && len(more) > 0 {
		// The hook's options were valid on their own (Parse accepted
		// them before the run began), so unless the PID is to blame now,
		// the extra options are.
		if _, err2 := Parse(slices.Concat(base, target)); err2 == nil {
			err = &ExtraArgsError{Source: source, Err: err}
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if cfg == nil || cfg.Mode != config.ModeAttach {
		return nil, nil, fmt.Errorf("internal error: %q is not an attach command line", argv)
	}
	return argv, cfg, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// OCIHookManual is the man page's OCI HOOK section (man/gen): paragraphs
// separated by blank lines; lines that start with a tab are examples, shown
// as they are.
const OCIHookManual = `With --oci-hook, gopasta is a createRuntime or prestart hook of an OCI
runtime (runc, crun), or of podman through a hooks.d directory (podman has
no pasta network mode before version 4.4). The runtime writes the
container's state on standard input. gopasta checks it, then attaches to the
container's process as "gopasta [OPTION]... PID" would, with the hook's own
options followed by those in the container's io.gopasta.args annotation
(split into words as a shell would, without expansions), goes to the
background once the namespace is configured and its forwarded ports
listen, and exits 0 so that the container starts. It quits when the
container's process ends.

The annotation takes every option, except what makes no sense for one
container: a command or PID, --netns, --userns, -f, --no-netns-quit,
--oci-hook. A malformed state, a missing pid, a process that is gone or that
shares the hook's network namespace (the host's), and a bad annotation are
each reported as one line on standard error with exit status 1, which
aborts the container's start; nothing is left running. There is no
terminal: -l FILE keeps the log.

A hooks.d entry (a file such as DIR/gopasta.json) that serves the
containers started with the annotation; an empty value adds no options:

	{
	  "version": "1.0.0",
	  "hook": {
	    "path": "/usr/local/bin/gopasta",
	    "args": ["gopasta", "--oci-hook", "--config-net"]
	  },
	  "when": { "annotations": { "^io\\.gopasta\\.args$": ".*" } },
	  "stages": ["createRuntime"]
	}

Rootless podman then gives a container its network, port 8080 of the host
forwarded to its port 80 (runc and cgroupfs work where crun refuses hybrid
cgroup hierarchies):

	podman --runtime runc --cgroup-manager cgroupfs --hooks-dir DIR \
	    run --rm --network none --annotation io.gopasta.args='-t 8080:80' IMAGE

With runc alone, the same hook goes in config.json's hooks.createRuntime
(path and args as above), next to a "network" entry in linux.namespaces and
the annotation in annotations.`
