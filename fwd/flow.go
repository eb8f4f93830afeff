package fwd

// The flow table: fixed capacity, keyed by the namespace side's addresses
// and ports, an open-addressing index with backward-shift deletion.

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"
)

// Protocol indexes of the translators (and of the per-protocol counters).
const (
	protoTCP = iota
	protoUDP
	protoICMP // ICMPv4 and ICMPv6 echo
	numProtos
)

// flowKey identifies a flow by its namespace side: what the namespace sent
// from and to. For echo flows nsPort is the echo identifier and dstPort 0.
// Addresses are stored as 16 bytes (IPv4 as v4-mapped) so the key is a
// plain comparable value with no pointers, hashed without allocation.
type flowKey struct {
	proto           uint8 // header.ProtocolTCP, ProtocolUDP, ProtocolICMPv4, ProtocolICMPv6
	nsPort, dstPort uint16
	ns, dst         [16]byte
}

func (k *flowKey) bytes(b *[37]byte) {
	b[0] = k.proto
	binary.BigEndian.PutUint16(b[1:], k.nsPort)
	binary.BigEndian.PutUint16(b[3:], k.dstPort)
	copy(b[5:21], k.ns[:])
	copy(b[21:37], k.dst[:])
}

// Flow states.
const (
	flowFree uint8 = iota
	flowActive
	flowClosing // unhashed, socket closed at the end of the cycle
)

// Flow is one entry of the flow table: a namespace-side tuple and the host
// socket that carries it. Translators keep any further per-flow state in
// arrays of their own indexed by the flow's index (see translator), so this
// struct stays small and protocol-neutral.
type Flow struct {
	key   flowKey
	hash  uint32
	state uint8
	proto uint8 // protoTCP, protoUDP, protoICMP
	v6    bool
	// gen changes every time the slot is reused, so a stale epoll event
	// for a closed flow is recognised and ignored.
	gen uint32
	// activePos is the flow's index in flowTable.active.
	activePos int32

	// Namespace side: the namespace's port, and the port it sent to
	// (which replies come from); the addresses are the key's (NSAddr,
	// DstAddr).
	NSPort, DstPort uint16
	// Host side: the socket, and the address it is connected to after
	// NAT (e.g. 127.0.0.1 for the gateway), as HostAddr returns it.
	Fd       int
	host     [16]byte
	hostKind uint8 // 0: none, 4 or 6
	// ttl is the TTL or hop limit a UDP flow's socket sends with, the
	// namespace's last (0: the socket's default, not set yet).
	ttl uint8

	// Deadline (engine nanoseconds) at which the translator's timer
	// hook runs; 0 = none.
	Deadline int64
	// Flags for the translators' use (UDP: traffic seen both ways).
	Flags uint32
	// udpLast is the largest datagram of the last batch read from a UDP
	// flow's host socket, which bounds the next one (udpBurst).
	udpLast uint32
	// batch is the last batch of frames from the link with a packet of
	// this flow (Engine.batch).
	batch uint32
}

// A Flow holds no pointer (its addresses are bytes, not netip.Addr, whose
// zone is one), so a table of them is memory the garbage collector never
// scans: unused capacity is never read, and stays out of the process's
// resident memory (TestFlowTableHoldsNoPointers).

// NSAddr is the namespace's address of the flow.
func (f *Flow) NSAddr() netip.Addr { return keyAddr(&f.key.ns, f.v6) }

// DstAddr is the address the namespace sent to, which replies come from.
func (f *Flow) DstAddr() netip.Addr { return keyAddr(&f.key.dst, f.v6) }

func keyAddr(a *[16]byte, v6 bool) netip.Addr {
	if v6 {
		return netip.AddrFrom16(*a)
	}
	return netip.AddrFrom4([4]byte(a[12:]))
}

// HostAddr is the address the flow's host socket is connected to (after
// NAT); invalid until setHostAddr.
func (f *Flow) HostAddr() netip.Addr {
	switch f.hostKind {
	case 4:
		return netip.AddrFrom4([4]byte(f.host[12:]))
	case 6:
		return netip.AddrFrom16(f.host)
	}
	return netip.Addr{}
}

// setHostAddr sets HostAddr (a zone, which host addresses of flows never
// have, is not kept).
func (f *Flow) setHostAddr(a netip.Addr) {
	switch {
	case a.Is4():
		f.host, f.hostKind = a.As16(), 4
	case a.Is6():
		f.host, f.hostKind = a.As16(), 6
	default:
		f.host, f.hostKind = [16]byte{}, 0
	}
}

// flowTable is a fixed-capacity table: the flows are allocated once, free
// slots are kept on a stack, and the index is an open-addressing hash with
// linear probing and backward-shift deletion (no tombstones, so churn never
// degrades lookups or allocates; a Go map would grow under insert/delete
// churn). The index is twice the capacity, keeping probe sequences short.
// The hash is keyed with a random seed so a namespace cannot aim collisions.
//
// Nothing is written at creation: slots never used come from fresh, the
// index holds a flow's index plus one (0: empty), so a table's memory is
// made resident by the flows it holds, not by its capacity (a full
// table is about 300 bytes a flow with the TCP translator's state).
type flowTable struct {
	flows  []Flow
	free   []int32 // released slots, reused first
	fresh  int32   // slots from here on were never used
	active []int32
	index  []int32 // a flow's index + 1; 0: empty
	mask   uint32
	seed   maphash.Seed
}

func newFlowTable(capacity int) *flowTable {
	n := uint32(1) << bits.Len32(uint32(2*capacity-1))
	return &flowTable{
		flows:  make([]Flow, capacity),
		free:   make([]int32, 0, capacity),
		active: make([]int32, 0, capacity),
		index:  make([]int32, n),
		mask:   n - 1,
		seed:   maphash.MakeSeed(),
	}
}

// available is how many more flows fit.
func (t *flowTable) available() int {
	return len(t.free) + len(t.flows) - int(t.fresh)
}

func (t *flowTable) hashKey(k *flowKey) uint32 {
	var b [37]byte
	k.bytes(&b)
	return uint32(maphash.Bytes(t.seed, b[:]))
}

// lookup returns the index of the flow with key k, or -1.
func (t *flowTable) lookup(k *flowKey) int32 {
	h := t.hashKey(k)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		j := t.index[i] - 1
		if j < 0 {
			return -1
		}
		if f := &t.flows[j]; f.hash == h && f.key == *k {
			return j
		}
	}
}

// alloc takes a free slot for key k and indexes it; -1 when full. The
// caller fills in the rest of the flow.
func (t *flowTable) alloc(k *flowKey, proto uint8) int32 {
	var idx int32
	switch {
	case len(t.free) > 0:
		idx = t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
	case int(t.fresh) < len(t.flows):
		idx = t.fresh
		t.fresh++
	default:
		return -1
	}
	f := &t.flows[idx]
	gen := f.gen + 1
	*f = Flow{key: *k, hash: t.hashKey(k), state: flowActive, proto: proto, gen: gen, Fd: -1}
	f.activePos = int32(len(t.active))
	t.active = append(t.active, idx)
	i := f.hash & t.mask
	for t.index[i] != 0 {
		i = (i + 1) & t.mask
	}
	t.index[i] = idx + 1
	return idx
}

// unhash removes flow idx from the index (it can no longer be found) and
// marks it closing; release returns the slot once its socket is gone.
func (t *flowTable) unhash(idx int32) {
	f := &t.flows[idx]
	i := f.hash & t.mask
	for t.index[i] != idx+1 {
		i = (i + 1) & t.mask
	}
	// Backward-shift deletion: pull later members of the probe run
	// into the hole unless their home slot lies cyclically in (hole, j].
	hole := i
	for j := (i + 1) & t.mask; t.index[j] != 0; j = (j + 1) & t.mask {
		home := t.flows[t.index[j]-1].hash & t.mask
		var stays bool
		if hole <= j {
			stays = hole < home && home <= j
		} else {
			stays = hole < home || home <= j
		}
		if !stays {
			t.index[hole] = t.index[j]
			hole = j
		}
	}
	t.index[hole] = 0
	f.state = flowClosing
}

// release puts slot idx back on the free list.
func (t *flowTable) release(idx int32) {
	f := &t.flows[idx]
	last := t.active[len(t.active)-1]
	t.active[f.activePos] = last
	t.flows[last].activePos = f.activePos
	t.active = t.active[:len(t.active)-1]
	f.state = flowFree
	f.Fd = -1
	t.free = append(t.free, idx)
}

// keyFor builds the key of a parsed namespace packet.
func keyFor(p *packet, k *flowKey) {
	k.proto = p.proto
	k.nsPort, k.dstPort = p.sport, p.dport
	k.ns = p.src.As16()
	k.dst = p.dst.As16()
	if p.proto == header.ProtocolICMPv4 || p.proto == header.ProtocolICMPv6 {
		k.dstPort = 0
	}
}
