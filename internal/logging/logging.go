// Package logging sets up gopasta's log/slog logger from the command line's
// -q, -d, --trace, -l and --log-size: lines on stderr, in a size-capped
// file, or, in the background, to the system logger; and it provides a
// rate limiter for messages that untrusted input could otherwise repeat
// without bound.
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
	// Syslog, when set (SyslogPath) and File is not, is the system
	// logger's socket, connected now: messages go there once
	// Output.Detach is called (background mode). A logger that cannot be
	// reached is not an error; the messages after Detach are then lost,
	// as stderr is gone.
	Syslog string
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

// New builds the logger and its Output, which the caller closes at exit.
func New(o Options) (*slog.Logger, *Output, error) {
	out := &Output{w: o.Stderr}
	if out.w == nil {
		out.w = os.Stderr
	}
	if o.File != "" {
		f, err := OpenFile(o.File, o.MaxSize)
		if err != nil {
			return nil, nil, err
		}
		out.w, out.file = f, f
	} else if o.Syslog != "" {
		out.sys, out.sysErr = dialSyslog(o.Syslog)
	}
	h := &lineHandler{out: out, level: o.Level(), withTime: o.File != "" || o.Debug || o.Trace}
	l := slog.New(h)
	if out.sysErr != nil {
		l.Debug("no system logger: messages after going to the background are lost (use -l)", "err", out.sysErr)
	}
	return l, out, nil
}

// Output is where the log's lines go: stderr or the -l file, and, once
// detached from stderr, the system logger.
type Output struct {
	mu       sync.Mutex
	w        io.Writer
	file     *File       // -l, or nil
	sys      *syslogConn // connected at New (Options.Syslog), or nil
	sysErr   error       // why sys is nil although asked for
	detached bool
}

// Detach stops writing to stderr, which is about to go away (background
// mode): from now on messages go to the system logger, if one was
// connected, else nowhere. The -l file is kept.
func (o *Output) Detach() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.file == nil {
		o.detached = true
	}
}

// FileFd is the -l file's descriptor, or -1 without one.
func (o *Output) FileFd() int {
	if o.file == nil {
		return -1
	}
	return int(o.file.Fd())
}

// SyslogDropped is how many messages the system logger did not take.
func (o *Output) SyslogDropped() uint64 {
	if o.sys == nil {
		return 0
	}
	return o.sys.dropped.Load()
}

// Close closes the log file and the system logger's socket.
func (o *Output) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var err error
	if o.file != nil {
		err = o.file.Close()
	}
	if o.sys != nil {
		o.sys.close()
		o.sys = nil
	}
	return err
}

// write emits one record: msg is its text without the program name.
func (o *Output) write(l slog.Level, t time.Time, withTime bool, msg string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.detached {
		// Per-packet lines (--trace) would flood the system log.
		if o.sys != nil && l > LevelTrace {
			o.sys.send(l, msg)
		}
		return nil
	}
	var b strings.Builder
	if withTime && !t.IsZero() {
		b.WriteString(t.Format("2006-01-02T15:04:05.000 "))
	}
	b.WriteString("gopasta: ")
	switch {
	case l >= slog.LevelError:
		b.WriteString("error: ")
	case l >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(msg)
	b.WriteByte('\n')
	_, err := io.WriteString(o.w, b.String())
	return err
}

// lineHandler writes one human-readable line per record: "gopasta: msg k=v".
// slog's TextHandler quotes every message, which reads badly on a terminal,
// and users grep pasta-style plain lines.
type lineHandler struct {
	out      *Output
	level    slog.Level
	withTime bool
	attrs    []slog.Attr
	group    string
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
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
	return h.out.write(r.Level, r.Time, h.withTime, b.String())
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
