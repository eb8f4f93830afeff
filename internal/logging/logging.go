// Package logging sets up gopasta's log/slog logger from the command line's
// -q, -d, --trace, -l and --log-size, and provides a rate limiter for
// messages that untrusted input could otherwise repeat without bound.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// LevelTrace is below slog.LevelDebug: per-packet detail for --trace.
const LevelTrace = slog.Level(-8)

// DefaultLogSize is pasta's default --log-size: 1 MiB.
const DefaultLogSize = 1 << 20

// Options select the destination and verbosity.
type Options struct {
	Quiet, Debug, Trace bool
	// File, when set, receives the log instead of stderr (-l).
	File string
	// MaxSize caps File (--log-size); 0 means DefaultLogSize.
	MaxSize int64
	// Stderr is where messages go without File (usually os.Stderr).
	Stderr io.Writer
}

// Level is the minimum level Options asks for. Quiet keeps warnings and
// errors: a user who asked for silence still needs to know why a flow died.
func (o Options) Level() slog.Level {
	switch {
	case o.Trace:
		return LevelTrace
	case o.Debug:
		return slog.LevelDebug
	case o.Quiet:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// New builds the logger. The returned closer flushes and closes the log file
// (a no-op for stderr).
func New(o Options) (*slog.Logger, io.Closer, error) {
	var w io.Writer = o.Stderr
	var c io.Closer = nopCloser{}
	if w == nil {
		w = os.Stderr
	}
	if o.File != "" {
		f, err := OpenCapped(o.File, o.MaxSize)
		if err != nil {
			return nil, nil, err
		}
		w, c = f, f
	}
	h := &lineHandler{w: &lockedWriter{w: w}, level: o.Level(), withTime: o.File != "" || o.Debug || o.Trace}
	return slog.New(h), c, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lineHandler writes one human-readable line per record: "gopasta: msg k=v".
// slog's TextHandler quotes every message, which reads badly on a terminal,
// and users grep pasta-style plain lines.
type lineHandler struct {
	w        *lockedWriter
	level    slog.Level
	withTime bool
	attrs    []slog.Attr
	group    string
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	if h.withTime && !r.Time.IsZero() {
		b.WriteString(r.Time.Format("2006-01-02T15:04:05.000 "))
	}
	b.WriteString("gopasta: ")
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	write := func(a slog.Attr) {
		a.Value = a.Value.Resolve()
		if a.Equal(slog.Attr{}) {
			return
		}
		b.WriteByte(' ')
		if h.group != "" {
			b.WriteString(h.group)
			b.WriteByte('.')
		}
		b.WriteString(a.Key)
		b.WriteByte('=')
		s := a.Value.String()
		if strings.ContainsAny(s, " \t\"=") || s == "" {
			fmt.Fprintf(&b, "%q", s)
		} else {
			b.WriteString(s)
		}
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(func(a slog.Attr) bool { write(a); return true })
	b.WriteByte('\n')
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &n
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	n := *h
	if n.group != "" {
		name = n.group + "." + name
	}
	n.group = name
	return &n
}

// Limiter lets through at most a burst of messages per interval and counts
// the rest, so a namespace flooding bad frames cannot flood the log.
type Limiter struct {
	interval time.Duration
	burst    int64
	start    atomic.Int64 // unix nanos of the current window
	count    atomic.Int64
	dropped  atomic.Int64
}

// NewLimiter allows burst messages per interval.
func NewLimiter(burst int, interval time.Duration) *Limiter {
	return &Limiter{interval: interval, burst: int64(burst)}
}

// Allow reports whether a message may be logged now, and how many were
// suppressed since the last one that was allowed.
func (l *Limiter) Allow(now time.Time) (ok bool, suppressed int64) {
	n := now.UnixNano()
	if s := l.start.Load(); n-s >= int64(l.interval) && l.start.CompareAndSwap(s, n) {
		l.count.Store(0)
	}
	if l.count.Add(1) > l.burst {
		l.dropped.Add(1)
		return false, 0
	}
	return true, l.dropped.Swap(0)
}
