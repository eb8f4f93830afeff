package limit

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Resource
		ok   bool
	}{
		{unix.EMFILE, Descriptors, true},
		{unix.ENFILE, Descriptors, true},
		{fmt.Errorf("socket: %w", unix.EMFILE), Descriptors, true},
		{unix.ENOMEM, Memory, true},
		{unix.ENOBUFS, Memory, true},
		{unix.ECONNREFUSED, 0, false},
		{errors.New("other"), 0, false},
		{nil, 0, false},
	} {
		got, ok := Of(tc.err)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Of(%v): got %v, %v; want %v, %v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
}

// clockLog is a Refusals with a clock the test moves and a log it reads.
type clockLog struct {
	mu  sync.Mutex
	now time.Time
	buf bytes.Buffer
	r   *Refusals
}

func newClockLog() *clockLog {
	c := &clockLog{now: time.Unix(1000, 0)}
	c.r = &Refusals{Log: slog.New(slog.NewTextHandler(&syncWriter{c}, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))}
	c.r.now = func() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
	return c
}

type syncWriter struct{ c *clockLog }

func (w *syncWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.buf.Write(p)
}

func (c *clockLog) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *clockLog) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimSpace(c.buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestEpisode: a burst of refusals is one warning when it starts and one
// line with the counts once it has been quiet for EpisodeQuiet; the
// totals count every refusal.
func TestEpisode(t *testing.T) {
	c := newClockLog()
	defer c.r.Stop()
	for range 1000 {
		c.r.Refuse(TCP, Descriptors)
	}
	c.r.Refuse(UDP, Memory)
	if got := c.lines(); len(got) != 1 || !strings.Contains(got[0], "refusing new connections") || !strings.Contains(got[0], "limit=descriptors") {
		t.Fatalf("after the burst: got log %q, want one warning naming descriptors", got)
	}
	c.advance(EpisodeQuiet - time.Second)
	c.r.tick()
	if got := c.lines(); len(got) != 1 || !c.r.Active() {
		t.Fatalf("before the quiet spell ends: got log %q, active %v; want the one warning and still active", got, c.r.Active())
	}
	c.advance(time.Second)
	c.r.tick()
	got := c.lines()
	if len(got) != 2 || c.r.Active() {
		t.Fatalf("after the quiet spell: got log %q, active %v; want two lines and the episode over", got, c.r.Active())
	}
	for _, want := range []string{"accepting new connections", "limit=descriptors,memory", "refused_tcp=1000", "refused_udp=1", "refused_icmp=0"} {
		if !strings.Contains(got[1], want) {
			t.Errorf("end of the episode: got %q, want it to contain %q", got[1], want)
		}
	}
	if tot := c.r.Totals(); tot != [NumKinds]uint64{1000, 1, 0} {
		t.Errorf("totals: got %v, want [1000 1 0]", tot)
	}

	// The next refusal starts a new episode.
	c.r.Refuse(ICMP, Flows)
	if got := c.lines(); len(got) != 3 || !strings.Contains(got[2], "limit=flows") {
		t.Errorf("a new episode: got log %q, want a third line naming flows", got)
	}
}

// TestLongEpisode: an episode that goes on is summed up every
// EpisodeReport with the refusals since the last line.
func TestLongEpisode(t *testing.T) {
	c := newClockLog()
	defer c.r.Stop()
	for range 3 * 60 {
		c.r.Refuse(TCP, Flows)
		c.advance(time.Second)
		c.r.tick()
	}
	got := c.lines()
	if len(got) != 1+3 {
		t.Fatalf("three minutes of refusals: got %d lines %q, want the warning and three summaries", len(got), got)
	}
	for _, l := range got[1:] {
		if !strings.Contains(l, "still refusing") || !strings.Contains(l, "refused_tcp=60") {
			t.Errorf("summary: got %q, want \"still refusing\" with refused_tcp=60", l)
		}
	}
}

// TestNil: a nil Refusals counts nothing and does not fail.
func TestNil(t *testing.T) {
	var r *Refusals
	r.Refuse(TCP, Descriptors)
	r.Stop()
	if got := r.Totals(); got != [NumKinds]uint64{} {
		t.Errorf("nil totals: got %v, want zeros", got)
	}
}

// TestTimerEndsEpisode: the episode's own timer, not a caller, ends it.
func TestTimerEndsEpisode(t *testing.T) {
	r := &Refusals{}
	start := time.Now()
	r.now = func() time.Time { return start.Add(10 * time.Since(start)) } // 10 times as fast
	r.Refuse(TCP, Descriptors)
	deadline := time.Now().Add(10 * time.Second)
	for r.Active() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if r.Active() {
		t.Fatal("the episode still active after 10s with a clock running 10 times as fast, want it ended by its timer")
	}
}
