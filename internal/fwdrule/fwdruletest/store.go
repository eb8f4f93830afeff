// Package fwdruletest holds forwarding tables in memory, for the tests of
// the packages that serve and edit them (the control socket and its
// client) without a live port forwarder.
package fwdruletest

import (
	"sync"

	"github.com/gopasta/gopasta/internal/fwdrule"
)

// Store is a set of forwarding tables in memory, safe for concurrent use.
// It has the methods a control socket serves tables through.
type Store struct {
	mu       sync.Mutex
	ts       []fwdrule.Table
	replaced int
}

// New returns a store holding ts (not copied).
func New(ts []fwdrule.Table) *Store {
	return &Store{ts: ts}
}

// Tables returns a copy of the tables, as the live forwarder does, so that
// a caller editing it does not edit the store.
func (s *Store) Tables() []fwdrule.Table {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]fwdrule.Table, len(s.ts))
	for i := range s.ts {
		out[i] = s.ts[i].Clone()
	}
	return out
}

// Replace takes ts as the tables if every one of them is valid, and
// refuses them all otherwise, as the live forwarder does.
func (s *Store) Replace(ts []fwdrule.Table) error {
	for i := range ts {
		if err := ts[i].Validate(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ts = ts
	s.replaced++
	return nil
}

// Replaced counts the replacements taken.
func (s *Store) Replaced() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replaced
}
