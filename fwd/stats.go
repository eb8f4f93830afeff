package fwd

// The engine's counters (--stats): frames, bytes, drops by reason, flows per
// protocol, retransmissions, evictions.

import "sync/atomic"

// DropReason says why the engine discarded a frame or datagram.
type DropReason int

// Reasons for dropping. Each has its own counter, so tests and --stats can
// tell a hostile namespace from a full link.
const (
	DropTruncated    DropReason = iota // frame shorter than its headers claim
	DropEtherType                      // not IPv4, IPv6 or ARP (VLAN tags included)
	DropBadIP                          // IP version, header length or total length wrong; a datagram with TTL or hop limit 0
	DropBadChecksum                    // IPv4 header or transport checksum wrong
	DropFragment                       // IP fragments: never reassembled, as pasta
	DropBadTransport                   // transport header malformed (UDP length, ICMP type...)
	DropProtocol                       // protocol disabled (--no-udp...) or not handled
	DropDestination                    // destination we do not forward (loopback, link-local, multicast or broadcast but for UDP)
	DropTableFull                      // flow table at capacity
	DropHostSocket                     // host socket could not be opened or refused the data, or two host peers look alike to the namespace
	DropTooBig                         // host datagram larger than a frame toward the namespace holds
	DropLinkFull                       // link did not take the frame
	DropNoFlow                         // TCP segment for no connection (answered with a reset)
	DropUnacceptable                   // TCP segment outside its connection's sequence space, a reset off the exact number, or an ACK of data never sent (answered with an ACK)
	NumDropReasons
)

var dropNames = [NumDropReasons]string{
	"truncated", "ethertype", "bad-ip", "bad-checksum", "fragment",
	"bad-transport", "protocol", "destination", "table-full",
	"host-socket", "too-big", "link-full", "no-flow", "unacceptable",
}

func (r DropReason) String() string {
	if r < 0 || r >= NumDropReasons {
		return "unknown"
	}
	return dropNames[r]
}

// Stats is a snapshot of the engine's counters.
type Stats struct {
	FramesIn, FramesOut uint64 // frames read from / written to the link
	BytesIn, BytesOut   uint64
	Drops               [NumDropReasons]uint64
	// Live flows per protocol, and totals since start.
	FlowsTCP, FlowsUDP, FlowsICMP int64
	FlowsOpened, FlowsClosed      uint64
	// Retransmits counts TCP go-back-N rewinds toward the namespace.
	Retransmits uint64
	// Evicted counts datagram flows closed before their timeout to make
	// room for new flows (evict.go).
	Evicted uint64
}

// counters are written by the engine's loop only, read by anyone: atomics
// keep Stats() safe from other goroutines without a lock on the hot path.
type counters struct {
	framesIn, framesOut, bytesIn, bytesOut atomic.Uint64
	drops                                  [NumDropReasons]atomic.Uint64
	flows                                  [numProtos]atomic.Int64
	opened, closed                         atomic.Uint64
	retransmits                            atomic.Uint64 // TCP segments sent again to the namespace
	evicted                                atomic.Uint64
}

// Stats returns a snapshot of the counters; safe from any goroutine.
func (e *Engine) Stats() Stats {
	c := &e.ctr
	s := Stats{
		FramesIn: c.framesIn.Load(), FramesOut: c.framesOut.Load(),
		BytesIn: c.bytesIn.Load(), BytesOut: c.bytesOut.Load(),
		FlowsTCP: c.flows[protoTCP].Load(), FlowsUDP: c.flows[protoUDP].Load(),
		FlowsICMP:   c.flows[protoICMP].Load(),
		FlowsOpened: c.opened.Load(), FlowsClosed: c.closed.Load(),
		Retransmits: c.retransmits.Load(), Evicted: c.evicted.Load(),
	}
	for i := range s.Drops {
		s.Drops[i] = c.drops[i].Load()
	}
	return s
}

// FlowCount returns the number of live flows (all protocols); safe from any
// goroutine. Tests use it to prove that flows go away.
func (e *Engine) FlowCount() int {
	n := int64(0)
	for i := range e.ctr.flows {
		n += e.ctr.flows[i].Load()
	}
	return int(n)
}

// drop counts a discarded frame and, with debug logging, says why at most
// once a second per reason (a flooding namespace must not flood the log).
func (e *Engine) drop(r DropReason) {
	e.ctr.drops[r].Add(1)
	if e.debug && e.now-e.lastDropLog[r] >= int64(1e9) {
		e.lastDropLog[r] = e.now
		e.log.Debug("dropped", "reason", r.String(), "total", e.ctr.drops[r].Load())
	}
}
