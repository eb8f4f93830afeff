// Package pestowire is the wire format of pasta's run-time forwarding
// control protocol, version 2, between the control socket (-c PATH) and
// its client, pesto. It encodes and decodes; it opens no sockets.
//
// # Theory of operation
//
// The protocol has no framing beyond fixed sizes; integers are big-endian.
//
//	server -> client, on connect:
//	  hello   "basil:s\0" | u32 version=2 | u32 pif_name_size=128 | u32 ifnamsiz=16
//	  tables  per table, in pif id order:
//	            u8 pif | name[128] NUL-padded | u32 caps | u32 count | count x rule
//	          then u8 0
//	client -> server, optionally (an update):
//	          per table: u8 pif | u32 count | count x rule;  then u8 0
//	rule      56 bytes (fwdrule.Rule.Append)
//
// An update replaces every table: one it does not mention becomes empty,
// and a pif given twice appends to the same table. The server answers
// nothing and closes; a client reconnects to read the result.
//
// Decoding reads exactly the bytes each field needs from an io.Reader, so
// that a server reading from a socket leaves what it did not accept unread
// (pasta's clients see that as a reset rather than a clean end of file),
// and it checks every count before allocating for it.
package pestowire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gopasta/gopasta/internal/fwdrule"
)

// MaxPathLen is the longest control socket path: sun_path holds 108 bytes,
// the last of which is the terminating NUL.
const MaxPathLen = 107

// SocketName is the control socket's path as a socket address names it,
// for the server's bind and for its clients' connect alike. The path
// always names a file, as in pasta: Go's socket-address conversion would
// take a leading '@' for the abstract namespace, where no file mode guards
// the socket and anyone may be listening, so "./" keeps it a file. The
// result may be two bytes longer than path; check it against MaxPathLen.
func SocketName(path string) string {
	if strings.HasPrefix(path, "@") {
		return "./" + path
	}
	return path
}

// Protocol constants.
const (
	Magic         = "basil:s\x00"
	Version       = 2
	PifNameSize   = 128 // a table's name field, NUL included
	IfNamSiz      = fwdrule.IfNameSize
	HelloSize     = 8 + 4 + 4 + 4
	PifHeaderSize = 1 + PifNameSize + 4 + 4 // 137: the server's per-table header
	// MaxPifs is the number of tables a client accepts (pesto's limit).
	MaxPifs = 3
	// MaxUpdateSize bounds an update a server reads: two full tables
	// take 28,571 bytes; more can only be padding or an attack.
	MaxUpdateSize = 64 << 10
)

// PifTable is a table as the server describes it: its name and the table.
type PifTable struct {
	Name string
	fwdrule.Table
}

// AppendHello appends the server's 20-byte greeting.
func AppendHello(b []byte) []byte {
	b = append(b, Magic...)
	b = binary.BigEndian.AppendUint32(b, Version)
	b = binary.BigEndian.AppendUint32(b, PifNameSize)
	return binary.BigEndian.AppendUint32(b, IfNamSiz)
}

// Error is a message that breaks the protocol; its text is the
// diagnostic pasta or pesto gives for the case.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func protoErr(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// ReadHello reads the greeting and accepts only this version's: magic,
// version 2 (version 1 lacked the target address), and the field sizes.
func ReadHello(r io.Reader) error {
	var h [HelloSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return &IOError{Op: "Couldn't read server greeting", Err: err}
	}
	if string(h[:8]) != Magic {
		return protoErr("Bad magic number from server")
	}
	switch v := binary.BigEndian.Uint32(h[8:]); {
	case v == 0:
		return protoErr("Unsupported experimental server protocol")
	case v > Version:
		return protoErr("Unknown server protocol version %d > %d", v, Version)
	case v < Version:
		return protoErr("Unsupported server protocol version %d (this client speaks %d)", v, Version)
	}
	if n := binary.BigEndian.Uint32(h[12:]); n != PifNameSize {
		return protoErr("Server has unexpected pif name size (%d not %d)", n, PifNameSize)
	}
	if n := binary.BigEndian.Uint32(h[16:]); n != IfNamSiz {
		return protoErr("Server has unexpected IFNAMSIZ (%d not %d)", n, IfNamSiz)
	}
	return nil
}

// IOError is a failed read or write (the connection, not its content).
type IOError struct {
	Op  string
	Err error
}

func (e *IOError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *IOError) Unwrap() error { return e.Err }

// AppendTables appends the server's description of its tables, in the
// order given (the caller gives pif id order), and the terminator.
func AppendTables(b []byte, ts []PifTable) []byte {
	for i := range ts {
		t := &ts[i]
		b = append(b, byte(t.Pif))
		var name [PifNameSize]byte
		copy(name[:PifNameSize-1], t.Name)
		b = append(b, name[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(t.Caps))
		b = binary.BigEndian.AppendUint32(b, uint32(len(t.Rules)))
		for j := range t.Rules {
			b = t.Rules[j].Append(b)
		}
	}
	return append(b, byte(fwdrule.PifNone))
}

// ReadTables reads the tables that follow the greeting, as pesto does:
// at most MaxPifs tables of at most fwdrule.MaxRules rules, names
// NUL-terminated, no id or name twice. Rules are taken as sent, without
// fwdrule's checks, so that whatever the server holds can be shown.
func ReadTables(r io.Reader) ([]PifTable, error) {
	var out []PifTable
	for {
		var id [1]byte
		if _, err := io.ReadFull(r, id[:]); err != nil {
			return nil, &IOError{Op: "Error reading from control socket", Err: err}
		}
		if id[0] == byte(fwdrule.PifNone) {
			return out, nil
		}
		if len(out) >= MaxPifs {
			return nil, protoErr("passt has more pifs than pesto can manage (max %d)", MaxPifs)
		}
		var info [PifHeaderSize - 1]byte
		if _, err := io.ReadFull(r, info[:]); err != nil {
			return nil, &IOError{Op: "Error reading from control socket", Err: err}
		}
		if info[PifNameSize-1] != 0 {
			return nil, protoErr("Interface name was not NULL terminated")
		}
		name := info[:PifNameSize]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		t := PifTable{Name: string(name)}
		t.Pif = fwdrule.Pif(id[0])
		t.Caps = fwdrule.Caps(binary.BigEndian.Uint32(info[PifNameSize:]))
		count := binary.BigEndian.Uint32(info[PifNameSize+4:])
		if count > fwdrule.MaxRules {
			return nil, protoErr("Too many forwarding rules")
		}
		for i := range out {
			if out[i].Pif == t.Pif {
				return nil, protoErr("Received duplicate interface identifier")
			}
			if out[i].Name == t.Name {
				return nil, protoErr("Received duplicate interface name")
			}
		}
		buf := make([]byte, int(count)*fwdrule.RuleSize)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, &IOError{Op: "Error reading from control socket", Err: err}
		}
		t.Rules = make([]fwdrule.Rule, count)
		for i := range t.Rules {
			t.Rules[i] = fwdrule.Decode(buf[i*fwdrule.RuleSize:])
		}
		out = append(out, t)
	}
}

// AppendUpdate appends a client's update: every table given, in order,
// then the terminator.
func AppendUpdate(b []byte, ts []fwdrule.Table) []byte {
	for i := range ts {
		t := &ts[i]
		b = append(b, byte(t.Pif))
		b = binary.BigEndian.AppendUint32(b, uint32(len(t.Rules)))
		for j := range t.Rules {
			b = t.Rules[j].Append(b)
		}
	}
	return append(b, byte(fwdrule.PifNone))
}

// Errors of ReadUpdate besides *Error, *fwdrule.RuleError and I/O errors.
var (
	// ErrHangup: the client closed without sending anything (it only
	// looked at the tables).
	ErrHangup = errors.New("configuration client hangup")
	// ErrTruncated: the client closed in the middle of an update.
	ErrTruncated = errors.New("configuration client closed in the middle of an update")
	// ErrTooLarge: more than MaxUpdateSize bytes without a terminator.
	ErrTooLarge = fmt.Errorf("update larger than %d bytes", MaxUpdateSize)
)

// ReadUpdate reads one update. tables gives the server's tables (pif and
// capabilities; their rules are ignored); the result has the same tables
// in the same order, each holding the rules the update gave it (none if it
// was not mentioned). Every rule goes through fwdrule.Table.Add into its
// pending table, so the result is valid as a whole or an error says why
// not. The first error stops reading: what follows stays unread.
func ReadUpdate(r io.Reader, tables []fwdrule.Table) ([]fwdrule.Table, error) {
	d := &decoder{r: r}
	out := make([]fwdrule.Table, len(tables))
	for i, t := range tables {
		out[i] = fwdrule.Table{Pif: t.Pif, Caps: t.Caps}
	}
	var rule [fwdrule.RuleSize]byte
	for {
		var id [1]byte
		if err := d.read(id[:]); err != nil {
			return nil, err
		}
		if id[0] == byte(fwdrule.PifNone) {
			return out, nil
		}
		var t *fwdrule.Table
		for i := range out {
			if byte(out[i].Pif) == id[0] && id[0] < fwdrule.NumPifs {
				t = &out[i]
			}
		}
		if t == nil {
			return nil, protoErr("Received rules for non-existent table")
		}
		var cnt [4]byte
		if err := d.read(cnt[:]); err != nil {
			return nil, err
		}
		count := binary.BigEndian.Uint32(cnt[:])
		if count > fwdrule.MaxRules {
			return nil, protoErr("Received %d rules (maximum %d)", count, fwdrule.MaxRules)
		}
		for range count {
			if err := d.read(rule[:]); err != nil {
				return nil, err
			}
			if rule[32+fwdrule.IfNameSize-1] != 0 {
				return nil, protoErr("Interface name was not NULL terminated")
			}
			if err := t.Add(fwdrule.Decode(rule[:])); err != nil {
				return nil, err
			}
		}
	}
}

// decoder reads exact amounts and tells a hangup, a truncated message
// and an oversized one apart.
type decoder struct {
	r io.Reader
	n int // bytes read so far
}

func (d *decoder) read(b []byte) error {
	if d.n+len(b) > MaxUpdateSize {
		return ErrTooLarge
	}
	n, err := io.ReadFull(d.r, b)
	d.n += n
	switch {
	case err == nil:
		return nil
	case (err == io.EOF || err == io.ErrUnexpectedEOF) && d.n == 0:
		return ErrHangup
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return ErrTruncated
	}
	return &IOError{Op: "reading the update", Err: err}
}
