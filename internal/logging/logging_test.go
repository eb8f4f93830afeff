package logging

import (
	"bytes"
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

func TestCappedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	l, c, err := New(Options{File: p, MaxSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		l.Info("a line that is long enough to fill the file quickly", "i", i)
	}
	c.Close()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 300 {
		t.Errorf("got log size %d, want at most 300", fi.Size())
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), "truncated") {
		t.Errorf("got %q, want a truncation note", b)
	}
}

func TestOpenCappedError(t *testing.T) {
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
