//go:build linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm)

package vhostkern

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
)

// The two directions on top of ring: buffers, the virtio-net header, batching
// and notification policy. Notifications go through hooks so that tests can
// wire a model device instead of eventfds.

// counters back Stats; atomics because Stats may be called from any goroutine.
type counters struct {
	rxFrames, txFrames   atomic.Uint64
	rxKicks, txKicks     atomic.Uint64
	rxCalls, txCalls     atomic.Uint64
	rxDropped, txFull    atomic.Uint64
	rxPolled, rxArmed    atomic.Uint64
	rxRefills, txBatches atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		RxFrames: c.rxFrames.Load(), TxFrames: c.txFrames.Load(),
		RxKicks: c.rxKicks.Load(), TxKicks: c.txKicks.Load(),
		RxCalls: c.rxCalls.Load(), TxCalls: c.txCalls.Load(),
		RxDropped: c.rxDropped.Load(), TxFull: c.txFull.Load(),
		RxPolled: c.rxPolled.Load(), RxArmed: c.rxArmed.Load(),
		RxRefills: c.rxRefills.Load(), TxBatches: c.txBatches.Load(),
	}
}

// buffers maps descriptor i to the fixed slot i of a buffer area, so that a
// used element's id is enough to find its data.
type buffers struct {
	off    int    // offset of slot 0 in the ring's memory
	stride int    // distance between slots
	size   uint32 // bytes the device may use per slot
}

func (b buffers) slot(r *ring, id uint16) []byte {
	o := b.off + b.stride*int(id)
	return r.mem[o : o+int(b.size)]
}

// areaSize is the memory newQueues lays out: [ring 0][ring 1][RX slots][TX slots].
func areaSize(num, frameSize int) int {
	return 2*layoutRing(num).size + 2*num*alignUp(frameSize, 64)
}

// newQueues lays out both queues and their buffers in mem (areaSize bytes,
// seen by the device at base) for the negotiated features. rx is nil unless
// withRX. The caller sets the notification hooks.
func newQueues(mem []byte, base uint64, num, frameSize int, features uint64, withRX bool,
	start uint16, stats *counters) (*rxQueue, *txQueue, error) {
	if len(mem) < areaSize(num, frameSize) {
		return nil, nil, fmt.Errorf("vhostkern: %d-byte area, want %d", len(mem), areaSize(num, frameSize))
	}
	rl := layoutRing(num).size
	stride := alignUp(frameSize, 64)
	eventIdx := features&FeatureEventIdx != 0
	var rx *rxQueue
	if withRX {
		r, err := newRing(mem, base, 0, num, eventIdx, start)
		if err != nil {
			return nil, nil, err
		}
		rx = &rxQueue{r: r, buf: buffers{off: 2 * rl, stride: stride, size: uint32(frameSize)},
			mergeable: features&FeatureMrgRxbuf != 0, refillAt: uint16(max(1, num/8)), stats: stats}
	}
	r, err := newRing(mem, base, rl, num, eventIdx, start)
	if err != nil {
		return nil, nil, err
	}
	tx := &txQueue{r: r, buf: buffers{off: 2*rl + num*stride, stride: stride, size: uint32(frameSize)},
		maxFrame: min(MaxFrameLen, num*frameSize-vnetHdrLen), stats: stats, ids: make([]uint16, num)}
	return rx, tx, nil
}

// rxQueue is queue 0: the device writes frames into our buffers.
type rxQueue struct {
	r         *ring
	buf       buffers
	mergeable bool   // MRG_RXBUF: a frame may span num_buffers elements
	keepHdr   bool   // Config.PassHdr: frames keep their virtio-net header
	refillAt  uint16 // refill once this many buffers came back
	poll      time.Duration
	kick      func() error           // notify the device of new buffers
	drainCall func() (uint64, error) // consume pending calls, return how many
	stats     *counters
	ids       [1]uint16
}

// refill hands every free descriptor back to the device as one
// device-writable buffer, publishes once and kicks if the device sleeps.
func (q *rxQueue) refill() error {
	added := false
	for q.r.take(q.ids[:]) {
		id := q.ids[0]
		q.r.setDesc(id, q.r.addr(q.buf.off+q.buf.stride*int(id)), q.buf.size, descFWrite, 0)
		q.r.push(id)
		added = true
	}
	if !added {
		return nil
	}
	q.r.publish()
	q.stats.rxRefills.Add(1)
	if q.r.kickNeeded() {
		q.stats.rxKicks.Add(1)
		return q.kick()
	}
	return nil
}

// drain copies up to len(bufs) frames out of the used ring without touching
// notifications. When the next frame's elements are not all published yet,
// waitFor says how many it needs in total.
func (q *rxQueue) drain(bufs [][]byte, sizes []int) (n int, waitFor uint16, err error) {
	r := q.r
	avail := r.pending()
	for n < len(bufs) && avail > 0 {
		id, length := r.peekUsed(0)
		if id >= uint32(r.num) || length > q.buf.size || length < vnetHdrLen {
			return n, 0, fmt.Errorf("%w: RX used element: id %d, %d bytes (buffers hold %d)",
				ErrDeviceBroken, id, length, q.buf.size)
		}
		first := q.buf.slot(r, uint16(id))
		parts := uint16(1)
		if q.mergeable {
			parts = binary.LittleEndian.Uint16(first[numBuffersOff:])
			if parts == 0 || parts > r.num {
				return n, 0, fmt.Errorf("%w: RX frame claims %d buffers", ErrDeviceBroken, parts)
			}
			if parts > avail {
				// The kernel publishes a frame's elements with one index
				// update, so this is a device still writing; retry later.
				waitFor = parts
				break
			}
		}
		dst := bufs[n]
		total, fits := 0, true
		for k := uint16(0); k < parts; k++ {
			head, length, err := r.popUsed()
			if err != nil {
				return n, 0, err
			}
			if length > q.buf.size {
				return n, 0, fmt.Errorf("%w: RX used element of %d bytes", ErrDeviceBroken, length)
			}
			data := q.buf.slot(r, head)[:length]
			if k == 0 && !q.keepHdr {
				data = data[vnetHdrLen:]
			}
			if fits && total+len(data) <= len(dst) {
				copy(dst[total:], data)
			} else {
				fits = false
			}
			total += len(data)
		}
		avail -= parts
		if !fits {
			q.stats.rxDropped.Add(1)
			continue
		}
		sizes[n] = total
		n++
	}
	if r.numFree >= q.refillAt {
		if err := q.refill(); err != nil {
			return n, 0, fmt.Errorf("vhostkern: RX kick: %w", err)
		}
	}
	q.stats.rxFrames.Add(uint64(n))
	return n, waitFor, nil
}

// read is ReadBatch for the vhost RX queue. It fills bufs while frames
// are there, without touching notifications, so a busy reader causes no
// calls at all. When it returns fewer frames than len(bufs) the queue ran
// dry and the call is armed: the call eventfd will become readable when the
// next frame lands. When it fills bufs it arms nothing, and the caller must
// call again (the eventfd is not level-triggered by the ring's contents: a
// caller that waited on it with frames left in the ring would wait for a
// call the device has no reason to send).
//
// Only an empty read polls briefly and clears the eventfd; a short read
// that got frames arms without either, so a stale count costs at most one
// spurious wake-up, never a lost one.
func (q *rxQueue) read(bufs [][]byte, sizes []int) (int, error) {
	if len(sizes) < len(bufs) {
		bufs = bufs[:len(sizes)]
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	q.r.disarmCall()
	n := 0
	for {
		k, waitFor, err := q.drain(bufs[n:], sizes[n:])
		n += k
		if err != nil || n == len(bufs) {
			return n, err
		}
		if waitFor > 0 {
			// Half a frame: ask for the call that completes it, and only
			// go round again once it has.
			q.r.armCallAfter(waitFor)
			q.stats.rxArmed.Add(1)
			if q.r.pending() >= waitFor {
				continue
			}
			return n, nil
		}
		if n == 0 {
			if q.poll > 0 && q.spin() {
				q.stats.rxPolled.Add(1)
				continue
			}
			calls, err := q.drainCall()
			q.stats.rxCalls.Add(calls)
			if err != nil {
				return 0, fmt.Errorf("vhostkern: RX call eventfd: %w", err)
			}
		}
		arrived := q.r.armCall()
		q.stats.rxArmed.Add(1)
		if arrived {
			q.r.disarmCall()
			continue
		}
		return n, nil
	}
}

// spin waits up to q.poll for a used element: a frame that arrives meanwhile
// costs neither a call nor a trip through epoll.
func (q *rxQueue) spin() bool {
	deadline := time.Now().Add(q.poll)
	for i := 0; ; i++ {
		if q.r.pending() != 0 {
			return true
		}
		if i%16 == 15 && time.Now().After(deadline) {
			return false
		}
	}
}

// txQueue is queue 1: the device reads frames from our buffers.
type txQueue struct {
	r         *ring
	buf       buffers
	maxFrame  int  // bytes of Ethernet frame, header excluded
	keepHdr   bool // Config.PassHdr: frames arrive with their header
	kick      func() error
	drainCall func() (uint64, error)
	armed     bool // a call was requested because the queue filled up
	stats     *counters
	ids       []uint16 // scratch for one chain
}

// reclaim returns the descriptors of every frame the device has sent.
func (q *txQueue) reclaim() error {
	for k := q.r.pending(); k > 0; k-- {
		if _, _, err := q.r.popUsed(); err != nil {
			return err
		}
	}
	return nil
}

// write is WriteBatch: each frame goes behind a zeroed virtio-net header
// into a chain of as many slots as it needs; the batch is published with one
// index store and at most one kick.
func (q *txQueue) write(bufs [][]byte) (n int, err error) {
	if q.armed {
		q.armed = false
		calls, err := q.drainCall()
		q.stats.txCalls.Add(calls)
		if err != nil {
			return 0, fmt.Errorf("vhostkern: TX call eventfd: %w", err)
		}
	}
	if err := q.reclaim(); err != nil {
		return 0, err
	}
	size := int(q.buf.size)
	// add: header bytes this queue writes in front of each frame.
	add := vnetHdrLen
	if q.keepHdr {
		add = 0
	}
	for _, f := range bufs {
		if l := len(f) + add - vnetHdrLen; l < MinFrameLen || l > q.maxFrame {
			err = &FrameLenError{Len: l, Max: q.maxFrame}
			break
		}
		total := add + len(f)
		ids := q.ids[:(total+size-1)/size]
		if !q.r.take(ids) {
			break
		}
		for i, id := range ids {
			slot := q.buf.slot(q.r, id)
			c := 0
			if i == 0 && add > 0 {
				clear(slot[:add])
				c = add + copy(slot[add:], f)
				f = f[c-add:]
			} else {
				c = copy(slot, f)
				f = f[c:]
			}
			flags, next := uint16(0), uint16(0)
			if i+1 < len(ids) {
				flags, next = descFNext, ids[i+1]
			}
			q.r.setDesc(id, q.r.addr(q.buf.off+q.buf.stride*int(id)), uint32(c), flags, next)
		}
		q.r.push(ids[0])
		n++
	}
	if n > 0 {
		q.r.publish()
		q.stats.txFrames.Add(uint64(n))
		q.stats.txBatches.Add(1)
		if q.r.kickNeeded() {
			q.stats.txKicks.Add(1)
			if kerr := q.kick(); kerr != nil {
				return n, fmt.Errorf("vhostkern: TX kick: %w", kerr)
			}
		}
	}
	if n < len(bufs) && err == nil {
		// Full: ask for one call when half the queue has been sent, for a
		// caller that waits on WriteFd instead of retrying blindly.
		q.stats.txFull.Add(1)
		q.r.armCallAfter(max(1, (q.r.num-q.r.numFree)/2))
		q.armed = true
	}
	return n, err
}
