package nstest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The seccomp report mode of a test run. With SeccompEnv=log in the test
// process's environment, every gopasta the helpers start (they pass both
// variables on, env below) reports each system call outside its allowlist
// instead of dying of it, appending a line to SeccompReportEnv's file, and
// SeccompReportMain fails the run if any line is there at its end: an
// error path that no test checks the outcome of still fails the suite.
// `make test` runs this way (docs/security.md).
const (
	SeccompEnv       = "GOPASTA_SECCOMP"        // internal/sandbox.SeccompEnv
	SeccompReportEnv = "GOPASTA_SECCOMP_REPORT" // internal/sandbox.SeccompReportEnv
)

// seccompVars are passed on to every command the helpers start.
var seccompVars = []string{SeccompEnv, SeccompReportEnv}

// SeccompReport is a run's report file.
type SeccompReport struct {
	// Path is the file.
	Path string
	// from is the file's size when the run started: lines before it are
	// another run's.
	from int64
	// dir, when set, was made for this run and goes at its end.
	dir string
}

// StartSeccompReport prepares the report file when the run is in report
// mode (SeccompEnv=log), and returns nil otherwise. The file is
// SeccompReportEnv's, created if missing; else a fresh one in a directory
// of its own, named in this process's environment so that the helpers
// pass it on. Every gopasta a test starts must be able to append to it,
// uid 65534's in a user namespace of its own too: it is made mode 0666 in
// a directory everyone may search (a given file's directories must be).
func StartSeccompReport() (*SeccompReport, error) {
	if os.Getenv(SeccompEnv) != "log" {
		return nil, nil
	}
	r := &SeccompReport{Path: os.Getenv(SeccompReportEnv)}
	if r.Path == "" {
		dir, err := os.MkdirTemp("", "gopasta-seccomp-")
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		r.dir, r.Path = dir, filepath.Join(dir, "report")
		if err := os.Setenv(SeccompReportEnv, r.Path); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	f, err := os.OpenFile(r.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SeccompReportEnv, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	r.from = fi.Size()
	if fi.Mode().Perm() != 0o666 { // the umask's doing, or the caller's file
		if err := f.Chmod(0o666); err != nil {
			return nil, fmt.Errorf("%s: %s must be writable by every uid the tests use (mode 0666): %w", SeccompReportEnv, r.Path, err)
		}
	}
	return r, nil
}

// Lines returns the lines appended to the report since StartSeccompReport.
func (r *SeccompReport) Lines() ([]string, error) {
	f, err := os.Open(r.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(r.from, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\n")
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\n"), nil
}

// Close removes the report file when StartSeccompReport made it.
func (r *SeccompReport) Close() {
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

// SeccompReportMain runs the tests (run is m.Run, or what wraps it) and
// returns the status to exit with: in report mode (SeccompEnv=log), a
// failure if any gopasta reported a system call outside its allowlist,
// with the report's lines on standard error. TestMain of every package
// whose tests start gopasta calls it.
func SeccompReportMain(run func() int) int { return seccompReportMain(run, os.Stderr) }

func seccompReportMain(run func() int, w io.Writer) int {
	r, err := StartSeccompReport()
	if err != nil {
		fmt.Fprintln(w, "nstest: seccomp report:", err)
		return 1
	}
	code := run()
	if r == nil {
		return code
	}
	lines, err := r.Lines()
	if err != nil {
		fmt.Fprintln(w, "nstest: seccomp report:", err)
		return 1
	}
	if len(lines) == 0 {
		r.Close()
		return code
	}
	fmt.Fprintf(w, "FAIL: gopasta made %d system call(s) outside its seccomp allowlist during this run (%s=log; %s):\n",
		len(lines), SeccompEnv, r.Path)
	for _, l := range lines {
		fmt.Fprintln(w, "    "+l)
	}
	fmt.Fprintln(w, "Killed outside report mode. Each needs an entry in internal/sandbox/allowlist.go with its reason, or its call removed (docs/security.md).")
	if code == 0 {
		code = 1
	}
	return code
}
