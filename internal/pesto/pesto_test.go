package pesto

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/ctlsock"
	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/fwdrule/fwdruletest"
	"github.com/gopasta/gopasta/internal/pestowire"
)

// referenceTables are the tables of the reference transcript: pasta
// started with "-t 8080", on a host whose ephemeral range is 32768-60999.
func referenceTables(t testing.TB) []fwdrule.Table {
	eph := fwdrule.Range{First: 32768, Last: 60999}
	host := fwdrule.Table{Pif: fwdrule.PifHost, Caps: 0x3f}
	splice := fwdrule.Table{Pif: fwdrule.PifSplice, Caps: 0x3f}
	for _, a := range []struct {
		t    *fwdrule.Table
		opt  byte
		spec string
	}{{&host, 't', "8080"}, {&host, 'u', "auto"}, {&splice, 'T', "auto"}, {&splice, 'U', "auto"}} {
		s, err := fwdrule.Parse(a.opt, a.spec)
		if err == nil {
			err = fwdrule.Apply(a.t, []fwdrule.Spec{s}, false, fwdrule.Pasta, eph, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return []fwdrule.Table{host, splice}
}

// server starts a control socket over the reference tables; the path is
// short, as the transcripts' "SOCK".
func server(t *testing.T) (*fwdruletest.Store, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "pesto")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m := fwdruletest.New(referenceTables(t))
	p := filepath.Join(dir, "SOCK")
	s, err := ctlsock.Start(ctlsock.Options{Path: p, Tables: m, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	t.Chdir(dir) // so that the path given can be "SOCK"
	return m, "SOCK"
}

func pesto(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(append([]string{"pesto"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// transcript is pesto's output for the reference tables, byte for byte.
const transcript = `passt/pasta configuration (SOCK)
  HOST
    TCP [*]:8080  =>  8080 
    UDP [*]:1-32767  =>  1-32767  (best effort) (auto-scan)
    UDP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)
  SPLICE
    TCP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)
    TCP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)
    UDP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)
    UDP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)
`

func TestShowTranscript(t *testing.T) {
	m, sock := server(t)
	code, out, errs := pesto(sock)
	if code != 0 || errs != "" {
		t.Fatalf("got exit %d, stderr %q; want 0 and nothing", code, errs)
	}
	if out != transcript {
		t.Errorf("listing:\n got %q\nwant %q", out, transcript)
	}
	// -s alone changes nothing and lists the same.
	if code, out, _ := pesto("-s", sock); code != 0 || out != transcript {
		t.Errorf("-s: got exit %d, %q; want the plain listing", code, out)
	}
	if n := m.Replaced(); n != 0 {
		t.Errorf("showing replaced the tables %d times, want 0", n)
	}
}

// hostLines is the HOST part of a listing.
func hostLines(listing string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(listing, "\n") {
		switch {
		case l == "  HOST":
			in = true
		case strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "    "):
			in = false
		case in:
			out = append(out, l)
		}
	}
	return out
}

func TestEdits(t *testing.T) {
	m, sock := server(t)
	// -A -t 9090 prints nothing; the next listing has the rule at the end
	// of HOST.
	if code, out, errs := pesto("-A", "-t", "9090", sock); code != 0 || out != "" || errs != "" {
		t.Fatalf("-A -t 9090: got exit %d, %q, %q; want 0 and no output", code, out, errs)
	}
	_, out, _ := pesto(sock)
	h := hostLines(out)
	if len(h) != 4 || h[3] != "    TCP [*]:9090  =>  9090 " {
		t.Errorf("after -A -t 9090: HOST %q, want TCP [*]:9090 appended", h)
	}

	// -s with a replacement: both listings, HOST replaced as a whole.
	code, out, errs := pesto("-s", "-t", "127.0.0.1/8443:443,~8444", sock)
	if code != 0 || errs != "" {
		t.Fatalf("-s -t ...: got exit %d, stderr %q", code, errs)
	}
	if !strings.HasPrefix(out, "Previous configuration (SOCK)\n  HOST\n    TCP [*]:8080  =>  8080 \n") ||
		!strings.Contains(out, "Updated configuration (SOCK)\n  HOST\n    TCP [127.0.0.1]:8443  =>  443 \n  SPLICE\n") {
		t.Errorf("-s -t 127.0.0.1/8443:443,~8444: got\n%s", out)
	}

	for _, tc := range []struct {
		args []string // with SOCK where the path goes
		host []string
	}{
		{[]string{"-u", "0.0.0.0/53:10.0.0.1/53", "SOCK"}, []string{"    UDP [0.0.0.0]:53  =>  10.0.0.1:53 "}},
		{[]string{"-u", "100-200,auto", "SOCK"}, []string{"    UDP [*]:100-200  =>  100-200  (auto-scan)"}},
		{[]string{"-t", "none", "SOCK"}, nil},
		// The path first, options grouped, values attached (getopt permutes).
		{[]string{"SOCK", "-At8080", "--udp-ports=53"}, []string{"    TCP [*]:8080  =>  8080 ", "    UDP [*]:53  =>  53 "}},
		{[]string{"-D", "SOCK", "--tcp-p", "8080"}, []string{"    UDP [*]:53  =>  53 "}},
		{[]string{"-t", "1-5,~3", "-A", "-t", "10", "SOCK"}, []string{"    TCP [*]:1-2  =>  1-2 ", "    TCP [*]:4-5  =>  4-5 ", "    TCP [*]:10  =>  10 "}},
	} {
		if code, _, errs := pesto(tc.args...); code != 0 {
			t.Errorf("%q: got exit %d, stderr %q", tc.args, code, errs)
			continue
		}
		_, out, _ := pesto(sock)
		if h := hostLines(out); strings.Join(h, "|") != strings.Join(tc.host, "|") {
			t.Errorf("%q: HOST %q, want %q", tc.args, h, tc.host)
		}
	}

	// -C empties a table by its name, and counts as its one clearing.
	if code, _, _ := pesto("-C", "SPLICE", sock); code != 0 {
		t.Fatal("-C SPLICE failed")
	}
	if _, out, _ := pesto(sock); !strings.HasSuffix(out, "  SPLICE\n") {
		t.Errorf("after -C SPLICE: got %q, want SPLICE empty", out)
	}
	if code, _, _ := pesto("-C", "HOST", "-t", "7", "-t", "8", sock); code != 0 {
		t.Fatal("-C HOST -t 7 -t 8 failed")
	}
	if _, out, _ := pesto(sock); !slicesEqual(hostLines(out), []string{"    TCP [*]:7  =>  7 ", "    TCP [*]:8  =>  8 "}) {
		t.Errorf("-C HOST -t 7 -t 8: HOST %q, want both rules (no second clearing)", hostLines(out))
	}
	if m.Replaced() == 0 {
		t.Error("no update reached the server")
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// TestErrors: each failure is exit 1 with pasta's message on stderr,
// nothing on stdout, and nothing sent.
func TestErrors(t *testing.T) {
	m, sock := server(t)
	long := "/tmp/" + strings.Repeat("x", 103)
	tests := []struct {
		args []string
		want string // stderr
	}{
		{[]string{"-t", "80x", sock}, "Invalid port specifier '80x'\n"},
		{[]string{"-A", "-t", "8080", sock}, "Forwarding configuration conflict: TCP [*]:8080  =>  8080  versus TCP [*]:8080  =>  8080 \nUnable to add rule TCP [*]:8080  =>  8080 \n"},
		{[]string{"-D", "-t", "7070", sock}, "Couldn't find forwarding rule to delete: TCP [*]:7070  =>  7070 \nUnable to delete rule TCP [*]:7070  =>  7070 \n"},
		{[]string{"-C", "TAP", sock}, "Unsupported pif name TAP\n"},
		{[]string{"-t", "80:10.0.0.1", sock}, "Dual stack forward to IPv4 address 10.0.0.1 unsupported\nDid you mean 0.0.0.0/... instead?\nUnable to add rule TCP [*]:80  =>  10.0.0.1:80 \n"},
		{[]string{"-C", "host", sock}, "Unsupported pif name host\n"},
		{[]string{"-T", "127.0.0.1/80", sock}, "Listening address not allowed for -T 127.0.0.1/80\n"},
		{[]string{"/nonexistent-pesto-dir/sock"}, "Failed to connect to /nonexistent-pesto-dir/sock: No such file or directory\n"},
		{[]string{long}, "Invalid socket path \"" + long + "\"\n"},
	}
	for _, tc := range tests {
		code, out, errs := pesto(tc.args...)
		if code != 1 || out != "" || errs != tc.want {
			t.Errorf("%q: got exit %d, stdout %q, stderr %q; want 1, nothing, %q", tc.args, code, out, errs, tc.want)
		}
	}
	if n := m.Replaced(); n != 0 {
		t.Errorf("failed edits sent %d updates, want 0", n)
	}
}

func TestUsage(t *testing.T) {
	_, sock := server(t)
	tests := []struct {
		args          []string
		code          int
		stdout, first string // prefixes; first: stderr's first line
	}{
		{nil, 1, "", "Usage: pesto [OPTION]... PATH"},
		{[]string{sock, sock}, 1, "", "Usage: pesto"},
		{[]string{"-x", sock}, 1, "", "pesto: invalid option -- 'x'"},
		{[]string{"--bogus", sock}, 1, "", "pesto: unrecognized option '--bogus'"},
		{[]string{"--tcp", "1", sock}, 1, "", "pesto: option '--tcp' is ambiguous; possibilities: '--tcp-ns' '--tcp-ports'"},
		{[]string{"--add=1", sock}, 1, "", "pesto: option '--add' doesn't allow an argument"},
		{[]string{sock, "-t"}, 1, "", "pesto: option requires an argument -- 't'"},
		{[]string{sock, "--clear"}, 1, "", "pesto: option '--clear' requires an argument"},
		{[]string{"-h"}, 0, "Usage: pesto [OPTION]... PATH", ""},
		{[]string{"--help", "--bogus"}, 0, "Usage: pesto", ""},
		{[]string{"--version"}, 0, "pesto ", ""},
		{[]string{"--vers"}, 0, "pesto ", ""},
	}
	for _, tc := range tests {
		code, out, errs := pesto(tc.args...)
		if code != tc.code || !strings.HasPrefix(out, tc.stdout) || (tc.stdout == "" && out != "") || !strings.HasPrefix(errs, tc.first) {
			t.Errorf("%q: got exit %d, stdout %.60q, stderr %.80q; want %d, %q, %q", tc.args, code, out, errs, tc.code, tc.stdout, tc.first)
		}
	}
}

func TestDebug(t *testing.T) {
	_, sock := server(t)
	code, out, errs := pesto("-d", sock)
	if code != 0 || out != transcript {
		t.Fatalf("-d: got exit %d and %q", code, out)
	}
	if !strings.Contains(errs, "table 1: HOST, 3 rules, capabilities 0x3f: IPv4 IPv6 TCP UDP scan ifname") {
		t.Errorf("-d: stderr %q, want progress with the tables", errs)
	}
}

// TestBadServer: what pesto makes of a server that is not a v2 one.
func TestBadServer(t *testing.T) {
	good := pestowire.AppendTables(pestowire.AppendHello(nil), nil)
	v1 := append([]byte(nil), good...)
	v1[11] = 1
	magic := append([]byte(nil), good...)
	magic[0] = 'X'
	tests := []struct {
		name string
		send []byte
		want string
	}{
		{"nothing", nil, "Couldn't read server greeting: No data available\n"},
		{"bad magic", magic, "Bad magic number from server\n"},
		{"version 1", v1, "Unsupported server protocol version 1 (this client speaks 2)\n"},
		{"no terminator", good[:pestowire.HelloSize], "Error reading from control socket\n"},
	}
	for _, tc := range tests {
		dir := t.TempDir()
		p := filepath.Join(dir, "s")
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write(tc.send)
			c.Close()
		}()
		code, out, errs := pesto(p)
		l.Close()
		if code != 1 || out != "" || errs != tc.want {
			t.Errorf("%s: got exit %d, %q, %q; want 1, nothing, %q", tc.name, code, out, errs, tc.want)
		}
	}
}

// FuzzParseArgs: the option parser takes anything without panicking.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"-At8080\x00SOCK", "--tcp-p=1\x00--\x00-x", "-\x00--clear", "-sdh"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		opts, pos, err := parseArgs("pesto", strings.Split(s, "\x00"))
		if err == nil && len(opts)+len(pos) > len(strings.Split(s, "\x00"))*len(s)+1 {
			t.Fatalf("more results than input: %v %v", opts, pos)
		}
	})
}

// TestAtPath: pesto takes PATH as a file system path even when it starts
// with '@', as pasta's pesto does. Go's socket address conversion would
// make it a name in the abstract namespace instead, which any local user
// can bind: pesto would then show that user's tables and send them its
// update.
func TestAtPath(t *testing.T) {
	t.Chdir(t.TempDir())
	name := fmt.Sprintf("@pesto-test-%d", os.Getpid())
	serve := func(l net.Listener, b []byte) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write(b)
			c.Close()
		}
	}
	file, err := net.Listen("unix", "./"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	go serve(file, pestowire.AppendTables(pestowire.AppendHello(nil), []pestowire.PifTable{{Name: "HOST", Table: fwdrule.Table{Pif: fwdrule.PifHost}}}))
	abstract, err := net.Listen("unix", name) // Go: the abstract namespace
	if err != nil {
		t.Fatal(err)
	}
	defer abstract.Close()
	go serve(abstract, []byte("impostor!impostor!impostor!"))

	code, out, errs := pesto(name)
	want := "passt/pasta configuration (" + name + ")\n  HOST\n"
	if code != 0 || out != want || errs != "" {
		t.Errorf("pesto %s: got exit %d, stdout %q, stderr %q; want 0, %q, nothing", name, code, out, errs, want)
	}
	long := "@" + strings.Repeat("x", 106)
	if code, _, errs := pesto(long); code != 1 || errs != "Invalid socket path \""+long+"\"\n" {
		t.Errorf("pesto with a 107-byte path starting with @: got exit %d, stderr %q; want 1, an invalid path", code, errs)
	}
}

// TestManyClients: the server takes one client at a time and queues a few
// more; pesto, like pasta's, waits in connect(2) for its turn when the
// queue is full rather than failing with EAGAIN, so every one of a burst
// of clients gets the listing.
func TestManyClients(t *testing.T) {
	_, sock := server(t)
	const n = 40
	type result struct {
		code      int
		out, errs string
	}
	res := make(chan result, n)
	for range n {
		go func() {
			code, out, errs := pesto(sock)
			res <- result{code, out, errs}
		}()
	}
	failed := 0
	for range n {
		r := <-res
		if r.code != 0 || r.out != transcript {
			if failed == 0 {
				t.Errorf("got exit %d, stderr %q; want 0 and the listing", r.code, r.errs)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("got %d of %d clients failing, want none", failed, n)
	}
}

// FuzzSession: whole pesto runs against a server that sends arbitrary
// bytes, with arbitrary options: pesto never panics or hangs, and exits 0
// or 1.
func FuzzSession(f *testing.F) {
	var ts []pestowire.PifTable
	for _, tb := range referenceTables(f) {
		ts = append(ts, pestowire.PifTable{Name: tb.Pif.String(), Table: tb})
	}
	ref := pestowire.AppendTables(pestowire.AppendHello(nil), ts)
	f.Add(ref, "")
	f.Add(ref, "-s -A -t 9090")
	f.Add(ref, "-D -u auto -C SPLICE -T 80")
	f.Add(ref[:100], "-t 1")
	f.Add([]byte{}, "-d")
	f.Fuzz(func(t *testing.T, srv []byte, args string) {
		words := strings.Fields(args)
		if len(words) > 16 {
			return
		}
		dir, err := os.MkdirTemp("", "pf")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, "s")
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Write(srv)
			c.CloseWrite() // what was not sent never comes
			io.Copy(io.Discard, c)
		}()
		done := make(chan int, 1)
		go func() {
			code, _, _ := pesto(append(words, "--", p)...)
			done <- code
		}()
		select {
		case code := <-done:
			if code != 0 && code != 1 {
				t.Fatalf("pesto %q: got exit %d, want 0 or 1", words, code)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("pesto %q: no exit within 10s", words)
		}
	})
}
