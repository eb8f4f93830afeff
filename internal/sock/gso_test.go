package sock

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestGSORun: which datagrams one UDP_SEGMENT message takes, from the first
// on: a run of the first one's size and at most one shorter after it,
// within the kernel's segment count and payload limits.
func TestGSORun(t *testing.T) {
	rep := func(n, size int) []int { return slices.Repeat([]int{size}, n) }
	for _, tc := range []struct {
		name  string
		sizes []int
		want  int
	}{
		{"one", []int{1400}, 1},
		{"equal", rep(5, 1400), 5},
		{"shorter last", []int{1400, 1400, 700, 1400}, 3},
		{"longer breaks", []int{1400, 1400, 1500}, 2},
		{"shorter first", []int{700, 1400}, 1},
		{"empty first", []int{0, 0, 0}, 1},
		{"empty breaks", []int{1400, 0, 1400}, 1},
		{"segment limit", rep(GSOMaxSegs+5, 100), GSOMaxSegs},
		{"payload limit", rep(50, 1400), GSOMaxPayload / 1400},
		{"payload limit, shorter last fits", append(rep(46, 1400), 200), 47},
		{"payload exactly the limit", []int{GSOMaxPayload - 10, 10}, 2},
		{"payload a byte over", []int{GSOMaxPayload - 9, 10}, 1},
		{"two large", []int{40000, 40000}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := GSORun(iovecs(tc.sizes)); got != tc.want {
				t.Errorf("GSORun(%v): got %d, want %d", tc.sizes, got, tc.want)
			}
		})
	}
}

// TestGSORefused: only a message that asks for offload is refused, and only
// with the errors that mean the host will not segment.
func TestGSORefused(t *testing.T) {
	b := NewGSOBatch(4)
	b.Fill(iovecs([]int{100, 100, 7}), true)
	gso, single := &b.Msgs[0], &b.Msgs[1]
	for _, tc := range []struct {
		msg  *unix.Mmsghdr
		err  error
		want bool
	}{
		{gso, unix.EIO, true},
		{gso, unix.EINVAL, true},
		{gso, unix.EMSGSIZE, true},
		{gso, unix.ENOPROTOOPT, true},
		{gso, unix.EOPNOTSUPP, true},
		{gso, unix.EAGAIN, false},
		{gso, unix.ECONNREFUSED, false},
		{gso, nil, false},
		{single, unix.EIO, false},
	} {
		if got := GSORefused(tc.msg, tc.err); got != tc.want {
			t.Errorf("GSORefused(message of %d, %v): got %v, want %v", tc.msg.Hdr.Iovlen, tc.err, got, tc.want)
		}
	}
}

// FuzzGSOBatch: for any batch of datagram sizes, the messages cover every
// datagram once and in order, and each one the kernel would take: one
// datagram alone, or a run of its first one's size (the last possibly
// shorter, none empty), at most GSOMaxSegs of them and GSOMaxPayload bytes,
// with a UDP_SEGMENT control message giving that size.
func FuzzGSOBatch(f *testing.F) {
	f.Add([]byte{5, 1, 5, 5, 0, 7, 7})
	f.Add(bytes.Repeat([]byte{255}, 70))
	f.Fuzz(func(t *testing.T, b []byte) {
		const most = 64
		batch := NewGSOBatch(most)
		sz := make([]int, min(len(b), most))
		for i := range sz {
			sz[i] = int(b[i]) * 300 // 0 to 76500 bytes
		}
		iov := iovecs(sz)
		m := batch.Fill(iov, true)
		next := 0
		for _, msg := range batch.Msgs[:m] {
			h := msg.Hdr
			first := int((uintptr(unsafe.Pointer(h.Iov)) - uintptr(unsafe.Pointer(&iov[0]))) / unsafe.Sizeof(iov[0]))
			if first != next {
				t.Fatalf("message starts at datagram %d, want %d", first, next)
			}
			k := int(h.Iovlen)
			next += k
			if k == 1 {
				if h.Controllen != 0 {
					t.Fatalf("single datagram %d carries a control message", first)
				}
				continue
			}
			run := sz[first:next]
			seg, total := run[0], 0
			for i, l := range run {
				total += l
				if l == 0 || l > seg || (l < seg && i != k-1) {
					t.Fatalf("run %v: datagram %d of %d bytes breaks segment size %d", run, i, l, seg)
				}
			}
			if k > GSOMaxSegs || total > GSOMaxPayload {
				t.Fatalf("run %v: %d datagrams, %d bytes: beyond the kernel's limits", run, k, total)
			}
			c := unsafe.Slice(h.Control, h.Controllen)
			ch := (*unix.Cmsghdr)(unsafe.Pointer(h.Control))
			if ch.Level != unix.SOL_UDP || ch.Type != unix.UDP_SEGMENT {
				t.Fatalf("run %v: control message level %d type %d, want %d %d", run, ch.Level, ch.Type, unix.SOL_UDP, unix.UDP_SEGMENT)
			}
			if got := int(binary.NativeEndian.Uint16(c[unix.CmsgLen(0):])); got != seg {
				t.Fatalf("run %v: control message's segment size %d, want %d", run, got, seg)
			}
		}
		if next != len(sz) {
			t.Fatalf("messages cover %d datagrams, want %d", next, len(sz))
		}
		if got := Datagrams(batch.Msgs[:m]); got != len(sz) {
			t.Fatalf("Datagrams: got %d, want %d", got, len(sz))
		}
	})
}

// iovecs returns iovecs of the given lengths (no buffers: Fill and GSORun
// look at lengths only).
func iovecs(sizes []int) []unix.Iovec {
	iov := make([]unix.Iovec, max(len(sizes), 1))
	for i, s := range sizes {
		iov[i].SetLen(s)
	}
	return iov[:len(sizes)]
}
