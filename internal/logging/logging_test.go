package logging

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want slog.Level
	}{
		{Options{}, slog.LevelInfo},
		{Options{Quiet: true}, slog.LevelWarn},
		{Options{Debug: true}, slog.LevelDebug},
		{Options{Trace: true, Quiet: true}, LevelTrace},
	} {
		if got := tc.o.Level(); got != tc.want {
			t.Errorf("%+v: got level %v, want %v", tc.o, got, tc.want)
		}
	}
}

func TestLineFormat(t *testing.T) {
	var buf bytes.Buffer
	l, c, err := New(Options{Stderr: &buf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l.Info("namespace interface", "name", "eth0", "note", "a b")
	l.Debug("hidden")
	l.Warn("careful")
	got := buf.String()
	want := "gopasta: namespace interface name=eth0 note=\"a b\"\ngopasta: warning: careful\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestFileKeepsNewestLines checks --log-size: the file stays under its
// cap, and when full the oldest lines make room: what is left is the
// rotation note and then a run of whole lines ending with the newest, which
// fill at least half of the cap.
func TestFileKeepsNewestLines(t *testing.T) {
	for _, max := range []int64{300, 4096, 40960} {
		p := filepath.Join(t.TempDir(), "log")
		l, out, err := New(Options{File: p, MaxSize: max})
		if err != nil {
			t.Fatal(err)
		}
		const n = 2000
		for i := range n {
			l.Info("a line of some length to fill the file", "i", i)
			if i%97 == 0 || i == n-1 {
				checkRotated(t, p, max, i)
			}
		}
		out.Close()
	}
}

// checkRotated checks the log file p (cap max) after line last was logged.
func checkRotated(t *testing.T, p string, max int64, last int) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) > max {
		t.Fatalf("cap %d, after line %d: got size %d, want at most the cap", max, last, len(b))
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("cap %d, after line %d: got %q, want whole lines", max, last, b)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	rotated := strings.Contains(lines[0], "older lines dropped")
	if rotated {
		lines = lines[1:]
		if int64(len(b)) < max/2 {
			t.Errorf("cap %d, after line %d: got size %d after making room, want at least half the cap", max, last, len(b))
		}
	}
	want := last - len(lines) + 1
	if !rotated && want != 0 {
		t.Fatalf("cap %d, after line %d: got %d lines without a rotation note, want %d", max, last, len(lines), last+1)
	}
	for _, line := range lines {
		if !strings.HasSuffix(line, fmt.Sprintf(" i=%d", want)) {
			t.Fatalf("cap %d, after line %d: got line %q, want line i=%d (the newest lines, in order)", max, last, line, want)
		}
		want++
	}
}

// TestFileLongLine checks that a line longer than the whole cap is cut to
// fit rather than growing the file.
func TestFileLongLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	f, err := OpenFile(p, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write([]byte(strings.Repeat("a", 100) + "\n"))
	if n, err := f.Write([]byte(strings.Repeat("b", 3000) + "\n")); err != nil || n != 3001 {
		t.Errorf("long line: got %d, %v, want 3001, nil", n, err)
	}
	f.Write([]byte("c\n"))
	b, _ := os.ReadFile(p)
	if len(b) > 1000 || !strings.HasSuffix(string(b), "c\n") {
		t.Errorf("got %d bytes ending %q, want at most 1000 ending with the last line", len(b), b[max(0, len(b)-20):])
	}
}

func TestOpenFileError(t *testing.T) {
	if _, _, err := New(Options{File: "/nonexistent/dir/log"}); err == nil {
		t.Error("got nil error for a log file in a missing directory, want one")
	}
}

func TestLimiter(t *testing.T) {
	l := NewLimiter(3, time.Second)
	now := time.Unix(1000, 0)
	allowed := 0
	for i := 0; i < 10; i++ {
		if ok, _ := l.Allow(now); ok {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("got %d allowed in one window, want 3", allowed)
	}
	ok, suppressed := l.Allow(now.Add(2 * time.Second))
	if !ok || suppressed != 7 {
		t.Errorf("next window: got ok=%v suppressed=%d, want true, 7", ok, suppressed)
	}
}
