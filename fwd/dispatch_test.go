package fwd

import (
	"testing"
	"time"
)

// FuzzEngineFrame feeds arbitrary frames to the frame-handling entry point
// with the host side faked: it must never panic, never hold more flows than
// the table's capacity, and never leak a host socket once flows expire.
func FuzzEngineFrame(f *testing.F) {
	f.Add(udpFrame(ns4, gw4, 1000, 53, []byte("query")))
	f.Add(udpFrame(ns6, gw6, 1000, 53, []byte("query")))
	f.Add(echoFrame(ns4, gw4, 1, 1, []byte("ping")))
	f.Add(echoFrame(ns6, gw6, 1, 1, []byte("ping")))
	f.Add(udpFrame(ns4, ext, 68, 67, make([]byte, 300)))
	f.Add(udpFrame(ns6, gw6, 546, 547, make([]byte, 60)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06})
	// One engine for every input of a worker: New preallocates its
	// buffers, which would dominate each run. A small MTU keeps them small.
	p := testParams()
	p.MTU = 1500
	d := newDrivenParams(f, p, Options{FlowCapacity: 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		// The frame alone, then split into a batch of pieces with
		// itself, so grouping and several flows per batch are hit.
		d.cycle(b)
		d.cycle(b, b[:len(b)/2], b)
		if n := d.e.FlowCount(); n > 8 {
			t.Fatalf("FlowCount %d above capacity 8", n)
		}
		d.advance(200 * time.Second)
		if n := d.e.FlowCount(); n != 0 {
			t.Fatalf("FlowCount %d after every timeout, want 0", n)
		}
		if len(d.sys.open) != 0 {
			t.Fatalf("%d host sockets leaked", len(d.sys.open))
		}
	})
}
