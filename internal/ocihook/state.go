// Package ocihook reads what an OCI runtime hands gopasta when it runs it as
// a hook (gopasta --oci-hook): the container's state, a JSON object on
// standard input (the runtime specification's "State": ociVersion, id,
// status, pid, bundle, annotations), and the per-container options carried
// by one of its annotations (ArgsAnnotation, split by SplitArgs).
//
// Theory of operation: everything here is untrusted input that decides
// which process gopasta attaches to, so it is checked field by field before
// anything is touched, and every mistake is one *StateError or *ArgsError
// naming the field and what was wrong. Unknown fields are ignored (later
// versions of the specification add some); missing or mistyped required
// ones are errors. The pid must be a plain positive integer: JSON numbers
// with a fraction or an exponent, strings and nulls are refused rather than
// rounded or defaulted.
package ocihook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// ArgsAnnotation is the annotation whose value adds command line options
// for one container, e.g. podman run --annotation io.gopasta.args='-t 8080:80'.
const ArgsAnnotation = "io.gopasta.args"

// MaxStateSize bounds the state a runtime may hand over. Real ones are a
// few kilobytes (podman's, with a dozen annotations, is under 1 KiB).
const MaxStateSize = 1 << 20

// maxPID is the kernel's largest possible PID (PID_MAX_LIMIT on 64-bit).
const maxPID = 1 << 22

// maxIDLen bounds the container id, which only ever appears in messages.
const maxIDLen = 1024

// Container statuses (runtime-spec "State", status).
const (
	StatusCreating = "creating"
	StatusCreated  = "created"
	StatusRunning  = "running"
	StatusStopped  = "stopped"
)

// State is a validated container state.
type State struct {
	OCIVersion  string
	ID          string
	Status      string
	PID         int
	Bundle      string
	Annotations map[string]string // never nil
}

// A StateError says why a container state was refused. Field is the JSON
// member at fault ("" for the document as a whole).
type StateError struct {
	Field  string
	Reason string
	Err    error // the JSON decoder's error, if any
}

func (e *StateError) Error() string {
	if e.Field == "" {
		return "OCI state on standard input: " + e.Reason
	}
	return "OCI state on standard input: " + e.Field + ": " + e.Reason
}

func (e *StateError) Unwrap() error { return e.Err }

// ErrStateTimeout is wrapped by the error of a ReadState that got no
// complete state in time.
var ErrStateTimeout = errors.New("no state on standard input")

// ReadState reads the whole of r (the runtime closes it after writing) and
// parses it with ParseState. A reader that neither ends nor errs within
// timeout (a terminal: someone ran the hook by hand) fails with
// ErrStateTimeout; the read is then abandoned, which is fine for a process
// that is about to exit.
func ReadState(r io.Reader, timeout time.Duration) (*State, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, MaxStateSize+1))
		done <- result{b, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case res := <-done:
		if res.err != nil {
			return nil, &StateError{Reason: "cannot read: " + res.err.Error(), Err: res.err}
		}
		if len(res.b) > MaxStateSize {
			return nil, &StateError{Reason: fmt.Sprintf("larger than %d bytes", MaxStateSize)}
		}
		return ParseState(res.b)
	case <-t.C:
		return nil, &StateError{
			Reason: fmt.Sprintf("none within %v (an OCI runtime runs gopasta --oci-hook and writes the container's state there)", timeout),
			Err:    ErrStateTimeout,
		}
	}
}

// ParseState parses and validates one container state.
func ParseState(b []byte) (*State, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, &StateError{Reason: "empty, want the container's state as a JSON object"}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, jsonError("", err)
	}
	if raw == nil {
		return nil, &StateError{Reason: "got null, want a JSON object"}
	}
	st := &State{Annotations: map[string]string{}}
	var err error
	if st.OCIVersion, err = stringField(raw, "ociVersion"); err != nil {
		return nil, err
	}
	if major, _, _ := strings.Cut(st.OCIVersion, "."); major != "1" {
		return nil, &StateError{Field: "ociVersion", Reason: fmt.Sprintf("got %q, want a 1.x version of the runtime specification", st.OCIVersion)}
	}
	if st.ID, err = stringField(raw, "id"); err != nil {
		return nil, err
	}
	if err := checkID(st.ID); err != nil {
		return nil, err
	}
	if st.Status, err = stringField(raw, "status"); err != nil {
		return nil, err
	}
	switch st.Status {
	case StatusCreating, StatusCreated, StatusRunning:
	case StatusStopped:
		return nil, &StateError{Field: "status", Reason: "the container has stopped: there is no network namespace to serve"}
	default:
		return nil, &StateError{Field: "status", Reason: fmt.Sprintf("got %q, want creating, created or running", st.Status)}
	}
	if st.PID, err = pidField(raw); err != nil {
		return nil, err
	}
	if st.Bundle, err = stringField(raw, "bundle"); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(st.Bundle) {
		return nil, &StateError{Field: "bundle", Reason: fmt.Sprintf("got %q, want an absolute path", st.Bundle)}
	}
	if a, ok := raw["annotations"]; ok && !isNull(a) {
		if err := json.Unmarshal(a, &st.Annotations); err != nil {
			return nil, jsonError("annotations", err)
		}
		if st.Annotations == nil {
			st.Annotations = map[string]string{}
		}
	}
	return st, nil
}

// jsonError turns a decoder error into a StateError that says where.
func jsonError(field string, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return &StateError{Field: field, Reason: fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se), Err: err}
	case errors.As(err, &te):
		what := te.Value
		if field == "" {
			return &StateError{Reason: fmt.Sprintf("got a JSON %s, want an object", what), Err: err}
		}
		return &StateError{Field: field, Reason: fmt.Sprintf("got a JSON %s, want an object of strings", what), Err: err}
	}
	return &StateError{Field: field, Reason: "malformed JSON: " + err.Error(), Err: err}
}

func isNull(m json.RawMessage) bool { return string(bytes.TrimSpace(m)) == "null" }

// stringField returns member name of raw, which must be a non-empty JSON
// string.
func stringField(raw map[string]json.RawMessage, name string) (string, error) {
	m, ok := raw[name]
	if !ok || isNull(m) {
		return "", &StateError{Field: name, Reason: "missing"}
	}
	var s string
	if err := json.Unmarshal(m, &s); err != nil {
		return "", &StateError{Field: name, Reason: "got " + describe(m) + ", want a string", Err: err}
	}
	if s == "" {
		return "", &StateError{Field: name, Reason: "empty"}
	}
	return s, nil
}

// pidField returns the pid member: a plain positive integer, at most the
// kernel's PID limit.
func pidField(raw map[string]json.RawMessage) (int, error) {
	m, ok := raw["pid"]
	if !ok || isNull(m) {
		return 0, &StateError{Field: "pid", Reason: "missing (the runtime runs this hook before the container has a process?)"}
	}
	s := string(bytes.TrimSpace(m))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, &StateError{Field: "pid", Reason: "got " + describe(m) + ", want a positive integer"}
	}
	if n < 1 || n > maxPID {
		return 0, &StateError{Field: "pid", Reason: fmt.Sprintf("got %d, want 1 to %d", n, maxPID)}
	}
	return int(n), nil
}

// checkID wants an id that is safe to print: no control characters (the
// decoder has already replaced invalid UTF-8), of a sensible length.
func checkID(id string) error {
	if len(id) > maxIDLen {
		return &StateError{Field: "id", Reason: fmt.Sprintf("%d bytes long, want at most %d", len(id), maxIDLen)}
	}
	if i := strings.IndexFunc(id, unicode.IsControl); i >= 0 {
		return &StateError{Field: "id", Reason: fmt.Sprintf("control character at byte %d", i)}
	}
	return nil
}

// describe names a JSON value for a message, cut short: a string is
// quoted with Go's escapes, anything else is named by its kind.
func describe(m json.RawMessage) string {
	s := string(bytes.TrimSpace(m))
	kind := "a number"
	switch {
	case s == "true" || s == "false":
		kind = "a boolean"
	case strings.HasPrefix(s, `"`):
		kind = "a string"
		// Re-quoted from its value: JSON leaves DEL and C1 controls
		// (such as the one-character escape sequence introducer) raw.
		var v string
		if json.Unmarshal(m, &v) == nil {
			s = strconv.Quote(v)
		}
	case strings.HasPrefix(s, "{"):
		return "an object"
	case strings.HasPrefix(s, "["):
		return "an array"
	}
	if len(s) > 40 {
		s = strings.ToValidUTF8(s[:40], "") + "..."
	}
	return kind + " " + s
}
