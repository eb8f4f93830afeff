package portfwd

import (
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/epoll"
)

// TestNSSockPool: pooled sockets connect without the namespace thread (here
// the "namespace" is the test's own), an empty pool says so and refills in
// the background, what dial cannot serve falls through, Close releases all.
func TestNSSockPool(t *testing.T) {
	// do is the "namespace thread"; once gate is set, refills wait for
	// it, so the test sees the pool empty deterministically.
	calls := 0
	var gate chan struct{}
	do := func(fn func() error) error {
		if gate != nil {
			<-gate
		}
		calls++
		return fn()
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("x"))
			c.Close()
		}
	}()
	dst := netip.MustParseAddrPort(l.Addr().String())

	p := newNSSockPool(do, nil, true, false)
	if calls != 1 || len(p.fam[0]) != nsPoolSize || p.fam[1] != nil {
		t.Fatalf("after start: %d fills, %d IPv4 sockets, IPv6 pool %v; want 1, %d, none", calls, len(p.fam[0]), p.fam[1], nsPoolSize)
	}
	fd, ok, err := p.dial(dst)
	if !ok || err != nil {
		t.Fatalf("dial: ok %v, err %v; want a pooled socket", ok, err)
	}
	// The connection is real: the server's byte arrives.
	var b [1]byte
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := unix.Read(fd, b[:])
		if n == 1 && b[0] == 'x' {
			break
		}
		if err != unix.EAGAIN || time.Now().After(deadline) {
			t.Fatalf("read on the pooled connection: %d, %v; want the server's byte", n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	unix.Close(fd)

	for _, d := range []netip.AddrPort{
		netip.MustParseAddrPort("[::1]:80"),        // no IPv6 pool
		netip.MustParseAddrPort("[fe80::1%lo]:80"), // a zone names a namespace interface
	} {
		if _, ok, _ := p.dial(d); ok {
			t.Errorf("dial %s: served from the pool, want a fall-through", d)
		}
	}

	// Empty the pool while its refills wait at the gate.
	gate = make(chan struct{})
	for len(p.fam[0]) > 0 {
		fd, ok, err := p.dial(dst)
		if !ok || err != nil {
			t.Fatalf("dial: ok %v, err %v", ok, err)
		}
		unix.Close(fd)
	}
	if _, ok, _ := p.dial(dst); ok {
		t.Error("dial on an empty pool: got a socket, want a fall-through")
	}
	close(gate) // the refill the pool asked for goes ahead
	for deadline := time.Now().Add(5 * time.Second); len(p.fam[0]) < nsPoolSize; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("refill: %d sockets after 5 s, want %d", len(p.fam[0]), nsPoolSize)
		}
	}
	p.Close()
	if len(p.fam[0]) != 0 {
		t.Errorf("after Close: %d sockets left", len(p.fam[0]))
	}
}

// TestNSSockPoolWantsProcessor: a refill asked for keeps the splice loop
// from holding the processor until it is made (package epoll), and one
// still pending at Close is given up.
func TestNSSockPoolWantsProcessor(t *testing.T) {
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	gate := make(chan struct{})
	first := true
	do := func(fn func() error) error {
		if !first {
			<-gate
		}
		first = false
		return fn()
	}
	p := newNSSockPool(do, nil, true, false)
	if !epoll.MayHold() {
		t.Fatal("MayHold before any refill: got false, want true")
	}
	p.kick()
	if epoll.MayHold() {
		t.Error("MayHold with a refill asked for: got true, want false")
	}
	close(gate)
	deadline := time.Now().Add(5 * time.Second)
	for !epoll.MayHold() {
		if time.Now().After(deadline) {
			t.Fatal("MayHold 5s after the refill was let through: got false, want true")
		}
		time.Sleep(time.Millisecond)
	}
	p.Close()

	// A refill asked for after the refiller stopped: Close gives it up.
	p = newNSSockPool(func(fn func() error) error { return fn() }, nil, true, false)
	close(p.stop)
	p.wg.Wait()
	p.stop = make(chan struct{})
	p.kick()
	p.Close()
	if !epoll.MayHold() {
		t.Error("MayHold after Close with a refill pending: got false, want true")
	}
}
