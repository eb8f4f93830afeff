package fwd

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/limit"
)

// Datagram flows (UDP, ICMP echo) hold a host socket each and end only by
// timeout: a namespace that starts them faster than they expire, by
// mistake or on purpose, would otherwise fill the table and then take
// every descriptor the process may open, and with them every new TCP
// connection and forwarded port. So they get a share of the table
// (Options.DatagramFlows), and a new flow that finds the share taken, or
// the table full, takes the place of a datagram flow that has been idle
// longest: the one with the earliest deadline in a sample of the active
// flows. What goes is soft state the namespace rebuilds by sending again
// (a new flow, from a new host socket); a TCP connection never goes.
//
// Sampling, as caches do it, keeps the cost per new flow bounded without
// keeping flows in activity order on the fast path: the sample is taken
// round the active list, so every flow is looked at in turn.

const (
	evictSample = 16  // datagram flows compared per eviction
	evictScan   = 256 // active flows looked at, at most, to find them
)

// datagramBudget is the datagram flows' share of a table of capacity:
// asked, or half the table and at most half the descriptor limit.
func datagramBudget(capacity, asked int) int {
	if asked > 0 {
		return asked
	}
	n := max(capacity/2, 1)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur < uint64(2*n) {
		n = max(int(rl.Cur/2), 1)
	}
	return n
}

// allocFlow takes a table slot for a new flow of proto, evicting a
// datagram flow first when a new datagram flow would exceed its share. A
// full table also evicts one, whose slot is free from the next cycle on
// (the socket closes at the end of this one), so this flow is dropped
// (DropTableFull) and the namespace's next attempt gets the slot.
func (e *Engine) allocFlow(k *flowKey, proto uint8) int32 {
	evicted := false
	if proto != protoTCP && e.datagramFlows() >= e.dgramMax {
		evicted = e.evictDatagram(-1)
	}
	idx := e.ft.alloc(k, proto)
	if idx < 0 {
		e.drop(DropTableFull)
		e.opts.Refusals.Refuse(limitKind(proto), limit.Flows)
		if !evicted {
			e.evictDatagram(-1)
		}
		return -1
	}
	return idx
}

// datagramFlows is how many UDP and ICMP flows hold a host socket: the
// live ones and those closing this cycle, whose sockets close at its end.
func (e *Engine) datagramFlows() int {
	return int(e.ctr.flows[protoUDP].Load() + e.ctr.flows[protoICMP].Load())
}

// evictDatagram closes the datagram flow with the earliest deadline in a
// sample of the active ones other than flow except; false if the sample
// held none.
func (e *Engine) evictDatagram(except int32) bool {
	act := e.ft.active
	best, found := int32(-1), 0
	for i := 0; i < min(len(act), evictScan) && found < evictSample; i++ {
		e.evictHand++
		if e.evictHand >= len(act) {
			e.evictHand = 0
		}
		idx := act[e.evictHand]
		f := &e.ft.flows[idx]
		if f.state != flowActive || f.proto == protoTCP || idx == except || f.batch == e.batch {
			// A flow with a packet in the batch of frames being handled
			// stays: the packet is waiting for its group to run.
			continue
		}
		found++
		if best < 0 || f.Deadline < e.ft.flows[best].Deadline {
			best = idx
		}
	}
	if best < 0 {
		return false
	}
	e.closeFlow(best)
	e.ctr.evicted.Add(1)
	return true
}

// outOfDescriptors is called when a host socket could not be made: if the
// process or the system ran out of descriptors (EMFILE, ENFILE: the limit
// is lower than the datagram share assumed, or was lowered since), a
// datagram flow goes, so that the namespace's next attempt finds one free
// once its socket closes at the end of this cycle.
// The flow being set up, if any (else -1), is not the one to go.
func (e *Engine) outOfDescriptors(err error, setup int32) {
	if descriptorsExhausted(err) {
		e.evictDatagram(setup)
	}
}

// descriptorsExhausted reports whether err is the process (EMFILE) or the
// system (ENFILE) out of descriptors: a moment's shortage, not a refusal.
func descriptorsExhausted(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE)
}

// refused counts a new connection or flow of proto that err refused, when
// err is a limit (out of descriptors or memory): the episode's log and
// --stats show it.
func (e *Engine) refused(proto uint8, err error) {
	if res, ok := limit.Of(err); ok {
		e.opts.Refusals.Refuse(limitKind(proto), res)
	}
}

// limitKind is proto's kind for package limit.
func limitKind(proto uint8) limit.Kind {
	switch proto {
	case protoTCP:
		return limit.TCP
	case protoUDP:
		return limit.UDP
	}
	return limit.ICMP
}
