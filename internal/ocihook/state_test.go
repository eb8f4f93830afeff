package ocihook

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// podmanState is what podman 4.3.1 with runc 1.1.5 handed a createRuntime
// hook (captured on Debian 12, trimmed ids).
const podmanState = `{"ociVersion":"1.0.2-dev","id":"5a617c7a9089","status":"creating","pid":13865,` +
	`"bundle":"/home/u/.local/share/containers/storage/vfs-containers/5a617c7a9089/userdata",` +
	`"annotations":{"io.container.manager":"libpod","io.gopasta.args":"-t 8080:80","io.podman.annotations.autoremove":"TRUE"}}`

func TestParseState(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want State
	}{
		{"podman", podmanState, State{
			OCIVersion: "1.0.2-dev", ID: "5a617c7a9089", Status: "creating", PID: 13865,
			Bundle: "/home/u/.local/share/containers/storage/vfs-containers/5a617c7a9089/userdata",
			Annotations: map[string]string{
				"io.container.manager": "libpod", "io.gopasta.args": "-t 8080:80",
				"io.podman.annotations.autoremove": "TRUE",
			},
		}},
		{"no annotations, unknown fields, whitespace",
			"\n { \"ociVersion\": \"1.2.0\", \"id\": \"c1\", \"status\": \"created\", \"pid\": 1,\n\"bundle\": \"/b\", \"future\": [1, {}] }\n",
			State{OCIVersion: "1.2.0", ID: "c1", Status: "created", PID: 1, Bundle: "/b", Annotations: map[string]string{}}},
		{"null annotations, running, largest pid",
			`{"ociVersion":"1.0.0","id":"x y","status":"running","pid":4194304,"bundle":"/","annotations":null}`,
			State{OCIVersion: "1.0.0", ID: "x y", Status: "running", PID: 4194304, Bundle: "/", Annotations: map[string]string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseState([]byte(tc.in))
			if err != nil {
				t.Fatalf("ParseState: got error %v, want none", err)
			}
			if got.OCIVersion != tc.want.OCIVersion || got.ID != tc.want.ID || got.Status != tc.want.Status ||
				got.PID != tc.want.PID || got.Bundle != tc.want.Bundle || !maps.Equal(got.Annotations, tc.want.Annotations) {
				t.Errorf("ParseState: got %+v, want %+v", *got, tc.want)
			}
		})
	}
}

func TestParseStateErrors(t *testing.T) {
	// base is a valid state with one member replaced (or removed, "-").
	base := func(member, value string) string {
		m := map[string]string{
			"ociVersion": `"1.0.2"`, "id": `"c"`, "status": `"creating"`, "pid": `42`, "bundle": `"/b"`,
		}
		if value == "-" {
			delete(m, member)
		} else {
			m[member] = value
		}
		var parts []string
		for _, k := range []string{"ociVersion", "id", "status", "pid", "bundle", "annotations"} {
			if v, ok := m[k]; ok {
				parts = append(parts, `"`+k+`":`+v)
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	for _, tc := range []struct {
		name, in, field, want string
	}{
		{"empty", "", "", "empty"},
		{"blank", " \n\t", "", "empty"},
		{"truncated", `{"pid": 4`, "", "malformed JSON"},
		{"garbage", `pid=42`, "", "malformed JSON at byte 1"},
		{"trailing garbage", base("pid", "42") + "x", "", "malformed JSON"},
		{"two objects", base("pid", "42") + base("pid", "43"), "", "malformed JSON"},
		{"array", `[1,2]`, "", "got a JSON array, want an object"},
		{"string", `"state"`, "", "got a JSON string, want an object"},
		{"null", `null`, "", "got null"},
		{"no pid", base("pid", "-"), "pid", "missing"},
		{"null pid", base("pid", "null"), "pid", "missing"},
		{"zero pid", base("pid", "0"), "pid", "got 0, want 1 to 4194304"},
		{"negative pid", base("pid", "-5"), "pid", "got -5"},
		{"huge pid", base("pid", "4194305"), "pid", "got 4194305"},
		{"overflowing pid", base("pid", "99999999999999999999"), "pid", "want a positive integer"},
		{"fractional pid", base("pid", "42.0"), "pid", "got a number 42.0, want a positive integer"},
		{"exponent pid", base("pid", "4e1"), "pid", "want a positive integer"},
		{"string pid", base("pid", `"42"`), "pid", `got a string "42", want a positive integer`},
		{"bool pid", base("pid", `true`), "pid", "got a boolean true"},
		{"object pid", base("pid", `{}`), "pid", "got an object"},
		// The value is quoted into the message: a C1 control (here the
		// one-byte CSI that starts a terminal escape sequence) or DEL must
		// come out escaped, as a control character in the id is refused.
		{"control characters in a string pid", base("pid", "\"\u009b2J\x7f\""), "pid", `got a string "\u009b2J\x7f", want a positive integer`},
		{"no version", base("ociVersion", "-"), "ociVersion", "missing"},
		{"numeric version", base("ociVersion", "1"), "ociVersion", "got a number 1, want a string"},
		{"version 2", base("ociVersion", `"2.0.0"`), "ociVersion", "want a 1.x version"},
		{"empty version", base("ociVersion", `""`), "ociVersion", "empty"},
		{"no id", base("id", "-"), "id", "missing"},
		{"control in id", base("id", `"a\nb"`), "id", "control character at byte 1"},
		{"long id", base("id", `"`+strings.Repeat("i", 1025)+`"`), "id", "1025 bytes long"},
		{"no status", base("status", "-"), "status", "missing"},
		{"stopped", base("status", `"stopped"`), "status", "the container has stopped"},
		{"unknown status", base("status", `"paused"`), "status", `got "paused", want creating, created or running`},
		{"no bundle", base("bundle", "-"), "bundle", "missing"},
		{"relative bundle", base("bundle", `"b"`), "bundle", `got "b", want an absolute path`},
		{"annotations array", base("annotations", `["a"]`), "annotations", "got a JSON array, want an object of strings"},
		{"annotation number", base("annotations", `{"io.gopasta.args": 5}`), "annotations", "got a JSON number, want an object of strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseState([]byte(tc.in))
			var se *StateError
			if !errors.As(err, &se) {
				t.Fatalf("ParseState(%q): got %+v, %v, want a *StateError", tc.in, st, err)
			}
			if se.Field != tc.field {
				t.Errorf("ParseState(%q): got field %q, want %q (%v)", tc.in, se.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseState(%q): got error %q, want it to contain %q", tc.in, err, tc.want)
			}
			if !printableLine(err.Error()) {
				t.Errorf("ParseState(%q): got error %q, want one line of printable text", tc.in, err)
			}
		})
	}
}

// printableLine reports whether s is valid UTF-8 without control
// characters: one line that cannot drive a terminal.
func printableLine(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}

// blockingReader never returns, like a terminal nobody types into.
type blockingReader struct{ ch chan struct{} }

func (b blockingReader) Read([]byte) (int, error) { <-b.ch; return 0, io.EOF }

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) {
	return 0, errors.New("read /dev/stdin: input/output error")
}

func TestReadState(t *testing.T) {
	st, err := ReadState(strings.NewReader(podmanState), time.Second)
	if err != nil || st.PID != 13865 {
		t.Fatalf("ReadState(podman's state): got %+v, %v, want pid 13865", st, err)
	}

	br := blockingReader{make(chan struct{})}
	defer close(br.ch)
	start := time.Now()
	_, err = ReadState(br, 50*time.Millisecond)
	if !errors.Is(err, ErrStateTimeout) {
		t.Errorf("ReadState(a reader that blocks): got %v, want ErrStateTimeout", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("ReadState(a reader that blocks): returned after %v, want about 50ms", took)
	}

	big := strings.NewReader(`{"id":"` + strings.Repeat("x", MaxStateSize) + `"}`)
	if _, err := ReadState(big, time.Second); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("ReadState(more than MaxStateSize): got %v, want a size error", err)
	}
	if _, err := ReadState(failingReader{}, time.Second); err == nil || !strings.Contains(err.Error(), "cannot read") {
		t.Errorf("ReadState(a failing reader): got %v, want a read error", err)
	}
}

// FuzzParseState: no input panics; an accepted state satisfies every
// invariant, and encoding it again parses to the same state.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(podmanState))
	f.Add([]byte(`{"ociVersion":"1.0.0","id":"c","status":"created","pid":1,"bundle":"/"}`))
	f.Add([]byte(`{"pid":1e3}`))
	f.Add([]byte(`{"annotations":{"a":null}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseState(b)
		if err != nil {
			var se *StateError
			if !errors.As(err, &se) {
				t.Fatalf("ParseState: got %T %v, want a *StateError", err, err)
			}
			if !printableLine(err.Error()) {
				t.Fatalf("ParseState: got error %q, want one line of printable text", err)
			}
			return
		}
		if st.PID < 1 || st.PID > maxPID || st.ID == "" || st.Annotations == nil ||
			!strings.HasPrefix(st.OCIVersion, "1") || !strings.HasPrefix(st.Bundle, "/") {
			t.Fatalf("ParseState(%q): accepted %+v, which breaks an invariant", b, *st)
		}
		again, err := json.Marshal(map[string]any{
			"ociVersion": st.OCIVersion, "id": st.ID, "status": st.Status,
			"pid": st.PID, "bundle": st.Bundle, "annotations": st.Annotations,
		})
		if err != nil {
			t.Fatal(err)
		}
		st2, err := ParseState(again)
		if err != nil {
			t.Fatalf("ParseState(re-encoded %q): got %v, want it accepted", again, err)
		}
		if st2.OCIVersion != st.OCIVersion || st2.ID != st.ID || st2.Status != st.Status ||
			st2.PID != st.PID || st2.Bundle != st.Bundle || !maps.Equal(st2.Annotations, st.Annotations) {
			t.Fatalf("ParseState: got %+v after a round trip, want %+v", *st2, *st)
		}
	})
}
