//go:build linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm)

package vhostkern

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestNeedEvent(t *testing.T) {
	tests := []struct {
		event, new, old uint16
		want            bool
	}{
		{event: 0, new: 1, old: 0, want: true},         // the one entry added is the awaited one
		{event: 1, new: 1, old: 0, want: false},        // awaited entry not reached yet
		{event: 3, new: 5, old: 3, want: true},         // window [3,5) holds 3
		{event: 4, new: 5, old: 3, want: true},         // ... and 4
		{event: 5, new: 5, old: 3, want: false},        // 5 is the next one, not passed
		{event: 2, new: 5, old: 3, want: false},        // passed before this window: no repeat
		{event: 7, new: 7, old: 7, want: false},        // nothing added
		{event: 65535, new: 0, old: 65534, want: true}, // wrap: window [65534, 0) holds 65535
		{event: 65535, new: 2, old: 65533, want: true},
		{event: 0, new: 2, old: 65533, want: true},
		{event: 2, new: 2, old: 65533, want: false},
		{event: 65532, new: 2, old: 65533, want: false},
		{event: 99, new: 100, old: 101, want: true}, // 65535 added: all but index 100 passed
		{event: 100, new: 100, old: 101, want: false},
	}
	for _, tt := range tests {
		if got := needEvent(tt.event, tt.new, tt.old); got != tt.want {
			t.Errorf("needEvent(event %d, new %d, old %d) = %v, want %v", tt.event, tt.new, tt.old, got, tt.want)
		}
	}
}

func TestLayoutRing(t *testing.T) {
	for _, num := range []int{2, 4, 8, 256, 1024, MaxQueueSize} {
		l := layoutRing(num)
		if l.desc != 0 || l.avail != 16*num {
			t.Errorf("num %d: desc %d avail %d, want 0 and %d", num, l.desc, l.avail, 16*num)
		}
		usedEvent := l.avail + 4 + 2*num
		availEvent := l.used + 4 + 8*num
		if usedEvent%4 != 0 || availEvent%4 != 0 || l.used%64 != 0 || l.size%64 != 0 {
			t.Errorf("num %d: used_event at %d, avail_event at %d, used at %d, size %d: want 4-, 4-, 64-, 64-aligned",
				num, usedEvent, availEvent, l.used, l.size)
		}
		if usedEvent+4 > l.used || availEvent+4 > l.size {
			t.Errorf("num %d: event words overlap the next part (used_event %d, used %d, avail_event %d, size %d)",
				num, usedEvent, l.used, availEvent, l.size)
		}
	}
}

func TestNewRingRejects(t *testing.T) {
	mem := make([]byte, 1<<16)
	tests := []struct {
		name     string
		off, num int
	}{
		{"zero size", 0, 0},
		{"one", 0, 1},
		{"not a power of two", 0, 12},
		{"too large", 0, 65536},
		{"misaligned", 8, 16},
		{"past the end", 1<<16 - 64, 16},
	}
	for _, tt := range tests {
		if _, err := newRing(mem, 0, tt.off, tt.num, true, 0); err == nil {
			t.Errorf("%s: newRing(off %d, num %d) succeeded, want an error", tt.name, tt.off, tt.num)
		}
	}
}

func TestRingFreeList(t *testing.T) {
	mem := make([]byte, 4096)
	r, err := newRing(mem, 0, 0, 8, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeDevice(t, r)
	ids := make([]uint16, 3)
	var heads []uint16
	for r.take(ids) {
		heads = append(heads, ids[0])
		for i, id := range ids {
			fl, next := uint16(0), uint16(0)
			if i+1 < len(ids) {
				fl, next = descFNext, ids[i+1]
			}
			r.setDesc(id, uint64(1024+16*int(id)), 16, fl, next)
		}
		r.push(ids[0])
	}
	if len(heads) != 2 || r.numFree != 2 {
		t.Fatalf("took %d chains of 3 from 8, %d left: want 2 chains, 2 left", len(heads), r.numFree)
	}
	r.publish()
	for range heads {
		head, segs := f.chain()
		if len(segs) != 3 {
			t.Errorf("chain at %d has %d descriptors, want 3", head, len(segs))
		}
		f.addUsed(head, 0)
	}
	f.flush()
	for i := 0; r.pending() > 0; i++ {
		h, _, err := r.popUsed()
		if err != nil || h != heads[i] {
			t.Fatalf("popUsed = %d, %v; want %d, nil", h, err, heads[i])
		}
	}
	if r.numFree != 8 {
		t.Errorf("%d free after all chains came back, want 8", r.numFree)
	}
	// Every descriptor must be reachable again.
	all := make([]uint16, 8)
	if !r.take(all) {
		t.Fatal("cannot take all 8 descriptors back")
	}
	seen := map[uint16]bool{}
	for _, id := range all {
		seen[id] = true
	}
	if len(seen) != 8 {
		t.Errorf("free list yields %v, want 8 distinct ids", all)
	}
	if f.err != nil {
		t.Error(f.err)
	}
}

// harness wires both queues to fake devices in ordinary memory.
type harness struct {
	t            *testing.T
	rx           *rxQueue
	tx           *txQueue
	rxDev, txDev *fakeDevice
	stats        counters
	mergeable    bool
}

func newHarness(t *testing.T, num, frameSize int, features uint64, start uint16) *harness {
	t.Helper()
	h := &harness{t: t, mergeable: features&FeatureMrgRxbuf != 0}
	mem := make([]byte, areaSize(num, frameSize))
	var err error
	h.rx, h.tx, err = newQueues(mem, 0x7f00_0000_0000, num, frameSize, features, true, start, &h.stats)
	if err != nil {
		t.Fatal(err)
	}
	h.rxDev, h.txDev = newFakeDevice(t, h.rx.r), newFakeDevice(t, h.tx.r)
	h.rx.kick, h.rx.drainCall = h.rxDev.kick, h.rxDev.drainCall
	h.tx.kick, h.tx.drainCall = h.txDev.kick, h.txDev.drainCall
	h.rx.poll = -1
	if err := h.rx.refill(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, f := range []*fakeDevice{h.rxDev, h.txDev} {
			if f.err != nil {
				t.Errorf("device saw a protocol violation: %v", f.err)
			}
		}
	})
	return h
}

func testFrame(seq, size int) []byte {
	f := make([]byte, size)
	for i := range f {
		f[i] = byte(seq*7 + i)
	}
	if size >= 4 {
		binary.BigEndian.PutUint32(f, uint32(seq))
	}
	return f
}

func makeBufs(n, size int) ([][]byte, []int) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs, make([]int, n)
}

// readAll reads until the queue reports empty and returns copies.
func (h *harness) readAll() [][]byte {
	h.t.Helper()
	bufs, sizes := makeBufs(16, MaxFrameLen)
	var out [][]byte
	for {
		n, err := h.rx.read(bufs, sizes)
		if err != nil {
			h.t.Fatalf("read: %v", err)
		}
		if n == 0 {
			return out
		}
		for i := 0; i < n; i++ {
			out = append(out, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
	}
}

var featureSets = []struct {
	name string
	f    uint64
}{
	{"event_idx+mrg_rxbuf", FeatureVersion1 | FeatureEventIdx | FeatureMrgRxbuf},
	{"event_idx", FeatureVersion1 | FeatureEventIdx},
	{"flags+mrg_rxbuf", FeatureVersion1 | FeatureMrgRxbuf},
}

func TestTXFrames(t *testing.T) {
	for _, fs := range featureSets {
		for _, frameSize := range []int{256, 2048, DefaultFrameSize} {
			t.Run(fs.name, func(t *testing.T) {
				h := newHarness(t, 64, frameSize, fs.f, 0)
				sizes := []int{14, 60, 256 - vnetHdrLen, 256 - vnetHdrLen + 1, 1514, 9014, 65535}
				var frames [][]byte
				for i, s := range sizes {
					if s <= h.tx.maxFrame {
						frames = append(frames, testFrame(i, s))
					}
				}
				n, err := h.tx.write(frames)
				if n != len(frames) || err != nil {
					t.Fatalf("frame size %d: write = %d, %v; want %d, nil", frameSize, n, err, len(frames))
				}
				got := h.txDev.consumeTX(-1)
				if len(got) != len(frames) {
					t.Fatalf("frame size %d: device got %d frames, want %d", frameSize, len(got), len(frames))
				}
				for i := range frames {
					if !bytes.Equal(got[i], frames[i]) {
						t.Errorf("frame size %d: frame %d (%d bytes) arrived as %d different bytes",
							frameSize, i, len(frames[i]), len(got[i]))
					}
				}
				// The chains came back: the whole ring is free again.
				if _, err := h.tx.write(nil); err != nil || h.tx.r.numFree != 64 {
					t.Errorf("after reclaim %d free (err %v), want 64", h.tx.r.numFree, err)
				}
			})
		}
	}
}

// With PassHdr the caller's virtio-net header crosses both queues as it is:
// a GSO frame's header reaches the device, and RX frames keep the header
// the device wrote.
func TestPassHdr(t *testing.T) {
	h := newHarness(t, 64, 2048, FeatureVersion1|FeatureEventIdx|FeatureMrgRxbuf, 0)
	h.rx.keepHdr, h.tx.keepHdr, h.txDev.passHdr = true, true, true
	gso := testFrame(1, vnetHdrLen+MaxFrameLen) // the largest GSO frame
	copy(gso, []byte{1, 4, 54, 0, 0xa8, 0x05, 54, 0, 16, 0, 0, 0})
	small := testFrame(2, vnetHdrLen+60)
	n, err := h.tx.write([][]byte{gso, small})
	if n != 2 || err != nil {
		t.Fatalf("write = %d, %v; want 2, nil", n, err)
	}
	got := h.txDev.consumeTX(-1)
	if len(got) != 2 || !bytes.Equal(got[0], gso) || !bytes.Equal(got[1], small) {
		t.Errorf("device got %d frames, want the 2 written with their headers unchanged", len(got))
	}
	if _, err := h.tx.write([][]byte{make([]byte, vnetHdrLen+13)}); err == nil {
		t.Error("a header with a 13-byte frame behind it was accepted")
	}
	h.txDev.consumeTX(-1)

	frames := [][]byte{testFrame(3, 60), testFrame(4, 5000)}
	if d := h.rxDev.deliverRX(frames, true); d != 2 {
		t.Fatalf("delivered %d, want 2", d)
	}
	rx := h.readAll()
	if len(rx) != 2 {
		t.Fatalf("read %d frames, want 2", len(rx))
	}
	for i, f := range rx {
		if len(f) != vnetHdrLen+len(frames[i]) || !bytes.Equal(f[vnetHdrLen:], frames[i]) {
			t.Errorf("frame %d: got %d bytes, want a %d-byte header and the %d-byte frame", i, len(f), vnetHdrLen, len(frames[i]))
		}
	}
	if nb := binary.LittleEndian.Uint16(rx[1][numBuffersOff:]); nb != 3 {
		t.Errorf("5000-byte frame in 2048-byte buffers: header says num_buffers %d, want 3", nb)
	}
}

func TestTXRejectsBadFrames(t *testing.T) {
	h := newHarness(t, 8, 2048, FeatureVersion1|FeatureEventIdx, 0)
	tests := []struct {
		name string
		len  int
	}{
		{"empty", 0},
		{"shorter than an Ethernet header", 13},
		{"longer than a 64 KiB packet", MaxFrameLen + 1},
		{"longer than the ring holds", 8*2048 - vnetHdrLen + 1},
	}
	for _, tt := range tests {
		frames := [][]byte{testFrame(1, 60), make([]byte, tt.len), testFrame(2, 60)}
		n, err := h.tx.write(frames)
		var fe *FrameLenError
		if n != 1 || !errors.As(err, &fe) || fe.Len != tt.len {
			t.Errorf("%s: write = %d, %v; want 1, *FrameLenError{Len: %d}", tt.name, n, err, tt.len)
		}
		h.txDev.consumeTX(-1)
	}
}

func TestRXFrames(t *testing.T) {
	for _, fs := range featureSets {
		t.Run(fs.name, func(t *testing.T) {
			frameSize := 2048
			if fs.f&FeatureMrgRxbuf == 0 {
				frameSize = DefaultFrameSize // without merging, one buffer must hold any frame
			}
			h := newHarness(t, 32, frameSize, fs.f, 0)
			var frames [][]byte
			for i, s := range []int{14, 60, 2048 - vnetHdrLen, 2048 - vnetHdrLen + 1, 1514, 9014, 30000} {
				frames = append(frames, testFrame(i, s))
			}
			if n := h.rxDev.deliverRX(frames, h.mergeable); n != len(frames) {
				t.Fatalf("device delivered %d frames, want %d", n, len(frames))
			}
			got := h.readAll()
			if len(got) != len(frames) {
				t.Fatalf("read %d frames, want %d", len(got), len(frames))
			}
			for i := range frames {
				if !bytes.Equal(got[i], frames[i]) {
					t.Errorf("frame %d (%d bytes) read as %d different bytes", i, len(frames[i]), len(got[i]))
				}
			}
			if st := h.stats.snapshot(); st.RxFrames != uint64(len(frames)) {
				t.Errorf("RxFrames = %d, want %d", st.RxFrames, len(frames))
			}
		})
	}
}

// A frame longer than the caller's buffer is dropped and counted; the frames
// around it are unaffected.
func TestRXFrameLongerThanBuffer(t *testing.T) {
	h := newHarness(t, 16, 2048, FeatureVersion1|FeatureEventIdx|FeatureMrgRxbuf, 0)
	frames := [][]byte{testFrame(1, 100), testFrame(2, 3000), testFrame(3, 100)}
	h.rxDev.deliverRX(frames, true)
	bufs, sizes := makeBufs(4, 1500)
	n, err := h.rx.read(bufs, sizes)
	if n != 2 || err != nil {
		t.Fatalf("read = %d, %v; want 2, nil", n, err)
	}
	if !bytes.Equal(bufs[0][:sizes[0]], frames[0]) || !bytes.Equal(bufs[1][:sizes[1]], frames[2]) {
		t.Error("frames around the dropped one differ")
	}
	if st := h.stats.snapshot(); st.RxDropped != 1 {
		t.Errorf("RxDropped = %d, want 1", st.RxDropped)
	}
}

// Indices are 16-bit and wrap from 65535 to 0; starting just below the wrap
// makes a short run cross it in both queues, with chains and merged buffers.
func TestWrapAround(t *testing.T) {
	for _, start := range []uint16{65535 - 20, 65535, 0, 32767} {
		for _, fs := range featureSets {
			h := newHarness(t, 8, 512, fs.f|FeatureMrgRxbuf, start)
			seq := 0
			for round := 0; round < 40; round++ {
				var frames [][]byte
				for k := 0; k < 1+round%3; k++ {
					frames = append(frames, testFrame(seq, 60+(seq*97)%1200))
					seq++
				}
				if n, err := h.tx.write(frames); n != len(frames) || err != nil {
					t.Fatalf("start %d %s round %d: write = %d, %v; want %d", start, fs.name, round, n, err, len(frames))
				}
				got := h.txDev.consumeTX(-1)
				if n := h.rxDev.deliverRX(frames, true); n != len(frames) {
					t.Fatalf("start %d %s round %d: device delivered %d of %d", start, fs.name, round, n, len(frames))
				}
				back := h.readAll()
				if len(got) != len(frames) || len(back) != len(frames) {
					t.Fatalf("start %d %s round %d: TX %d, RX %d frames, want %d", start, fs.name, round, len(got), len(back), len(frames))
				}
				for i := range frames {
					if !bytes.Equal(got[i], frames[i]) || !bytes.Equal(back[i], frames[i]) {
						t.Fatalf("start %d %s round %d: frame %d corrupted", start, fs.name, round, i)
					}
				}
			}
			h.tx.write(nil) // reclaim the last round
			if d := h.tx.r.availIdx - start; d < 40 || h.tx.r.lastUsed != h.tx.r.availIdx {
				t.Errorf("start %d %s: TX index moved by %d (avail %d, used %d)", start, fs.name, d, h.tx.r.availIdx, h.tx.r.lastUsed)
			}
		}
	}
}

// A device that stops consuming: WriteBatch returns short without waiting,
// keeps returning 0, and asks for one call once half the queue drained.
func TestTXFullRing(t *testing.T) {
	for _, fs := range featureSets {
		h := newHarness(t, 16, 2048, fs.f, 0)
		// The device's first publication always signals (vhost does too).
		h.tx.write([][]byte{testFrame(0, 60)})
		h.txDev.consumeTX(-1)
		frames := make([][]byte, 40)
		for i := range frames {
			frames[i] = testFrame(i, 100)
		}
		n, err := h.tx.write(frames)
		if n != 16 || err != nil {
			t.Fatalf("%s: write into an idle device = %d, %v; want 16, nil", fs.name, n, err)
		}
		n, err = h.tx.write(frames[16:])
		if n != 0 || err != nil {
			t.Fatalf("%s: write into a full ring = %d, %v; want 0, nil", fs.name, n, err)
		}
		if st := h.stats.snapshot(); st.TxFull != 2 {
			t.Errorf("%s: TxFull = %d, want 2", fs.name, st.TxFull)
		}
		before := h.txDev.total.calls
		h.txDev.consumeTX(4)
		if fs.f&FeatureEventIdx != 0 && h.txDev.total.calls != before {
			t.Errorf("%s: device signalled after 4 of 16 sent, want no call before half", fs.name)
		}
		h.txDev.consumeTX(4)
		if h.txDev.total.calls == before {
			t.Errorf("%s: no call after half the full queue was sent", fs.name)
		}
		n, err = h.tx.write(frames[16:])
		if n != 8 || err != nil {
			t.Fatalf("%s: write after 8 sent = %d, %v; want 8, nil", fs.name, n, err)
		}
		if got := h.txDev.consumeTX(-1); len(got) != 16 || !bytes.Equal(got[15], frames[23]) {
			t.Errorf("%s: device got %d frames after the stall, want 16 ending with frame 23", fs.name, len(got))
		}
	}
}

// Kicks follow the device's sleep, not the frame count: a device that is
// still busy with earlier frames gets none.
func TestTXKickSuppression(t *testing.T) {
	for _, fs := range featureSets {
		h := newHarness(t, 256, 2048, fs.f, 0)
		batch := make([][]byte, 32)
		for i := range batch {
			batch[i] = testFrame(i, 200)
		}
		// The device drains and sleeps after every batch: one kick each.
		for i := 0; i < 10; i++ {
			h.tx.write(batch)
			h.txDev.consumeTX(-1)
		}
		if k := h.txDev.total.kicks; k != 10 {
			t.Errorf("%s: %d kicks for 10 batches to a sleeping device, want 10", fs.name, k)
		}
		// A device that never runs dry needs no kicks after the first.
		h.txDev.total.kicks = 0
		h.tx.write(batch)
		for i := 0; i < 20; i++ {
			h.txDev.consumeTX(16)
			h.tx.write(batch[:16])
		}
		h.txDev.consumeTX(-1)
		if k := h.txDev.total.kicks; k != 1 {
			t.Errorf("%s: %d kicks while the device stayed busy, want 1", fs.name, k)
		}
		if st := h.stats.snapshot(); st.TxKicks != 11 || st.TxFrames != 10*32+32+20*16 {
			t.Errorf("%s: TxKicks %d TxFrames %d, want 11 and %d", fs.name, st.TxKicks, st.TxFrames, 10*32+32+20*16)
		}
	}
}

// Calls only come when the reader ran dry and re-armed, never while it keeps
// up with a stream; and re-arming never loses a wake-up.
func TestRXCallSuppression(t *testing.T) {
	for _, fs := range featureSets {
		h := newHarness(t, 256, 2048, fs.f, 0)
		if got := h.readAll(); len(got) != 0 {
			t.Fatalf("%s: read %d frames from an empty queue", fs.name, len(got))
		}
		bufs, sizes := makeBufs(8, 2048)
		frames := 0
		// The reader stays behind: 50 bursts of 10, reading 8 at a time
		// without ever seeing the queue empty, then drains.
		for i := 0; i < 50; i++ {
			burst := make([][]byte, 10)
			for k := range burst {
				burst[k] = testFrame(frames+k, 100)
			}
			if n := h.rxDev.deliverRX(burst, h.mergeable); n != 10 {
				t.Fatalf("%s: burst %d: delivered %d of 10", fs.name, i, n)
			}
			frames += 10
			if n, err := h.rx.read(bufs, sizes); n != 8 || err != nil {
				t.Fatalf("%s: burst %d: read = %d, %v; want 8", fs.name, i, n, err)
			}
		}
		rest := h.readAll()
		if len(rest) != 50*2 {
			t.Fatalf("%s: %d frames left, want 100", fs.name, len(rest))
		}
		if c := h.rxDev.total.calls; c > 1 {
			t.Errorf("%s: %d calls for 500 frames read without the queue running dry, want at most 1", fs.name, c)
		}
		// Every delivery after an empty read must signal.
		for i := 0; i < 20; i++ {
			before := h.rxDev.total.calls
			h.rxDev.deliverRX([][]byte{testFrame(i, 60)}, h.mergeable)
			if h.rxDev.total.calls != before+1 {
				t.Fatalf("%s: round %d: delivery to an armed, empty queue did not signal", fs.name, i)
			}
			if got := h.readAll(); len(got) != 1 {
				t.Fatalf("%s: round %d: read %d frames, want 1", fs.name, i, len(got))
			}
		}
		st := h.stats.snapshot()
		if st.RxCalls != uint64(h.rxDev.total.calls) {
			t.Errorf("%s: RxCalls = %d, device sent %d", fs.name, st.RxCalls, h.rxDev.total.calls)
		}
		// 256 buffers, refilled once 32 came back: kicks only when the
		// device actually ran short, which never happened here.
		if st.RxRefills > 520/32+2 || st.RxKicks > 1 {
			t.Errorf("%s: %d refills, %d kicks for 520 frames; want <= %d refills, <= 1 kick", fs.name, st.RxRefills, st.RxKicks, 520/32+2)
		}
	}
}

// An RX queue the reader let run empty gets buffers back in one batch and
// exactly one kick.
func TestRXRefillKick(t *testing.T) {
	h := newHarness(t, 16, 2048, FeatureVersion1|FeatureEventIdx|FeatureMrgRxbuf, 0)
	frames := make([][]byte, 20)
	for i := range frames {
		frames[i] = testFrame(i, 100)
	}
	if n := h.rxDev.deliverRX(frames, true); n != 16 {
		t.Fatalf("delivered %d into 16 buffers, want 16", n)
	}
	if got := h.readAll(); len(got) != 16 {
		t.Fatalf("read %d, want 16", len(got))
	}
	if h.rxDev.total.kicks != 2 {
		t.Errorf("%d kicks after filling the ring and refilling a starved device, want 2", h.rxDev.total.kicks)
	}
	if n := h.rxDev.deliverRX(frames[16:], true); n != 4 {
		t.Errorf("delivered %d after the refill, want 4", n)
	}
}

// Polling an empty queue briefly finds a frame that lands meanwhile without
// re-arming; here nothing lands, so the poll gives up and re-arms.
func TestRXPollGivesUp(t *testing.T) {
	h := newHarness(t, 16, 2048, FeatureVersion1|FeatureEventIdx, 0)
	h.rx.poll = DefaultPoll
	bufs, sizes := makeBufs(4, 2048)
	if n, err := h.rx.read(bufs, sizes); n != 0 || err != nil {
		t.Fatalf("read = %d, %v; want 0, nil", n, err)
	}
	if st := h.stats.snapshot(); st.RxArmed != 1 || st.RxPolled != 0 {
		t.Errorf("got RxArmed %d, RxPolled %d; want 1 and 0", st.RxArmed, st.RxPolled)
	}
}

// A device that writes nonsense makes ReadBatch fail, never panic.
func TestRXDeviceBroken(t *testing.T) {
	tests := []struct {
		name       string
		id, length uint32
		numBuffers uint16
	}{
		{"id out of range", 99, 100, 1},
		{"length beyond the buffer", 0, 5000, 1},
		{"shorter than the header", 0, 4, 1},
		{"zero num_buffers", 0, 100, 0},
		{"num_buffers beyond the ring", 0, 100, 17},
	}
	for _, tt := range tests {
		h := newHarness(t, 16, 2048, FeatureVersion1|FeatureEventIdx|FeatureMrgRxbuf, 0)
		binary.LittleEndian.PutUint16(h.rx.buf.slot(h.rx.r, 0)[numBuffersOff:], tt.numBuffers)
		h.rxDev.addUsed(uint16(tt.id), tt.length)
		h.rxDev.flush()
		bufs, sizes := makeBufs(4, 2048)
		if _, err := h.rx.read(bufs, sizes); !errors.Is(err, ErrDeviceBroken) {
			t.Errorf("%s: read error %v, want ErrDeviceBroken", tt.name, err)
		}
	}
	// A descriptor used twice.
	h := newHarness(t, 16, 2048, FeatureVersion1|FeatureEventIdx, 0)
	h.rxDev.deliverRX([][]byte{testFrame(0, 60)}, false)
	h.readAll()
	h.rxDev.addUsed(0, 100)
	h.rxDev.addUsed(0, 100)
	h.rxDev.flush()
	bufs, sizes := makeBufs(4, 2048)
	if _, err := h.rx.read(bufs, sizes); !errors.Is(err, ErrDeviceBroken) {
		t.Errorf("descriptor used twice: read error %v, want ErrDeviceBroken", err)
	}
}

// FuzzRXUsedRing lets a hostile device write arbitrary used elements and
// num_buffers values: reads must fail cleanly or return frames that fit.
func FuzzRXUsedRing(f *testing.F) {
	f.Add([]byte{0, 0, 100, 0, 1, 0})
	f.Add([]byte{1, 0, 200, 7, 3, 0, 2, 0, 10, 0, 0, 0})
	f.Add([]byte{255, 255, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := make([]byte, areaSize(16, 512))
		var st counters
		rx, _, err := newQueues(mem, 0, 16, 512, FeatureVersion1|FeatureEventIdx|FeatureMrgRxbuf, true, 0, &st)
		if err != nil {
			t.Fatal(err)
		}
		dev := newFakeDevice(t, rx.r)
		rx.kick, rx.drainCall, rx.poll = dev.kick, dev.drainCall, -1
		if err := rx.refill(); err != nil {
			t.Fatal(err)
		}
		for len(data) >= 6 && dev.usedIdx-rx.r.lastUsed < 16 {
			id := uint16(data[0]) % 20
			length := uint32(binary.LittleEndian.Uint16(data[2:]))
			if id < 16 {
				binary.LittleEndian.PutUint16(rx.buf.slot(rx.r, id)[numBuffersOff:], binary.LittleEndian.Uint16(data[4:]))
			}
			dev.addUsed(id, length)
			data = data[6:]
		}
		dev.flush()
		bufs, sizes := makeBufs(4, 700)
		for i := 0; i < 8; i++ {
			n, err := rx.read(bufs, sizes)
			for k := 0; k < n; k++ {
				if sizes[k] < 0 || sizes[k] > len(bufs[k]) {
					t.Fatalf("size %d for a %d-byte buffer", sizes[k], len(bufs[k]))
				}
			}
			if err != nil || n == 0 {
				return
			}
		}
	})
}

// TestRXEventDrivenReader drives the RX queue the way the engine does: it
// reads only when the call eventfd holds a signal or its last read filled
// every buffer (fwd.Link's contract), at most a few batches per wake-up, and
// otherwise sleeps; the device delivers bursts at random and, once out of
// buffers, waits for a kick as vhost's handle_rx does. Whatever the
// interleaving, no frame may be left in the ring while both sides sleep.
// (A reader that stops after a short read that has not armed the call
// stalls: the ring holds frames and the eventfd stays clear.)
func TestRXEventDrivenReader(t *testing.T) {
	for _, fs := range featureSets {
		for seed := uint64(1); seed <= 20; seed++ {
			rng := rand.New(rand.NewPCG(seed, 7))
			num := []int{8, 16, 64}[seed%3]
			h := newHarness(t, num, 2048, fs.f, uint16(65536-num*int(seed%4)))
			bufs, sizes := makeBufs(8, 8192)
			maxLen := 1500
			if h.mergeable {
				maxLen = 5000
			}
			var sent, got [][]byte
			delivered := 0
			more, starved, kicksAtStarve := false, false, 0
			read := func() {
				for range 2 { // the engine's per-cycle budget, scaled down
					n, err := h.rx.read(bufs, sizes)
					if err != nil {
						t.Fatalf("%s seed %d: read: %v", fs.name, seed, err)
					}
					for i := range n {
						got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
					}
					if more = n == len(bufs); !more {
						return
					}
				}
			}
			// canDeliver: frames wait and the device is not out of
			// buffers, or a kick since it ran out woke it.
			canDeliver := func() bool {
				if starved && h.rxDev.total.kicks > kicksAtStarve {
					starved = false
				}
				return delivered < len(sent) && !starved
			}
			deliver := func() {
				delivered += h.rxDev.deliverRX(sent[delivered:], h.mergeable)
				if delivered < len(sent) {
					starved, kicksAtStarve = true, h.rxDev.total.kicks
				}
			}
			// The device also runs between the reader's look at an empty
			// ring and its re-arming store, where a real kernel publishes
			// and checks the old used_event concurrently.
			h.rx.drainCall = func() (uint64, error) {
				c, err := h.rxDev.drainCall()
				if canDeliver() && rng.IntN(2) == 0 {
					deliver()
				}
				return c, err
			}
			for step := 0; ; step++ {
				if step > 100000 {
					t.Fatalf("%s seed %d: no progress", fs.name, seed)
				}
				var can []int
				if step < 400 {
					can = append(can, 0)
				}
				if canDeliver() {
					can = append(can, 1)
				}
				if more || h.rxDev.calls > 0 {
					can = append(can, 2)
				}
				if len(can) == 0 {
					if delivered < len(sent) || h.rx.r.pending() > 0 {
						t.Fatalf("%s seed %d step %d: stalled: %d frames in the ring, %d waiting for buffers, reader asleep with no call pending",
							fs.name, seed, step, h.rx.r.pending(), len(sent)-delivered)
					}
					break
				}
				switch can[rng.IntN(len(can))] {
				case 0:
					for range 1 + rng.IntN(12) {
						sent = append(sent, testFrame(len(sent), 60+rng.IntN(maxLen-60)))
					}
				case 1:
					deliver()
				case 2:
					read()
				}
			}
			if len(got) != len(sent) {
				t.Fatalf("%s seed %d: read %d frames, sent %d", fs.name, seed, len(got), len(sent))
			}
			// With EVENT_IDX a signal answers a request: the ring's
			// initial used_event, or one of the reader's.
			if st := h.stats.snapshot(); fs.f&FeatureEventIdx != 0 && st.RxCalls > st.RxArmed+1 {
				t.Errorf("%s seed %d: got %d calls for %d requests, want at most one each (plus the initial one)", fs.name, seed, st.RxCalls, st.RxArmed)
			}
			for i := range sent {
				if !bytes.Equal(got[i], sent[i]) {
					t.Fatalf("%s seed %d: frame %d differs", fs.name, seed, i)
				}
			}
		}
	}
}
