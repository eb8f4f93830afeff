//go:build linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm)

package vhostkern

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"unsafe"
)

// fakeDevice models the kernel's side of one split virtqueue the way vhost
// drives it, so the driver logic can be tested without /dev/vhost-net:
//
//   - it consumes avail entries from its own last_avail index, walking each
//     descriptor chain through the "guest address" translation;
//   - it writes used elements and publishes used.idx once per batch;
//   - it signals (a "call") when vring_need_event(used_event, new, old) says
//     so, or, without EVENT_IDX, unless the driver set NO_INTERRUPT; the
//     very first publication always signals, as in vhost_notify;
//   - when it runs dry it re-enables kicks (avail_event = last_avail, or
//     clears NO_NOTIFY) and re-checks, like vhost_enable_notify, and while
//     it works it suppresses them.
type fakeDevice struct {
	t        testing.TB
	mem      []byte
	base     uint64
	num      uint16
	desc     int
	avail    int
	used     int
	eventIdx bool
	passHdr  bool // TX headers come from the driver's caller: not checked

	lastAvail      uint16
	usedIdx        uint16
	usedFlags      uint16
	signalledUsed  uint16
	signalledValid bool

	calls uint64 // signals not yet collected by drainCall
	total struct{ calls, kicks int }
	err   error // first protocol violation seen
}

func newFakeDevice(t testing.TB, r *ring) *fakeDevice {
	f := &fakeDevice{t: t, mem: r.mem, base: r.base, num: r.num, desc: r.desc, avail: r.avail,
		used: r.used, eventIdx: r.eventIdx}
	f.lastAvail = uint16(f.load32(f.avail) >> 16)
	f.usedIdx = uint16(f.load32(f.used) >> 16)
	return f
}

func (f *fakeDevice) load32(off int) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&f.mem[off])))
}
func (f *fakeDevice) store32(off int, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&f.mem[off])), v)
}

func (f *fakeDevice) fail(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf(format, args...)
	}
}

// kick is the driver's notification hook.
func (f *fakeDevice) kick() error { f.total.kicks++; return nil }

// drainCall is the driver's "read the call eventfd" hook.
func (f *fakeDevice) drainCall() (uint64, error) {
	c := f.calls
	f.calls = 0
	return c, nil
}

func (f *fakeDevice) availPending() uint16 {
	return uint16(f.load32(f.avail)>>16) - f.lastAvail
}

type fakeSeg struct {
	buf   []byte
	write bool
}

// chain reads the descriptor chain of the next avail entry and consumes it.
func (f *fakeDevice) chain() (head uint16, segs []fakeSeg) {
	slot := f.avail + 4 + 2*int(f.lastAvail&(f.num-1))
	head = binary.LittleEndian.Uint16(f.mem[slot:])
	f.lastAvail++
	if head >= f.num {
		f.fail("avail entry names descriptor %d of %d", head, f.num)
		return head, nil
	}
	id := head
	for n := 0; ; n++ {
		if n >= int(f.num) {
			f.fail("descriptor chain from %d loops", head)
			return head, nil
		}
		d := f.mem[f.desc+16*int(id):]
		addr := binary.LittleEndian.Uint64(d[0:])
		ln := binary.LittleEndian.Uint32(d[8:])
		flags := binary.LittleEndian.Uint16(d[12:])
		next := binary.LittleEndian.Uint16(d[14:])
		off := addr - f.base
		if addr < f.base || off+uint64(ln) > uint64(len(f.mem)) {
			f.fail("descriptor %d: address %#x+%d outside memory", id, addr, ln)
			return head, nil
		}
		segs = append(segs, fakeSeg{buf: f.mem[off : off+uint64(ln)], write: flags&descFWrite != 0})
		if flags&descFNext == 0 {
			return head, segs
		}
		if next >= f.num {
			f.fail("descriptor %d: next %d out of range", id, next)
			return head, nil
		}
		id = next
	}
}

func (f *fakeDevice) addUsed(id uint16, n uint32) {
	e := f.mem[f.used+4+8*int(f.usedIdx&(f.num-1)):]
	binary.LittleEndian.PutUint32(e[0:], uint32(id))
	binary.LittleEndian.PutUint32(e[4:], n)
	f.usedIdx++
}

// flush publishes used.idx and signals if the driver asked for it.
func (f *fakeDevice) flush() {
	f.store32(f.used, uint32(f.usedIdx)<<16|uint32(f.usedFlags))
	if f.eventIdx {
		old, valid := f.signalledUsed, f.signalledValid
		f.signalledUsed, f.signalledValid = f.usedIdx, true
		ev := uint16(f.load32(f.avail + 4 + 2*int(f.num)))
		if valid && !needEvent(ev, f.usedIdx, old) {
			return
		}
	} else if uint16(f.load32(f.avail))&availFNoInterrupt != 0 {
		return
	}
	f.calls++
	f.total.calls++
}

// sleep re-enables kicks and reports whether work arrived meanwhile.
func (f *fakeDevice) sleep() bool {
	if f.eventIdx {
		f.store32(f.used+4+8*int(f.num), uint32(f.lastAvail))
	} else {
		f.usedFlags &^= usedFNoNotify
		f.store32(f.used, uint32(f.usedIdx)<<16|uint32(f.usedFlags))
	}
	return f.availPending() != 0
}

// wake suppresses kicks while the device works.
func (f *fakeDevice) wake() {
	if !f.eventIdx {
		f.usedFlags |= usedFNoNotify
		f.store32(f.used, uint32(f.usedIdx)<<16|uint32(f.usedFlags))
	}
}

// consumeTX takes up to max frames (all with max < 0) from a TX queue, as
// vhost's handle_tx does: headers checked and stripped, used length 0, one
// publication per batch, and kicks re-enabled when the ring is empty.
func (f *fakeDevice) consumeTX(max int) [][]byte {
	var out [][]byte
	f.wake()
	for max < 0 || len(out) < max {
		if f.availPending() == 0 {
			if !f.sleep() {
				break
			}
			f.wake()
		}
		head, segs := f.chain()
		var frame []byte
		for _, s := range segs {
			if s.write {
				f.fail("TX descriptor is device-writable")
			}
			frame = append(frame, s.buf...)
		}
		if len(frame) < vnetHdrLen {
			f.fail("TX chain of %d bytes has no header", len(frame))
		} else if f.passHdr {
			out = append(out, frame)
		} else {
			for i, b := range frame[:vnetHdrLen] {
				if b != 0 {
					f.fail("TX header byte %d = %#x, want 0", i, b)
				}
			}
			out = append(out, frame[vnetHdrLen:])
		}
		f.addUsed(head, 0)
	}
	if len(out) > 0 {
		f.flush()
	}
	return out
}

// deliverRX writes frames into RX buffers like handle_rx with MRG_RXBUF (or
// one buffer per frame without it), stopping when buffers run out; it
// returns how many frames it delivered. One publication per call.
func (f *fakeDevice) deliverRX(frames [][]byte, mergeable bool) int {
	n := 0
	f.wake()
	for _, fr := range frames {
		need := vnetHdrLen + len(fr)
		// Peek how many heads this frame needs before taking any, as
		// vhost's get_rx_bufs does (it rolls back when short).
		save := f.lastAvail
		type part struct {
			head uint16
			segs []fakeSeg
		}
		var parts []part
		have := 0
		for have < need {
			if f.availPending() == 0 && f.sleep() {
				f.wake()
			}
			if f.availPending() == 0 {
				break
			}
			head, segs := f.chain()
			parts = append(parts, part{head, segs})
			for _, s := range segs {
				if !s.write {
					f.fail("RX descriptor is device-readable")
				}
				have += len(s.buf)
			}
			if !mergeable {
				break
			}
		}
		if have < need {
			if !mergeable && len(parts) == 1 {
				f.fail("RX buffer of %d bytes too small for a %d-byte frame", have, need)
			}
			f.lastAvail = save // wait for more buffers
			break
		}
		data := make([]byte, need)
		binary.LittleEndian.PutUint16(data[numBuffersOff:], uint16(len(parts)))
		copy(data[vnetHdrLen:], fr)
		for _, p := range parts {
			written := 0
			for _, s := range p.segs {
				written += copy(s.buf, data[written:])
			}
			data = data[written:]
			f.addUsed(p.head, uint32(written))
		}
		n++
	}
	if n > 0 {
		f.flush()
	}
	return n
}
