package fwd

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readPcap parses a pcap stream back: the global header and every record.
func readPcap(t *testing.T, b []byte) [][]byte {
	t.Helper()
	if len(b) < 24 {
		t.Fatalf("pcap of %d bytes, no global header", len(b))
	}
	if m := binary.LittleEndian.Uint32(b); m != pcapMagicMicros {
		t.Fatalf("magic %#x, want %#x", m, pcapMagicMicros)
	}
	if lt := binary.LittleEndian.Uint32(b[20:]); lt != 1 {
		t.Fatalf("link type %d, want 1 (Ethernet)", lt)
	}
	var out [][]byte
	for r := b[24:]; len(r) > 0; {
		if len(r) < 16 {
			t.Fatalf("truncated record header")
		}
		incl, orig := binary.LittleEndian.Uint32(r[8:]), binary.LittleEndian.Uint32(r[12:])
		if incl != orig || int(incl) > len(r)-16 {
			t.Fatalf("record lengths %d/%d with %d bytes left", incl, orig, len(r)-16)
		}
		out = append(out, r[16:16+incl])
		r = r[16+incl:]
	}
	return out
}

func TestPcapWriter(t *testing.T) {
	var buf bytes.Buffer
	w, err := newPcapWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	frames := [][]byte{udpFrame(ns4, ext, 1, 2, []byte("a")), echoFrame(ns4, ext, 7, 1, []byte("b"))}
	ts := time.Unix(1700000000, 123456000)
	for _, f := range frames {
		w.frame(ts, f)
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	got := readPcap(t, buf.Bytes())
	if len(got) != len(frames) {
		t.Fatalf("%d records, want %d", len(got), len(frames))
	}
	for i := range got {
		if !bytes.Equal(got[i], frames[i]) {
			t.Errorf("record %d differs", i)
		}
	}
	if us := binary.LittleEndian.Uint32(buf.Bytes()[24+4:]); us != 123456 {
		t.Errorf("microseconds %d, want 123456", us)
	}
}

// TestPcapEngine captures both directions through the engine, and reads the
// file with tshark when it is installed.
func TestPcapEngine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cap.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := newHostNS(t)
	port, _ := h.udpEcho("127.0.0.1:0")
	e, l := newTestEngine(t, Options{Pcap: f})
	ctx, cancel := testContext(t)
	done := make(chan error, 1)
	go h.do(func() { done <- e.Run(ctx) })
	l.inject(udpFrame(ns4, gw4, 4000, port, []byte("captured")))
	l.next(t, 5*time.Second, nil)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := readPcap(t, b); len(got) != 2 {
		t.Fatalf("%d frames captured, want 2 (request and reply)", len(got))
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Log("tshark not installed: skipping the tshark read")
		return
	}
	cmd := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "udp.srcport", "-e", "udp.dstport")
	// Its own HOME: tshark fails on a profile directory it cannot read
	// (HOME=/root when the tests run as another user).
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "4000") {
		t.Errorf("tshark output lacks port 4000:\n%s", out)
	}
}
