package ctlsock

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/fwdrule/fwdruletest"
	"github.com/gopasta/gopasta/internal/logging"
	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/pestowire"
)

// fakeTables are the tables a test's control socket starts with: one TCP
// port forwarded from the host.
func fakeTables() []fwdrule.Table {
	r := fwdrule.Rule{First: 8080, Last: 8080, To: 8080, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagDual}
	return []fwdrule.Table{
		{Pif: fwdrule.PifHost, Caps: 0x3f, Rules: []fwdrule.Rule{r}},
		{Pif: fwdrule.PifSplice, Caps: 0x3f},
	}
}

func newFake() *fwdruletest.Store { return fwdruletest.New(fakeTables()) }

func sockPath(t *testing.T) string {
	// t.TempDir can exceed sun_path's 107 bytes with long test names.
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "sock")
}

func start(t *testing.T, f Tables, timeout time.Duration) (*Server, string) {
	t.Helper()
	p := sockPath(t)
	s, err := Start(Options{Path: p, Tables: f, Timeout: timeout})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Close)
	return s, p
}

func dial(t *testing.T, p string) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// readState reads the greeting and the tables.
func readState(t *testing.T, c io.Reader) []pestowire.PifTable {
	t.Helper()
	if err := pestowire.ReadHello(c); err != nil {
		t.Fatalf("hello: %v", err)
	}
	ts, err := pestowire.ReadTables(c)
	if err != nil {
		t.Fatalf("tables: %v", err)
	}
	return ts
}

func show(t *testing.T, p string) []pestowire.PifTable {
	t.Helper()
	c := dial(t, p)
	defer c.Close()
	return readState(t, c)
}

func TestShow(t *testing.T) {
	f := newFake()
	_, p := start(t, f, 0)
	c := dial(t, p)
	ts := fakeTables()
	want := pestowire.AppendTables(pestowire.AppendHello(nil), []pestowire.PifTable{
		{Name: "HOST", Table: ts[0]}, {Name: "SPLICE", Table: ts[1]}})
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading %d bytes: %v", len(want), err)
	}
	if !bytes.Equal(buf, want) {
		t.Errorf("got % x, want % x", buf, want)
	}
	c.Close()
	if n := f.Replaced(); n != 0 {
		t.Errorf("a show replaced the tables %d times, want 0", n)
	}
}

func update(ts ...fwdrule.Table) []byte { return pestowire.AppendUpdate(nil, ts) }

func TestUpdate(t *testing.T) {
	f := newFake()
	_, p := start(t, f, 0)
	c := dial(t, p)
	readState(t, c)
	r := fwdrule.Rule{First: 7070, Last: 7070, To: 7070, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagDual}
	// Only HOST is sent: SPLICE becomes empty.
	if _, err := c.Write(update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: []fwdrule.Rule{r}})); err != nil {
		t.Fatal(err)
	}
	// The server closes without a word once applied: a clean EOF.
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Errorf("after the update: got %q, %v; want a clean end of file", b, err)
	}
	ts := show(t, p)
	if len(ts) != 2 || len(ts[0].Rules) != 1 || ts[0].Rules[0] != r || len(ts[1].Rules) != 0 {
		t.Errorf("next client reads %+v, want HOST [%s] and an empty SPLICE", ts, r)
	}
	if n := f.Replaced(); n != 1 {
		t.Errorf("replaced %d times, want 1", n)
	}
}

// TestHostileClients: nothing a client sends changes the tables unless it
// is a whole valid update, and the server keeps serving.
func TestHostileClients(t *testing.T) {
	valid := fwdrule.Rule{First: 7070, Last: 7070, To: 7070, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagDual}
	port0 := valid
	port0.First = 0
	big := make([]fwdrule.Rule, 0, 300)
	for i := range 300 {
		big = append(big, fwdrule.Rule{First: uint16(i + 1), Last: uint16(i + 1), To: 1, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagDual})
	}
	oversized := update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: big})
	tests := []struct {
		name  string
		send  []byte
		reset bool // the client must see a reset (bytes left unread)
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), true},
		{"truncated", update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: []fwdrule.Rule{valid}})[:30], false},
		{"no terminator", update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: []fwdrule.Rule{valid}})[:61], false},
		{"oversized count", oversized, true},
		{"port 0", update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: []fwdrule.Rule{port0}}), true},
		{"TAP table", update(fwdrule.Table{Pif: fwdrule.PifTap}), true},
		{"zeros", make([]byte, 100000), true}, // one terminator, then junk
		{"empty blocks forever", bytes.Repeat([]byte{1, 0, 0, 0, 0}, 20000), true},
	}
	f := newFake()
	_, p := start(t, f, 0)
	before := show(t, p)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, p)
			readState(t, c)
			go func() { c.Write(tc.send); c.CloseWrite() }()
			_, err := io.ReadAll(c)
			if tc.reset && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("got %v, want a reset", err)
			}
			if !tc.reset && err != nil {
				t.Errorf("got %v, want a clean end of file", err)
			}
			c.Close()
			after := show(t, p)
			if tc.name == "zeros" {
				// A lone terminator is a valid update: both tables empty.
				if len(after[0].Rules)+len(after[1].Rules) != 0 {
					t.Errorf("got %d rules after an empty update, want 0", len(after[0].Rules)+len(after[1].Rules))
				}
				f.Replace(fakeTables())
				return
			}
			if len(after) != len(before) || len(after[0].Rules) != len(before[0].Rules) || after[0].Rules[0] != before[0].Rules[0] {
				t.Errorf("tables changed: got %+v, want %+v", after, before)
			}
		})
	}
}

// TestStalledClient: a client that stops in the middle of an update is
// dropped at the deadline, nothing changes, and the client queued behind
// it is served then.
func TestStalledClient(t *testing.T) {
	f := newFake()
	_, p := start(t, f, 300*time.Millisecond)
	c := dial(t, p)
	readState(t, c)
	valid := fwdrule.Rule{First: 7070, Last: 7070, To: 7070, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagDual}
	c.Write(update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: []fwdrule.Rule{valid}})[:20])
	t0 := time.Now()
	c2 := dial(t, p) // queued in the backlog
	ts := readState(t, c2)
	waited := time.Since(t0)
	if waited < 200*time.Millisecond || waited > 3*time.Second {
		t.Errorf("second client served after %v, want about the 300ms deadline of the first", waited)
	}
	if ts[0].Rules[0].First != 8080 {
		t.Errorf("tables changed by a stalled update: %+v", ts)
	}
	if _, err := io.ReadAll(c); err == nil {
		// Dropped with the half update unread: a reset, or at least EOF.
		t.Logf("stalled client saw a clean end of file")
	}
	if f.Replaced() != 0 {
		t.Errorf("replaced %d times, want 0", f.Replaced())
	}
}

// TestClientGoneBeforeServed: a queued client that left before its turn
// costs a failed write, nothing more.
func TestClientGoneBeforeServed(t *testing.T) {
	f := newFake()
	_, p := start(t, f, 200*time.Millisecond)
	c := dial(t, p)
	readState(t, c)
	for range 3 {
		g := dial(t, p)
		g.Close()
	}
	c.Close()
	if ts := show(t, p); len(ts) != 2 {
		t.Errorf("got %d tables, want 2", len(ts))
	}
}

func TestSocketFile(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	f := newFake()
	s, p := start(t, f, 0)
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("socket file: got mode %v, want a socket with 0600 (umask 0)", st.Mode())
	}
	s.Close()
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close: got %v, want the socket file gone", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	p := sockPath(t)
	// A socket file no one listens on, as a killed run leaves behind.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: p}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if err := CheckPath(p); err != nil {
		t.Fatalf("CheckPath on a stale socket: got %v, want nil", err)
	}
	s, err := Start(Options{Path: p, Tables: newFake()})
	if err != nil {
		t.Fatalf("Start over a stale socket: %v", err)
	}
	defer s.Close()
	if ts := show(t, p); len(ts) != 2 {
		t.Errorf("got %d tables, want 2", len(ts))
	}
}

func TestPathErrors(t *testing.T) {
	live := sockPath(t)
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	file := sockPath(t)
	if err := os.WriteFile(file, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		is         error
		want       string
	}{
		{"empty", "", ErrInvalidPath, "invalid configuration path"},
		{"too long", "/tmp/" + strings.Repeat("x", 103), ErrInvalidPath, "invalid configuration path"},
		{"missing directory", "/nonexistent-dir-for-test/sock", syscall.ENOENT, "cannot use directory /nonexistent-dir-for-test"},
		{"live socket", live, ErrInUse, "already in use"},
		{"regular file", file, ErrNotSocket, "exists and is not a socket"},
	}
	for _, tc := range tests {
		err := CheckPath(tc.path)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckPath got %v, want %v (%q)", tc.name, err, tc.is, tc.want)
		}
		if _, err := Start(Options{Path: tc.path, Tables: newFake()}); !errors.Is(err, tc.is) {
			t.Errorf("%s: Start got %v, want %v", tc.name, err, tc.is)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "precious" {
		t.Errorf("a regular file at the path was changed: %q", b)
	}
	// 107 bytes is the limit and fits.
	dir, _ := os.MkdirTemp("", "")
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, strings.Repeat("y", MaxPathLen-len(dir)-1))
	if len(p) != MaxPathLen {
		t.Fatalf("test path is %d bytes", len(p))
	}
	s, err := Start(Options{Path: p, Tables: newFake()})
	if err != nil {
		t.Fatalf("%d-byte path: %v", len(p), err)
	}
	s.Close()
}

// TestNotOurs: a socket file someone else put at the path after ours is
// not removed at Close.
func TestNotOurs(t *testing.T) {
	s, p := start(t, newFake(), 0)
	os.Remove(p)
	ln, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s.Close()
	if _, err := os.Lstat(p); err != nil {
		t.Errorf("someone else's socket: got %v after Close, want it kept", err)
	}
}

// FuzzServe: whole sessions with arbitrary client bytes, over a real
// socket pair. The server never panics, replaces the tables only with
// valid ones, logs one line per record without control characters, and
// serves the next client.
func FuzzServe(f *testing.F) {
	r := fwdrule.Rule{First: 7070, Last: 7070, To: 7070, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagDual}
	f.Add(update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: []fwdrule.Rule{r}}))
	f.Add([]byte{0})
	f.Add([]byte{3, 0, 0, 0, 1})
	f.Add([]byte{})
	r.SetIfname("a\nb\x1b")
	f.Add(update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: []fwdrule.Rule{r}}))
	f.Add(update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: []fwdrule.Rule{r, r}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ft := newFake()
		var logBuf nstest.SyncBuffer
		log, _, err := logging.New(logging.Options{Stderr: &logBuf})
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{o: Options{Tables: ft, Timeout: time.Second}, log: log, lim: newLimiter()}
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		srv := fileConn(t, fds[0])
		cli := fileConn(t, fds[1])
		defer cli.Close()
		done := make(chan struct{})
		go func() { s.serve(srv); srv.Close(); close(done) }()
		cli.SetDeadline(time.Now().Add(5 * time.Second))
		readState(t, cli)
		cli.Write(b)
		cli.CloseWrite()
		<-done
		for _, l := range strings.Split(strings.TrimSuffix(logBuf.String(), "\n"), "\n") {
			if !strings.HasPrefix(l, "gopasta: ") || strings.IndexFunc(l, unicode.IsControl) >= 0 || !utf8.ValidString(l) {
				t.Fatalf("got log line %q, want one record a line, without control characters", l)
			}
		}
		for _, tb := range ft.Tables() {
			if err := tb.Validate(); err != nil {
				t.Fatalf("tables invalid after a session: %v", err)
			}
		}
	})
}

func newLimiter() *logging.Limiter { return logging.NewLimiter(20, time.Minute) }

func fileConn(t *testing.T, fd int) *net.UnixConn {
	f := os.NewFile(uintptr(fd), "sp")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn)
}

// TestLogInjection: an interface name is 15 arbitrary bytes the client
// chooses, and rules are logged both when an update is applied and when
// one is refused. Control characters in it must not reach the log as
// they are: a newline would forge a log record of the client's choosing,
// an escape sequence would drive the terminal that shows the log.
func TestLogInjection(t *testing.T) {
	evil := fwdrule.Rule{First: 7070, Last: 7070, To: 7070, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagDual}
	evil.SetIfname("a\nFORGED\x1b[")
	plain := fwdrule.Rule{First: 7070, Last: 7070, To: 7070, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagDual}
	tests := []struct {
		name  string
		rules []fwdrule.Rule
		want  string // in the log
	}{
		{"applied", []fwdrule.Rule{evil}, "New forwarding rules"},
		{"refused as a conflict", []fwdrule.Rule{plain, evil}, "configuration update rejected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf nstest.SyncBuffer
			log, _, err := logging.New(logging.Options{Stderr: &buf})
			if err != nil {
				t.Fatal(err)
			}
			p := sockPath(t)
			s, err := Start(Options{Path: p, Tables: newFake(), Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c := dial(t, p)
			readState(t, c)
			c.Write(update(fwdrule.Table{Pif: fwdrule.PifHost, Rules: tc.rules}))
			c.CloseWrite()
			io.ReadAll(c)
			s.Close() // the session's log is complete
			out := buf.String()
			if !strings.Contains(out, tc.want) {
				t.Fatalf("got log %q, want it to contain %q", out, tc.want)
			}
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				if !strings.HasPrefix(l, "gopasta: ") {
					t.Errorf("got log line %q, want every line to start a record of its own (\"gopasta: \")", l)
				}
				if i := strings.IndexFunc(l, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
					t.Errorf("got log line %q with control character %#x, want it escaped", l, l[i])
				}
			}
		})
	}
}

func TestPrintable(t *testing.T) {
	tests := []struct{ in, want string }{
		{"TCP [*]%lo:80  =>  80 ", "TCP [*]%lo:80  =>  80 "},
		{"%eth0\n", `%eth0\n`},
		{"\x1b[2J", `\x1b[2J`},
		{"a\rb\x7f", `a\rb\x7f`},
		{"\u009b31m", `\u009b31m`}, // C1 control sequence introducer
		{"bad\xffutf8", `bad\xffutf8`},
		{"é ü", "é ü"},
	}
	for _, tc := range tests {
		if got := printable(tc.in); got != tc.want {
			t.Errorf("printable(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestAtPath: a path is a file system path, used verbatim, even when it
// starts with '@' (a file named "@ctl" in the working directory). Go's
// socket address conversion turns a leading '@' into Linux's abstract
// namespace, where a socket has no file, so no file mode protects it:
// any user could connect and rewrite the forwarding rules.
func TestAtPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	name := fmt.Sprintf("@gopasta-ctl-test-%d", os.Getpid())
	s, err := Start(Options{Path: name, Tables: newFake()})
	if err != nil {
		t.Fatalf("Start(%q): %v", name, err)
	}
	defer s.Close()
	st, err := os.Lstat(filepath.Join(dir, name))
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("Start(%q): got file %v, %v; want a socket file with mode 0600 in the working directory", name, st, err)
	}
	// Go's net package also reads a leading '@' as abstract.
	if c, err := net.Dial("unix", name); err == nil {
		c.Close()
		t.Errorf("Start(%q): got a socket in the abstract namespace, want none", name)
	}
	if ts := show(t, "./"+name); len(ts) != 2 {
		t.Errorf("through ./%s: got %d tables, want 2", name, len(ts))
	}
	// "./" takes two more bytes of sun_path: the limit is two less.
	long := "@" + strings.Repeat("x", MaxPathLen-1)
	if err := CheckPath(long); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("CheckPath(%d bytes starting with @): got %v, want ErrInvalidPath", len(long), err)
	}
}
