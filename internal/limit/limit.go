// Package limit accounts for what an event loop refuses when it runs into
// a resource limit: counters for --stats, and one log line when an episode
// of refusals begins and one when it ends, whatever the number of
// connections refused in between.
//
// Theory of operation. At a limit (the process's or the system's
// descriptors, kernel memory, the flow table, a loop's share of
// connections) gopasta refuses what is new the way a kernel would: a TCP
// connection gets a reset, a datagram that would need a new flow is
// dropped. What is established keeps flowing. Such refusals come in
// bursts, thousands a second under a connection storm, so logging each
// would flood the log at the worst moment. An episode starts at the first
// refusal after a quiet spell (one warning naming the resource) and ends
// once no refusal has come for EpisodeQuiet (one line with the counts and
// how long it lasted); an episode that goes on is summed up every
// EpisodeReport. Refuse and Totals are safe from any goroutine; the
// episode's timer runs only while an episode lasts.
package limit

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Resource is what a refusal ran out of.
type Resource uint8

const (
	Descriptors Resource = iota // EMFILE or ENFILE: the process's or the system's file descriptors
	Memory                      // ENOMEM or ENOBUFS: kernel memory for a socket or pipe
	Flows                       // the flow table, or a loop's share of connections, is full
	NumResources
)

var resourceNames = [NumResources]string{"descriptors", "memory", "flows"}

func (r Resource) String() string {
	if r >= NumResources {
		return "unknown"
	}
	return resourceNames[r]
}

// Of classifies err: the resource it says ran out, and false for an error
// that is not about a limit (a refused connect, a bad address).
func Of(err error) (Resource, bool) {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return 0, false
	}
	switch errno {
	case unix.EMFILE, unix.ENFILE:
		return Descriptors, true
	case unix.ENOMEM, unix.ENOBUFS:
		return Memory, true
	}
	return 0, false
}

// Kind is what was refused.
type Kind uint8

const (
	TCP  Kind = iota // a TCP connection, either way
	UDP              // a UDP flow (its first datagram is dropped)
	ICMP             // an ICMP echo flow
	NumKinds
)

var kindNames = [NumKinds]string{"tcp", "udp", "icmp"}

func (k Kind) String() string {
	if k >= NumKinds {
		return "unknown"
	}
	return kindNames[k]
}

// Episode timing.
const (
	// EpisodeQuiet is how long without a refusal ends an episode.
	EpisodeQuiet = 5 * time.Second
	// EpisodeReport is how often an episode that goes on is summed up.
	EpisodeReport = time.Minute
	// tickEvery is how often an episode's timer looks at it.
	tickEvery = time.Second
)

// Refusals counts the refusals of every loop of a process and logs their
// episodes; one value is shared by the engine, the splice loop and port
// forwarding, so that a descriptor shortage that all of them run into is
// one episode. Safe for concurrent use: the lock is taken on refusals
// only, never on a path that forwards. The zero value counts without
// logging.
type Refusals struct {
	// Log receives the episodes' lines (nil: none). Set it before the
	// first refusal.
	Log *slog.Logger

	total [NumKinds]atomic.Uint64

	mu         sync.Mutex
	active     bool
	start      time.Time
	last       time.Time
	reported   time.Time
	resources  [NumResources]bool
	inEpisode  [NumKinds]uint64
	sinceLines [NumKinds]uint64
	timer      *time.Timer
	now        func() time.Time // time.Now; tests move it
}

// Refuse counts one refusal of k for lack of res. The first of an episode
// logs a warning and starts the episode's timer. r may be nil.
func (r *Refusals) Refuse(k Kind, res Resource) {
	if r == nil {
		return
	}
	r.total[k].Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	if !r.active {
		r.active = true
		r.start, r.reported = now, now
		r.inEpisode = [NumKinds]uint64{}
		r.sinceLines = [NumKinds]uint64{}
		r.resources = [NumResources]bool{}
		if r.Log != nil {
			r.Log.Warn("refusing new connections and flows at a limit; established ones go on",
				"limit", res.String())
		}
		if r.timer == nil {
			r.timer = time.AfterFunc(tickEvery, r.tick)
		} else {
			r.timer.Reset(tickEvery)
		}
	}
	r.resources[res] = true
	r.inEpisode[k]++
	r.sinceLines[k]++
	r.last = now
}

func (r *Refusals) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// tick ends an episode that has been quiet for EpisodeQuiet, sums up one
// that has gone on for another EpisodeReport, and runs again while the
// episode lasts.
func (r *Refusals) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.active {
		return
	}
	now := r.clock()
	switch {
	case now.Sub(r.last) >= EpisodeQuiet:
		r.active = false
		r.line("accepting new connections and flows again", now, r.inEpisode)
		return
	case now.Sub(r.reported) >= EpisodeReport:
		r.reported = now
		r.line("still refusing new connections and flows at a limit", now, r.sinceLines)
		r.sinceLines = [NumKinds]uint64{}
	}
	r.timer.Reset(tickEvery)
}

// Active reports whether an episode is going on (never on a nil r).
func (r *Refusals) Active() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active
}

func (r *Refusals) line(msg string, now time.Time, n [NumKinds]uint64) {
	if r.Log == nil {
		return
	}
	limits := ""
	for res, hit := range r.resources {
		if hit {
			if limits != "" {
				limits += ","
			}
			limits += Resource(res).String()
		}
	}
	attrs := []any{"limit", limits}
	for k, c := range n {
		attrs = append(attrs, "refused_"+Kind(k).String(), c)
	}
	if r.active {
		attrs = append(attrs, "for", now.Sub(r.start).Round(time.Second).String())
	} else {
		attrs = append(attrs, "lasted", r.last.Sub(r.start).Round(time.Millisecond).String())
	}
	r.Log.Warn(msg, attrs...)
}

// Totals returns the refusals of each kind since the start; safe from any
// goroutine, and on a nil r (all zero).
func (r *Refusals) Totals() [NumKinds]uint64 {
	var t [NumKinds]uint64
	if r == nil {
		return t
	}
	for k := range t {
		t[k] = r.total[k].Load()
	}
	return t
}

// Stop stops the episode's timer (at exit).
func (r *Refusals) Stop() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
}
