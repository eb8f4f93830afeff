//go:build linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm)

package vhostkern

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Split virtqueue, driver side (virtio 1.x, section 2.7). All of it is plain
// memory manipulation so that ring_test.go can drive it against a model of
// the device without a kernel.
//
// Shared words the other side writes concurrently (used.idx, avail_event)
// are read with 32-bit atomic loads, and the words it reads (avail.idx,
// used_event) are written with 32-bit atomic stores: Go has no 16-bit
// atomics, so the layout gives each such 16-bit field an aligned 32-bit word
// whose other half is either ours (avail.flags) or padding. Go's atomics are
// sequentially consistent, which supplies the barriers virtio asks for:
// descriptor writes happen before the avail.idx store, the used.idx load
// happens before reading used elements, and the store that publishes
// avail.idx (or used_event) is ordered before the load of avail_event (or
// the re-check of used.idx) that decides whether to notify or sleep.

const (
	descFNext  = 1 // VRING_DESC_F_NEXT
	descFWrite = 2 // VRING_DESC_F_WRITE: device writes this buffer

	availFNoInterrupt = 1 // VRING_AVAIL_F_NO_INTERRUPT
	usedFNoNotify     = 1 // VRING_USED_F_NO_NOTIFY

	sizeofVringDesc     = 16
	sizeofVringUsedElem = 8

	// MaxQueueSize is the largest ring vhost accepts (a power of two < 65536).
	MaxQueueSize = 32768
)

// struct vring_desc, for layout checks; the ring writes the bytes directly.
type vringDesc struct {
	Addr  uint64
	Len   uint32
	Flags uint16
	Next  uint16
}

// struct vring_used_elem.
type vringUsedElem struct {
	ID  uint32
	Len uint32
}

// ErrDeviceBroken reports that the device side wrote something a correct
// device never writes (an unknown descriptor id, an impossible length). The
// queue cannot be trusted any more.
var ErrDeviceBroken = errors.New("vhostkern: device broke the virtqueue protocol")

// needEvent is vring_need_event: true when event lies in the window
// [old, new) of indices that have just been passed, in 16-bit modular
// arithmetic. It decides both kicks (event = avail_event) and calls
// (event = used_event).
func needEvent(event, new, old uint16) bool {
	return new-event-1 < new-old
}

func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

// ringLayout holds the offsets of one queue's parts, relative to its start.
type ringLayout struct {
	desc, avail, used, size int
}

// layoutRing places the descriptor table, the avail ring (flags, idx,
// ring[num], used_event, 2 bytes of padding for the 32-bit store) and the
// used ring (flags, idx, ring[num], avail_event, padding). The used ring
// starts on its own cache line so that the two sides do not write the same
// line.
func layoutRing(num int) ringLayout {
	var l ringLayout
	l.avail = l.desc + sizeofVringDesc*num
	l.used = alignUp(l.avail+4+2*num+4, 64)
	l.size = alignUp(l.used+4+sizeofVringUsedElem*num+4, 64)
	return l
}

// ring is the driver's view of one split virtqueue.
type ring struct {
	mem      []byte // shared area: this ring and the buffers it points to
	base     uint64 // device-visible address of mem[0]
	num      uint16
	desc     int // absolute offsets into mem
	avail    int
	used     int
	eventIdx bool

	// Driver-private state: never read back from shared memory, so a
	// confused device cannot corrupt the free list.
	availIdx   uint16   // next avail.idx to publish
	kickOld    uint16   // avail.idx at the last kick decision
	lastUsed   uint16   // next used element to consume
	availFlags uint16   // shadow of avail.flags
	freeHead   uint16   // first free descriptor
	numFree    uint16   // descriptors on the free list
	next       []uint16 // free-list links, and chain links while in flight
	chain      []uint16 // per head: descriptors in its chain; 0 = not in flight
}

// newRing sets up a queue of num entries (a power of two) at offset off of
// mem, whose first byte the device sees at address base. start is the
// initial value of both ring indices: 0 normally, near 65535 to exercise
// wrap-around.
func newRing(mem []byte, base uint64, off, num int, eventIdx bool, start uint16) (*ring, error) {
	if num < 2 || num > MaxQueueSize || num&(num-1) != 0 {
		return nil, fmt.Errorf("vhostkern: queue size %d: want a power of two in [2, %d]", num, MaxQueueSize)
	}
	l := layoutRing(num)
	if off < 0 || off%64 != 0 || off+l.size > len(mem) {
		return nil, fmt.Errorf("vhostkern: ring at offset %d (size %d) outside a %d-byte area", off, l.size, len(mem))
	}
	if uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, errors.New("vhostkern: ring memory is not 8-byte aligned")
	}
	r := &ring{
		mem: mem, base: base, num: uint16(num),
		desc: off + l.desc, avail: off + l.avail, used: off + l.used,
		eventIdx: eventIdx,
		availIdx: start, kickOld: start, lastUsed: start,
		numFree: uint16(num),
		next:    make([]uint16, num),
		chain:   make([]uint16, num),
	}
	clear(mem[off : off+l.size])
	for i := range r.next {
		r.next[i] = uint16(i + 1)
	}
	// The device reads its starting used index from memory (vhost does, in
	// vhost_vq_init_access), so both indices start at start.
	r.store32(r.avail, uint32(start)<<16)
	r.store32(r.used, uint32(start)<<16)
	r.store32(r.usedEventOff(), uint32(start))
	return r, nil
}

func (r *ring) word(off int) *uint32  { return (*uint32)(unsafe.Pointer(&r.mem[off])) }
func (r *ring) load32(off int) uint32 { return atomic.LoadUint32(r.word(off)) }
func (r *ring) store32(off int, v uint32) {
	atomic.StoreUint32(r.word(off), v)
}

func (r *ring) usedEventOff() int  { return r.avail + 4 + 2*int(r.num) }
func (r *ring) availEventOff() int { return r.used + 4 + sizeofVringUsedElem*int(r.num) }

// addr is the device-visible address of mem[off].
func (r *ring) addr(off int) uint64 { return r.base + uint64(off) }

// take moves len(ids) descriptors from the free list into ids and links them
// into one chain in that order. It takes nothing when too few are free.
func (r *ring) take(ids []uint16) bool {
	if len(ids) == 0 || len(ids) > int(r.numFree) {
		return false
	}
	for i := range ids {
		ids[i] = r.freeHead
		r.freeHead = r.next[r.freeHead]
	}
	r.numFree -= uint16(len(ids))
	for i := 0; i+1 < len(ids); i++ {
		r.next[ids[i]] = ids[i+1]
	}
	r.chain[ids[0]] = uint16(len(ids))
	return true
}

// setDesc fills descriptor id; next is ignored unless flags has descFNext.
func (r *ring) setDesc(id uint16, addr uint64, n uint32, flags, next uint16) {
	d := r.mem[r.desc+sizeofVringDesc*int(id):]
	binary.LittleEndian.PutUint64(d[0:8], addr)
	binary.LittleEndian.PutUint32(d[8:12], n)
	binary.LittleEndian.PutUint16(d[12:14], flags)
	binary.LittleEndian.PutUint16(d[14:16], next)
}

// push queues the chain starting at head; publish makes it visible.
func (r *ring) push(head uint16) {
	slot := r.avail + 4 + 2*int(r.availIdx&(r.num-1))
	binary.LittleEndian.PutUint16(r.mem[slot:], head)
	r.availIdx++
}

// publish stores avail.idx (with the flags that share its word), releasing
// every descriptor and ring entry written before it.
func (r *ring) publish() {
	r.store32(r.avail, uint32(r.availIdx)<<16|uint32(r.availFlags))
}

// kickNeeded tells, after publish, whether the device asked to be notified
// about the entries added since the last decision.
func (r *ring) kickNeeded() bool {
	new, old := r.availIdx, r.kickOld
	r.kickOld = new
	if new == old {
		return false
	}
	if r.eventIdx {
		return needEvent(uint16(r.load32(r.availEventOff())), new, old)
	}
	return uint16(r.load32(r.used))&usedFNoNotify == 0
}

// pending is the number of used elements not consumed yet.
func (r *ring) pending() uint16 {
	return uint16(r.load32(r.used)>>16) - r.lastUsed
}

// peekUsed returns the used element k places after the next one.
func (r *ring) peekUsed(k uint16) (id, n uint32) {
	e := r.mem[r.used+4+sizeofVringUsedElem*int((r.lastUsed+k)&(r.num-1)):]
	return binary.LittleEndian.Uint32(e[0:4]), binary.LittleEndian.Uint32(e[4:8])
}

// popUsed consumes the next used element (the caller checked pending) and
// returns its chain to the free list. Buffer contents stay intact until the
// descriptors are taken again.
func (r *ring) popUsed() (head uint16, n uint32, err error) {
	id, n := r.peekUsed(0)
	if id >= uint32(r.num) || r.chain[id] == 0 {
		return 0, 0, fmt.Errorf("%w: used element %d names descriptor %d, which is not in flight",
			ErrDeviceBroken, r.lastUsed, id)
	}
	r.lastUsed++
	head = uint16(id)
	tail := head
	for i := uint16(1); i < r.chain[head]; i++ {
		tail = r.next[tail]
	}
	r.numFree += r.chain[head]
	r.chain[head] = 0
	r.next[tail] = r.freeHead
	r.freeHead = head
	return head, n, nil
}

// armCall asks the device to signal the next used element and reports
// whether some arrived already (then the caller must keep consuming rather
// than sleep: the device may have checked before our request landed).
//
// With EVENT_IDX nothing needs disarming afterwards: used_event stays where
// it is while we drain, so the device, which only signals when used.idx
// passes used_event, stays quiet until the next armCall.
func (r *ring) armCall() bool {
	if r.eventIdx {
		r.store32(r.usedEventOff(), uint32(r.lastUsed))
	} else if r.availFlags&availFNoInterrupt != 0 {
		r.availFlags &^= availFNoInterrupt
		r.publish()
	}
	return r.pending() != 0
}

// armCallAfter asks for one signal once k more elements have been used
// (virtqueue_enable_cb_delayed): used to learn that a full TX queue drained.
func (r *ring) armCallAfter(k uint16) {
	if r.eventIdx {
		r.store32(r.usedEventOff(), uint32(r.lastUsed+k-1))
		return
	}
	r.availFlags &^= availFNoInterrupt
	r.publish()
}

// disarmCall suppresses signals while the driver drains. Only the legacy
// flag needs it; see armCall.
func (r *ring) disarmCall() {
	if !r.eventIdx && r.availFlags&availFNoInterrupt == 0 {
		r.availFlags |= availFNoInterrupt
		r.publish()
	}
}
