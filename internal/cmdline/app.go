// Package cmdline is gopasta's pasta-compatible command line: the option
// set (urfave/cli/v2, which also feeds --help and the man page), a
// getopt_long-style front end that gives pasta's parsing rules, validation
// into a config.Config, and the mapping of errors to exit statuses.
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gopasta/gopasta/internal/config"
)

// Version is printed by --version; release builds set it with
// -ldflags "-X github.com/gopasta/gopasta/internal/cmdline.Version=v1.2.3".
var Version = "dev"

// RunFunc carries out a validated configuration and returns the exit status.
type RunFunc func(*config.Config) (int, error)

const usageText = `gopasta [OPTION]... [COMMAND [ARG]...]
gopasta [OPTION]... PID
gopasta [OPTION]... --netns PATH|NAME
gopasta [OPTION]... --oci-hook`

const description = `gopasta gives a process its own network without privileges, as pasta does.
Without PID or --netns, it runs COMMAND (default: $SHELL, else /bin/sh) in new
user, network, UTS, IPC, mount and PID namespaces and exits with its status.
With PID or --netns, it joins that network namespace, goes to the background
once ready (unless -f) and quits when the namespace goes away. With --oci-hook,
an OCI runtime (runc, crun, podman's hooks.d) runs it as a hook, and it does
the same for the container whose state it reads on standard input (OCI HOOK).
Option parsing stops at the first argument that is not an option.
Run under the name pesto (the same binary, e.g. through a symbolic link), it
is the client of a --conf-path control socket, for gopasta or pasta alike:
"pesto PATH" lists the forwarding rules in force, and -t, -u, -T, -U (after
-A to add, -D to delete, -C to clear a table) change them; see pesto --help.`

// NewApp builds the command line definition. run is called with the
// validated configuration; it may be nil (help, version and the man page
// generator need no run function).
func NewApp(run RunFunc) *cli.App {
	app := &cli.App{
		Name:                      "gopasta",
		Usage:                     "unprivileged user-mode networking for network namespaces",
		UsageText:                 usageText,
		Description:               description,
		Version:                   Version,
		HideVersion:               true, // ours is --version only; pasta has no -v
		HideHelpCommand:           true,
		DisableSliceFlagSeparator: true, // "-t 22,25" is one spec, not two
		Flags:                     flags(),
		// Never let urfave/cli print usage or exit the process by itself.
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return &UsageError{Msg: err.Error()}
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	app.Action = func(c *cli.Context) error {
		if c.Bool("version") {
			fmt.Fprintf(c.App.Writer, "gopasta %s\n", Version)
			return nil
		}
		cfg, err := build(c, c.Args().Slice())
		if err != nil {
			return err
		}
		if run == nil {
			return nil
		}
		code, err := run(cfg)
		if err != nil || code != 0 {
			return &exitStatus{code: code, err: err}
		}
		return nil
	}
	return app
}

// Parse validates args (without the program name) and returns the
// configuration, without running anything. It is Main minus the run step,
// for tests and for tools that want to check a command line.
func Parse(args []string) (*config.Config, error) {
	var cfg *config.Config
	app := NewApp(func(c *config.Config) (int, error) { cfg = c; return 0, nil })
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	if err := runApp(app, append([]string{"gopasta"}, args...)); err != nil {
		return nil, err
	}
	return cfg, nil
}

func runApp(app *cli.App, args []string) error {
	norm, pos, err := normalize(optionTable(app.Flags), args[1:])
	if err != nil {
		return err
	}
	for _, a := range norm {
		if a == "--help" {
			// Our own layout (pasta's order, categories), not urfave/cli's.
			writeHelp(app.Writer, app)
			return nil
		}
	}
	app.Metadata = map[string]any{repeatedKey: repeatedValues(norm)}
	full := append([]string{args[0]}, norm...)
	full = append(full, "--")
	full = append(full, pos...)
	return app.RunContext(context.Background(), full)
}

// repeatedKey holds, in app.Metadata, each option's values in command line
// order (see stringSlice).
const repeatedKey = "gopasta.values"

// repeatedValues collects the values of the normalised options.
func repeatedValues(norm []string) map[string][]string {
	m := map[string][]string{}
	for _, a := range norm {
		if name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			m[name] = append(m[name], val)
		}
	}
	return m
}

// Main runs gopasta's command line: args is os.Args (program name first).
// It returns the process exit status: run's status, 0 after --help or
// --version, 1 after any error, which goes to stderr as one line.
func Main(args []string, stdout, stderr io.Writer, run RunFunc) (code int) {
	defer func() {
		// A panic here is a bug, but the user should still get one line.
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "gopasta: internal error: %v\n", r)
			code = 1
		}
	}()
	if len(args) == 0 {
		args = []string{"gopasta"}
	}
	app := NewApp(run)
	app.Writer, app.ErrWriter = stdout, stderr
	err := runApp(app, args)
	if err == nil {
		return 0
	}
	var es *exitStatus
	if errors.As(err, &es) {
		if es.err != nil {
			fmt.Fprintf(stderr, "gopasta: %s\n", oneLine(es.err.Error()))
			if es.code == 0 {
				return 1
			}
		}
		return es.code
	}
	fmt.Fprintf(stderr, "gopasta: %s\n", oneLine(err.Error()))
	return 1
}

// maxLine bounds an error line: a reason may repeat another long value
// (the port list a port is already forwarded by).
const maxLine = 1000

// oneLine keeps an error to a single line of readable length whatever
// produced it, eliding the middle of a long one.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
	if len(s) > maxLine {
		s = s[:runeStart(s, maxLine*2/3)] + " [...] " + s[runeStart(s, len(s)-maxLine/4):]
	}
	return s
}
