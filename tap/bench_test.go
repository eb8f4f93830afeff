package tap_test

import (
	"testing"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/tap"
)

// benchDevice opens an up TAP in a fresh namespace for the calling
// goroutine; the benchmark function runs on a new goroutine per b.N round,
// so every round sets up its own and restores with the returned func.
func benchDevice(tb testing.TB) (*tap.Device, func()) {
	restore := nstest.EnterNetns(tb)
	d := openTap(tb, tap.Config{Name: "gpbench0", MAC: tapMAC})
	run(tb, "ip", "link", "set", d.Name(), "up")
	return d, restore
}

// batch returns n frames of size bytes addressed to a MAC nobody has, so
// the kernel drops them at layer 2 (PACKET_OTHERHOST) after counting them.
func batch(n, size int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		f := make([]byte, size)
		copy(f, peerMAC)
		copy(f[6:], tapMAC)
		f[12], f[13] = 0x88, 0xb5 // local experimental ethertype
		bufs[i] = f
	}
	return bufs
}

func TestBatchAllocs(t *testing.T) {
	d, restore := benchDevice(t)
	defer restore()
	frames := batch(32, 1514)
	rbufs := batch(32, 65536)
	sizes := make([]int, len(rbufs))
	for _, tc := range []struct {
		name string
		fn   func()
	}{
		{"WriteBatch", func() {
			if _, err := d.WriteBatch(frames); err != nil {
				t.Fatal(err)
			}
		}},
		{"ReadBatch", func() {
			if _, err := d.ReadBatch(rbufs, sizes); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		if got := testing.AllocsPerRun(100, tc.fn); got != 0 {
			t.Errorf("%s: got %v allocs per call, want 0", tc.name, got)
		}
	}
}

func BenchmarkWriteBatch(b *testing.B) {
	d, restore := benchDevice(b)
	defer restore()
	frames := batch(32, 1514)
	b.ReportAllocs()
	b.SetBytes(int64(32 * 1514))
	for b.Loop() {
		if n, err := d.WriteBatch(frames); n != len(frames) || err != nil {
			b.Fatalf("WriteBatch: got %d, %v", n, err)
		}
	}
}

// BenchmarkReadBatch measures the empty-queue path the event loop takes
// once per cycle: one read() that returns EAGAIN.
func BenchmarkReadBatch(b *testing.B) {
	d, restore := benchDevice(b)
	defer restore()
	bufs := batch(32, 65536)
	sizes := make([]int, len(bufs))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.ReadBatch(bufs, sizes); err != nil {
			b.Fatal(err)
		}
	}
}
