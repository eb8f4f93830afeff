package logging

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listenSyslog is a system logger on a datagram socket in a temporary
// directory.
func listenSyslog(t *testing.T) (*net.UnixConn, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "log")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, p
}

// recvSyslog returns the messages the logger c got within d.
func recvSyslog(c *net.UnixConn, d time.Duration) []string {
	var got []string
	buf := make([]byte, 8192)
	for {
		c.SetReadDeadline(time.Now().Add(d))
		n, err := c.Read(buf)
		if err != nil {
			return got
		}
		got = append(got, string(buf[:n]))
	}
}

// TestSyslogAfterDetach checks background mode's logging: stderr until
// Detach, then the system logger, with the daemon facility, the level's
// severity, and no per-packet lines.
func TestSyslogAfterDetach(t *testing.T) {
	c, p := listenSyslog(t)
	var stderr bytes.Buffer
	l, out, err := New(Options{Trace: true, Stderr: &stderr, Syslog: p})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	l.Info("before")
	out.Detach()
	l.Info("after", "k", "v")
	l.Warn("careful")
	l.Error("failed")
	l.Debug("detail")
	l.Log(t.Context(), LevelTrace, "per packet")
	pid := os.Getpid()
	want := []string{
		fmt.Sprintf("<30>gopasta[%d]: after k=v", pid),
		fmt.Sprintf("<28>gopasta[%d]: careful", pid),
		fmt.Sprintf("<27>gopasta[%d]: failed", pid),
		fmt.Sprintf("<31>gopasta[%d]: detail", pid),
	}
	if got := recvSyslog(c, 200*time.Millisecond); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("system logger: got %q, want %q", got, want)
	}
	if got := stderr.String(); !strings.HasSuffix(got, "gopasta: before\n") || strings.Contains(got, "after") {
		t.Errorf("stderr: got %q, want the line before Detach only", got)
	}
}

// TestSyslogWithFile checks that -l wins: the file gets every line, before
// and after Detach, and the system logger nothing.
func TestSyslogWithFile(t *testing.T) {
	c, p := listenSyslog(t)
	f := filepath.Join(t.TempDir(), "log")
	l, out, err := New(Options{File: f, Syslog: p})
	if err != nil {
		t.Fatal(err)
	}
	l.Info("one")
	out.Detach()
	l.Info("two")
	out.Close()
	if got := recvSyslog(c, 100*time.Millisecond); len(got) != 0 {
		t.Errorf("system logger: got %q, want nothing with -l", got)
	}
	if b, _ := os.ReadFile(f); !strings.Contains(string(b), "one") || !strings.Contains(string(b), "two") {
		t.Errorf("log file: got %q, want both lines", b)
	}
}

// TestSyslogUnreachable checks that a system logger that is missing or
// refuses is no error: the reason is a debug line, and messages after
// Detach go nowhere.
func TestSyslogUnreachable(t *testing.T) {
	c, stale := listenSyslog(t)
	c.Close() // the socket file stays, nobody listens: ECONNREFUSED
	for _, p := range []string{filepath.Join(t.TempDir(), "none"), stale} {
		var stderr bytes.Buffer
		l, out, err := New(Options{Debug: true, Stderr: &stderr, Syslog: p})
		if err != nil {
			t.Fatalf("%s: got %v, want no error", p, err)
		}
		out.Detach()
		l.Info("unseen")
		out.Close()
		if got := stderr.String(); !strings.Contains(got, "no system logger") || strings.Contains(got, "unseen") {
			t.Errorf("%s: stderr: got %q, want the debug line only", p, got)
		}
	}
}

// TestSyslogNeverBlocks checks that a system logger that does not read
// costs messages, not a blocked caller: the socket is non-blocking.
func TestSyslogNeverBlocks(t *testing.T) {
	_, p := listenSyslog(t) // never read
	l, out, err := New(Options{Syslog: p})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	out.Detach()
	done := make(chan struct{})
	go func() {
		for i := range 5000 {
			l.Info("a message nobody reads", "i", i)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("5000 messages to a logger that does not read: got no return within 10 s, want it at once")
	}
	if out.SyslogDropped() == 0 {
		t.Error("got no dropped message, want the ones the full socket refused counted")
	}
}
