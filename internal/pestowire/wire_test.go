package pestowire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/fwdrule"
)

// captured is what a live pasta (passt master 37a73a2, started with
// "--config-net -c SOCK -t 8080") sent on connect: 687 bytes, written out
// here field by field from the byte dump, independently of the encoder.
func captured(t testing.TB) []byte {
	var b []byte
	put := func(h string) {
		x, err := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, x...)
	}
	zeros := func(n int) { b = append(b, make([]byte, n)...) }
	name := func(s string) { b = append(b, s...); zeros(PifNameSize - len(s)) }
	put("62 61 73 69 6c 3a 73 00  00 00 00 02  00 00 00 80  00 00 00 10") // hello
	put("01")
	name("HOST")
	put("00 00 00 3f  00 00 00 03")
	zeros(48)
	put("1f 90 1f 90 1f 90 06 01") // 8080, TCP, DUAL
	zeros(48)
	put("00 01 7f ff 00 01 11 07") // 1-32767, UDP, DUAL|WEAK|SCAN
	zeros(48)
	put("ee 48 ff ff ee 48 11 07") // 61000-65535
	put("03")
	name("SPLICE")
	put("00 00 00 3f  00 00 00 04")
	for _, ports := range []string{"00 01 7f ff 00 01 06 07", "ee 48 ff ff ee 48 06 07", "00 01 7f ff 00 01 11 07", "ee 48 ff ff ee 48 11 07"} {
		zeros(32)
		put("6c 6f") // ifname "lo"
		zeros(14)
		put(ports)
	}
	put("00")
	return b
}

// capturedListing is pesto's listing of those tables (without its header).
var capturedListing = []string{
	"  HOST",
	"    TCP [*]:8080  =>  8080 ",
	"    UDP [*]:1-32767  =>  1-32767  (best effort) (auto-scan)",
	"    UDP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
	"  SPLICE",
	"    TCP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)",
	"    TCP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
	"    UDP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)",
	"    UDP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
}

func TestDecodeCaptured(t *testing.T) {
	b := captured(t)
	if len(b) != 687 {
		t.Fatalf("captured exchange: got %d bytes, want 687", len(b))
	}
	r := bytes.NewReader(b)
	if err := ReadHello(r); err != nil {
		t.Fatalf("hello: %v", err)
	}
	ts, err := ReadTables(r)
	if err != nil {
		t.Fatalf("tables: %v", err)
	}
	if r.Len() != 0 {
		t.Errorf("got %d bytes left after the terminator, want 0", r.Len())
	}
	var got []string
	for _, tb := range ts {
		got = append(got, "  "+tb.Name)
		for _, rule := range tb.Rules {
			got = append(got, "    "+rule.String())
		}
		if tb.Caps != 0x3f {
			t.Errorf("%s caps: got %#x, want 0x3f", tb.Name, tb.Caps)
		}
	}
	if !slices.Equal(got, capturedListing) {
		t.Errorf("listing:\n got %q\nwant %q", got, capturedListing)
	}
	// And the encoder gives back the very bytes.
	enc := AppendTables(AppendHello(nil), ts)
	if !bytes.Equal(enc, b) {
		t.Errorf("re-encoded: got\n%s\nwant\n%s", hex.Dump(enc), hex.Dump(b))
	}
}

// captureUpdate is the 62-byte update that replaced everything with one
// HOST rule, TCP 7070 dual-stack.
const captureUpdate = "01 00000001" + " 000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000000000000000000" + " 1b9e1b9e1b9e0601 00"

func TestUpdateGolden(t *testing.T) {
	want, _ := hex.DecodeString(strings.ReplaceAll(captureUpdate, " ", ""))
	if len(want) != 62 {
		t.Fatalf("golden update: %d bytes, want 62", len(want))
	}
	rule := fwdrule.Rule{First: 7070, Last: 7070, To: 7070, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagDual}
	got := AppendUpdate(nil, []fwdrule.Table{{Pif: fwdrule.PifHost, Rules: []fwdrule.Rule{rule}}})
	if !bytes.Equal(got, want) {
		t.Errorf("encoded: got % x, want % x", got, want)
	}
	ts, err := ReadUpdate(bytes.NewReader(want), serverTables())
	if err != nil {
		t.Fatalf("decoding: %v", err)
	}
	if len(ts) != 2 || len(ts[0].Rules) != 1 || ts[0].Rules[0] != rule || len(ts[1].Rules) != 0 {
		t.Errorf("decoded: got %#v, want HOST with %s and an empty SPLICE", ts, rule)
	}
}

func serverTables() []fwdrule.Table {
	return []fwdrule.Table{{Pif: fwdrule.PifHost, Caps: 0x3f}, {Pif: fwdrule.PifSplice, Caps: 0x3f}}
}

func TestReadUpdateErrors(t *testing.T) {
	rule := func(first, last, to uint16, proto, flags byte) string {
		r := fwdrule.Rule{First: first, Last: last, To: to, Proto: proto, Flags: flags}
		return hex.EncodeToString(r.Append(nil))
	}
	tcp80 := rule(80, 80, 80, 6, 1)
	badIf := strings.Repeat("00", 47) + "41" + "00500050005006" + "01"
	tests := []struct {
		name   string
		hex    string
		want   string // error text prefix, or "" for success
		is     error
		unread int // bytes the decoder must leave unread
	}{
		{"empty: hangup", "", "", ErrHangup, 0},
		{"terminator only: empty tables", "00", "", nil, 0},
		{"truncated count", "01 0000", "", ErrTruncated, 0},
		{"truncated rule", "01 00000001 0000", "", ErrTruncated, 0},
		{"no terminator", "01 00000001" + tcp80, "", ErrTruncated, 0},
		{"TAP has no table", "02 00000000 00", "Received rules for non-existent table", nil, 5},
		{"pif 200", "c8 00000000 00", "Received rules for non-existent table", nil, 5},
		{"too many rules", "01 00000100 00", "Received 256 rules (maximum 255)", nil, 1},
		{"port 0", "01 00000001" + rule(0, 0, 80, 6, 1) + "00", "Forwarding rule attempts to map from port 0", nil, 1},
		{"ifname unterminated", "01 00000001" + badIf + "00", "Interface name was not NULL terminated", nil, 1},
		{"conflict across blocks", "01 00000001" + tcp80 + "01 00000001" + tcp80 + "00", "Forwarding configuration conflict", nil, 1},
		{"repeated pif appends", "01 00000001" + tcp80 + "01 00000001" + rule(81, 81, 81, 6, 1) + "00", "", nil, 0},
		{"trailing bytes stay unread", "01 00000001" + tcp80 + "00 ffff", "", nil, 2},
	}
	for _, tc := range tests {
		b, err := hex.DecodeString(strings.ReplaceAll(tc.hex, " ", ""))
		if err != nil {
			t.Fatalf("%s: bad test hex: %v", tc.name, err)
		}
		r := bytes.NewReader(b)
		ts, err := ReadUpdate(r, serverTables())
		switch {
		case tc.want == "" && tc.is == nil && err != nil:
			t.Errorf("%s: got %v, want success", tc.name, err)
		case tc.is != nil && !errors.Is(err, tc.is):
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.is)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
		if err == nil && len(ts) != 2 {
			t.Errorf("%s: got %d tables, want 2", tc.name, len(ts))
		}
		if r.Len() != tc.unread {
			t.Errorf("%s: %d bytes left unread, want %d", tc.name, r.Len(), tc.unread)
		}
	}
}

func TestReadUpdateTooLarge(t *testing.T) {
	// Empty blocks forever: each is valid, together they never end.
	r := io.MultiReader(strings.NewReader(strings.Repeat("\x01\x00\x00\x00\x00", MaxUpdateSize)))
	if _, err := ReadUpdate(r, serverTables()); !errors.Is(err, ErrTooLarge) {
		t.Errorf("got %v, want ErrTooLarge", err)
	}
}

func TestReadHelloErrors(t *testing.T) {
	good := AppendHello(nil)
	tests := []struct {
		name string
		mod  func(b []byte)
		want string
	}{
		{"magic", func(b []byte) { b[0] = 'B' }, "Bad magic number from server"},
		{"version 0", func(b []byte) { b[11] = 0 }, "Unsupported experimental server protocol"},
		{"version 1", func(b []byte) { b[11] = 1 }, "Unsupported server protocol version 1"},
		{"version 3", func(b []byte) { b[11] = 3 }, "Unknown server protocol version 3 > 2"},
		{"pif name size", func(b []byte) { b[15] = 64 }, "Server has unexpected pif name size (64 not 128)"},
		{"ifnamsiz", func(b []byte) { b[19] = 32 }, "Server has unexpected IFNAMSIZ (32 not 16)"},
	}
	for _, tc := range tests {
		b := slices.Clone(good)
		tc.mod(b)
		if err := ReadHello(bytes.NewReader(b)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := ReadHello(bytes.NewReader(good[:10])); err == nil || !strings.HasPrefix(err.Error(), "Couldn't read server greeting") {
		t.Errorf("short hello: got %v, want a read error", err)
	}
}

func TestReadTablesErrors(t *testing.T) {
	hdr := func(id byte, name string, count uint32) []byte {
		return AppendTables(nil, []PifTable{{Name: name, Table: fwdrule.Table{Pif: fwdrule.Pif(id), Rules: make([]fwdrule.Rule, count)}}})[:PifHeaderSize+int(count)*fwdrule.RuleSize]
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	longName := hdr(1, "HOST", 0)
	longName[PifNameSize] = 'x' // byte 127 of the name
	tooMany := hdr(1, "HOST", 0)
	tooMany[PifHeaderSize-2] = 1 // count 256
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"four tables", cat(hdr(1, "A", 0), hdr(2, "B", 0), hdr(3, "C", 0), hdr(4, "D", 0), []byte{0}), "passt has more pifs than pesto can manage (max 3)"},
		{"unterminated name", cat(longName, []byte{0}), "Interface name was not NULL terminated"},
		{"256 rules", cat(tooMany, []byte{0}), "Too many forwarding rules"},
		{"duplicate id", cat(hdr(1, "A", 0), hdr(1, "B", 0), []byte{0}), "Received duplicate interface identifier"},
		{"duplicate name", cat(hdr(1, "A", 0), hdr(3, "A", 0), []byte{0}), "Received duplicate interface name"},
		{"no terminator", hdr(1, "A", 1), "Error reading from control socket"},
	}
	for _, tc := range tests {
		if _, err := ReadTables(bytes.NewReader(tc.b)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// FuzzReadUpdate: the server's decoder on anything. It never panics, and
// what it accepts is valid, and encodes back to what it read.
func FuzzReadUpdate(f *testing.F) {
	upd, _ := hex.DecodeString(strings.ReplaceAll(captureUpdate, " ", ""))
	f.Add(upd)
	f.Add([]byte{0})
	f.Add([]byte{1, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0})
	f.Add(captured(f)[HelloSize:])
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		ts, err := ReadUpdate(r, serverTables())
		if err != nil {
			return
		}
		for i := range ts {
			if err := ts[i].Validate(); err != nil {
				t.Fatalf("accepted an invalid table: %v", err)
			}
		}
		again, err := ReadUpdate(bytes.NewReader(AppendUpdate(nil, ts)), serverTables())
		if err != nil {
			t.Fatalf("re-encoded update rejected: %v", err)
		}
		for i := range ts {
			if !slices.Equal(again[i].Rules, ts[i].Rules) {
				t.Fatalf("round trip changed table %d", i)
			}
		}
	})
}

// FuzzReadTables: the client's decoder on anything.
func FuzzReadTables(f *testing.F) {
	f.Add(captured(f)[HelloSize:])
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := ReadTables(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(ts) > MaxPifs {
			t.Fatalf("got %d tables, want at most %d", len(ts), MaxPifs)
		}
	})
}

// FuzzReadHello: a client's whole read of what a server sends, greeting
// then tables, on anything. It never panics, accepts only this version's
// greeting, and what it accepts encodes back to as many bytes as it read.
func FuzzReadHello(f *testing.F) {
	f.Add(captured(f))
	f.Add(AppendTables(AppendHello(nil), nil))
	f.Add(AppendHello(nil)[:HelloSize-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		if err := ReadHello(r); err != nil {
			var pe *Error
			var ie *IOError
			if !errors.As(err, &pe) && !errors.As(err, &ie) {
				t.Fatalf("ReadHello: got %T %v, want an *Error or an *IOError", err, err)
			}
			return
		}
		if !bytes.Equal(b[:HelloSize], AppendHello(nil)) {
			t.Fatalf("ReadHello accepted % x, want only % x", b[:HelloSize], AppendHello(nil))
		}
		ts, err := ReadTables(r)
		if err != nil {
			return
		}
		// Bytes after a name's NUL are not part of it and may differ;
		// the length may not.
		used := len(b) - r.Len()
		if again := AppendTables(AppendHello(nil), ts); len(again) != used {
			t.Fatalf("re-encoded: got %d bytes, want the %d read", len(again), used)
		}
	})
}
