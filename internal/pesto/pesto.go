// Package pesto is the client of the control socket (-c PATH) of gopasta
// and of pasta: the same binary run under the name "pesto". It lists the
// forwarding rules in force and replaces them, speaking protocol version 2
// (internal/pestowire) and printing what pasta's own pesto prints, byte
// for byte, so that scripts and podman read either the same way.
//
// # Theory of operation
//
// A run is one session: connect, read the greeting and every table; then
// either list them (no edit options), or apply the edit options left to
// right to the tables just read and send them all back as one update.
// Edits start in replace mode: the first -t or -u empties HOST (TCP and
// UDP rules alike) and the first -T or -U empties SPLICE, once each; -C
// empties a table by name at once; -A and -D switch the following values
// to adding and to deleting. Values are read by the one port grammar
// (fwdrule.Parse) and applied as pasta applies them (fwdrule.Apply with
// fwdrule.Pasta), checked as the server checks them, so that a bad
// value fails here, before anything is sent. The server does not answer an
// update: exit status 0 says it was sent, not that it was accepted
// (connect again to read the result).
package pesto

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/cmdline"
	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/pestowire"
)

const usageText = `Usage: %s [OPTION]... PATH

Show or change the port forwarding rules of a running gopasta or pasta
through its control socket PATH (gopasta -c PATH; protocol version 2).
Without -A, -D, -C, -t, -u, -T or -U it lists the rules in force.

  -t, --tcp-ports SPEC  set host TCP ports forwarded into the namespace
  -u, --udp-ports SPEC  set host UDP ports forwarded into the namespace
  -T, --tcp-ns SPEC     set namespace loopback TCP ports forwarded to the host
  -U, --udp-ns SPEC     set namespace loopback UDP ports forwarded to the host
      Each may be given several times. The first -t or -u replaces every
      rule of the HOST table, the first -T or -U every rule of SPLICE,
      unless -A or -D came first.
  -A, --add             add the rules of the following SPECs
  -D, --delete          delete the rules of the following SPECs (each must
                        match a rule exactly)
  -C, --clear PIF       empty table PIF (HOST or SPLICE)
  -s, --show            with changes: list the rules before and after
  -d, --debug           report progress on standard error
  -h, --help            show this help and exit
      --version         show the version and exit

SPEC is none, or [ADDR[%%IF]/]PORTS as for gopasta -t: PORTS is a
comma-separated list of N[-M][:T[-U]] (forward N to T), N[-M]:ADDR[/T[-U]]
(to another target address), ~N[-M] (leave out), all (every non-ephemeral
port) and auto (only while listening on the other side; alone, every
non-ephemeral port). ADDR * is any address, as no ADDR. -T and -U take no
ADDR or IF: they listen on the namespace's loopback.
Examples:
  %[1]s SOCK                       list the rules
  %[1]s -A -t 8080:80 SOCK         also forward host port 8080 to 80
  %[1]s -D -t 8080:80 SOCK         stop that again
  %[1]s -t 127.0.0.1/8443:443 SOCK HOST: only this rule
  %[1]s -C SPLICE SOCK             nothing from the namespace to the host

Exit status: 0 once the rules are listed or the change is sent (the server
does not confirm a change: list again to see it), 1 on any error.
`

// Main runs pesto: args is os.Args (program name first). It returns the
// exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	prog := "pesto"
	if len(args) > 0 {
		prog = args[0]
		args = args[1:]
	}
	c := &client{out: stdout, errw: stderr, prog: prog}
	if err := c.run(args); err != nil {
		var ex *exit
		if errors.As(err, &ex) {
			return ex.code
		}
		for _, l := range errLines(err) {
			fmt.Fprintln(stderr, l)
		}
		return 1
	}
	return 0
}

// message is a diagnostic in pasta's pesto's words (capitalised, as
// they are).
type message string

func (m message) Error() string { return string(m) }

func msgf(format string, a ...any) error { return message(fmt.Sprintf(format, a...)) }

// exit ends the run with a status, its output already written.
type exit struct{ code int }

func (e *exit) Error() string { return fmt.Sprintf("exit %d", e.code) }

// errLines is how pesto reports err: pasta's messages, one per line; a
// rule that could not be applied says why, then which rule.
func errLines(err error) []string {
	var ae *fwdrule.ApplyError
	var se *fwdrule.SpecError
	switch {
	case errors.As(err, &ae):
		return []string{ae.Err.Error(), fmt.Sprintf("Unable to %s rule %s", ae.Op, ae.Rule)}
	case errors.As(err, &se):
		return []string{se.PastaMessage()}
	}
	return []string{err.Error()}
}

type client struct {
	out, errw io.Writer
	prog      string
	debug     bool
}

func (c *client) debugf(format string, a ...any) {
	if c.debug {
		fmt.Fprintf(c.errw, format+"\n", a...)
	}
}

func (c *client) usage(w io.Writer, code int) error {
	fmt.Fprintf(w, usageText, c.prog)
	return &exit{code}
}

func (c *client) run(args []string) error {
	opts, pos, err := parseArgs(c.prog, args)
	if err != nil {
		fmt.Fprintln(c.errw, err)
		return c.usage(c.errw, 1)
	}
	update, show := false, false
	for _, o := range opts {
		switch o.name {
		case 'h':
			return c.usage(c.out, 0)
		case versionOpt:
			fmt.Fprintf(c.out, "pesto %s\nthe pesto client of gopasta, control protocol version %d\n", cmdline.Version, pestowire.Version)
			return &exit{0}
		case 'd':
			c.debug = true
		case 's':
			show = true
		default:
			update = true
		}
	}
	if len(pos) != 1 {
		return c.usage(c.errw, 1)
	}
	path := pos[0]
	c.debugf("debug on, control socket %q", path)
	name := pestowire.SocketName(path)
	if path == "" || len(name) > pestowire.MaxPathLen {
		return msgf("Invalid socket path \"%s\"", path)
	}
	conn, err := dial(name)
	if err != nil {
		return msgf("Failed to connect to %s: %s", path, strerror(err))
	}
	defer conn.Close()
	c.debugf("connected to the control socket")
	if err := pestowire.ReadHello(conn); err != nil {
		return ioErr(err)
	}
	tables, err := pestowire.ReadTables(conn)
	if err != nil {
		return ioErr(err)
	}
	for _, t := range tables {
		c.debugf("table %d: %s, %d rules, capabilities %#x:%s", t.Pif, t.Name, len(t.Rules), uint32(t.Caps), capNames(t.Caps))
	}
	if !update {
		fmt.Fprintf(c.out, "passt/pasta configuration (%s)\n", path)
		c.list(tables)
		return c.hangup(conn)
	}
	if show {
		fmt.Fprintf(c.out, "Previous configuration (%s)\n", path)
		c.list(tables)
	}
	if err := c.edit(tables, opts); err != nil {
		return err
	}
	if show {
		fmt.Fprintf(c.out, "Updated configuration (%s)\n", path)
		c.list(tables)
	}
	ts := make([]fwdrule.Table, len(tables))
	for i := range tables {
		ts[i] = tables[i].Table
	}
	if _, err := conn.Write(pestowire.AppendUpdate(nil, ts)); err != nil {
		return msgf("Error writing to control socket: %s", strerror(err))
	}
	c.debugf("update sent")
	return c.hangup(conn)
}

// dial connects to the socket file name as pasta's pesto does, with a
// blocking connect(2): while the server's queue of waiting clients is
// full it waits for room, where Go's dialer would fail at once with
// EAGAIN.
func dial(name string) (*net.UnixConn, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: name})
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// hangup ends the session as pesto does: shutdown, then close.
func (c *client) hangup(conn *net.UnixConn) error {
	rc, err := conn.SyscallConn()
	if err == nil {
		rc.Control(func(fd uintptr) {
			if e := unix.Shutdown(int(fd), unix.SHUT_RDWR); e != nil && !errors.Is(e, unix.ENOTCONN) {
				err = e
			}
		})
	}
	if err != nil {
		return msgf("Error shutting down control socket: %s", strerror(err))
	}
	return nil
}

// edit applies the edit options in order to tables.
func (c *client) edit(tables []pestowire.PifTable, opts []opt) error {
	byName := func(name string) *fwdrule.Table {
		for i := range tables {
			if tables[i].Name == name {
				return &tables[i].Table
			}
		}
		return nil
	}
	inbound, outbound := byName("HOST"), byName("SPLICE")
	eph := fwdrule.Ephemeral()
	warn := func(s string) { fmt.Fprintln(c.errw, s) }
	mode := 'R' // replace, 'A' add, 'D' delete
	inCleared, outCleared := false, false
	for _, o := range opts {
		switch o.name {
		case 'A', 'D':
			mode = rune(o.name)
		case 'C':
			t := byName(o.val)
			if t == nil {
				return msgf("Unsupported pif name %s", o.val)
			}
			t.Clear()
			switch o.val {
			case "HOST":
				inCleared = true
			case "SPLICE":
				outCleared = true
			}
		case 't', 'u', 'T', 'U':
			t, cleared, what := inbound, &inCleared, "inbound"
			if o.name == 'T' || o.name == 'U' {
				t, cleared, what = outbound, &outCleared, "outbound"
			}
			if t == nil {
				return msgf("Can't use -%c, no %s interface", o.name, what)
			}
			if mode == 'R' && !*cleared {
				t.Clear()
				*cleared = true
			}
			spec, err := fwdrule.Parse(o.name, o.val)
			if err == nil {
				err = fwdrule.Apply(t, []fwdrule.Spec{spec}, mode == 'D', fwdrule.Pasta, eph, warn)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// list prints the tables as pesto does: the name, then one rule a line.
func (c *client) list(tables []pestowire.PifTable) {
	var b strings.Builder
	for _, t := range tables {
		b.WriteString("  " + t.Name + "\n")
		for _, r := range t.Rules {
			b.WriteString("    " + r.String() + "\n")
		}
	}
	io.WriteString(c.out, b.String())
}

func capNames(c fwdrule.Caps) string {
	var b strings.Builder
	for _, n := range []struct {
		c    fwdrule.Caps
		name string
	}{{fwdrule.CapIPv4, "IPv4"}, {fwdrule.CapIPv6, "IPv6"}, {fwdrule.CapTCP, "TCP"}, {fwdrule.CapUDP, "UDP"},
		{fwdrule.CapScan, "scan"}, {fwdrule.CapIfname, "ifname"}} {
		if c&n.c != 0 {
			b.WriteString(" " + n.name)
		}
	}
	return b.String()
}

// ioErr renders a protocol or I/O failure in pesto's words: the greeting's
// with the error's text (an early end of file is "No data available"),
// the tables' without.
func ioErr(err error) error {
	var ie *pestowire.IOError
	if !errors.As(err, &ie) {
		return err
	}
	if ie.Op == "Error reading from control socket" {
		return message(ie.Op)
	}
	e := ie.Err
	if errors.Is(e, io.EOF) || errors.Is(e, io.ErrUnexpectedEOF) {
		e = unix.ENODATA
	}
	return msgf("%s: %s", ie.Op, strerror(e))
}

// strerror is the C library's text for an errno: capitalised.
func strerror(err error) string {
	var en unix.Errno
	if errors.As(err, &en) {
		s := en.Error()
		if s != "" {
			return strings.ToUpper(s[:1]) + s[1:]
		}
	}
	return err.Error()
}
