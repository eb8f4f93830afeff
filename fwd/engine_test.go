package fwd

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/nstest"
)

// driven is an engine driven by the test itself (no Run, no epoll): fake
// host sockets and a fake clock make timeouts and capacity exact.
type driven struct {
	e   *Engine
	sys *fakeSys
	now time.Time
}

func newDriven(t testing.TB, opts Options) *driven {
	return newDrivenParams(t, testParams(), opts)
}

func newDrivenParams(t testing.TB, p *NetParams, opts Options) *driven {
	l := newFakeLink(t)
	e, err := New(&discardLink{l}, p, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	d := &driven{e: e, sys: newFakeSys(), now: e.start}
	e.sys = d.sys
	e.clock = func() time.Time { return d.now }
	return d
}

// cycle does what one loop iteration does with frames from the link.
func (d *driven) cycle(frames ...[]byte) {
	d.e.updateClock()
	d.e.handleFrames(frames)
	d.e.runTimers()
	d.e.flush()
	d.e.reap()
}

// hostAnswers delivers one datagram from the host on the first flow's
// socket, through the UDP translator's receive path.
func (d *driven) hostAnswers() {
	d.sys.replies = 1
	d.e.tr[protoUDP].(*udpTr).receive(d.e, d.e.ft.active[0])
	if d.sys.replies != 0 {
		panic("hostAnswers: the answer was not read")
	}
}

func (d *driven) advance(dt time.Duration) {
	d.now = d.now.Add(dt)
	d.cycle()
}

var (
	ns4 = netip.MustParseAddr("10.0.2.100")
	gw4 = netip.MustParseAddr("10.0.2.2")
	ext = netip.MustParseAddr("192.0.2.7")
	ns6 = netip.MustParseAddr("fd00::100")
	gw6 = netip.MustParseAddr("fe80::1")
)

func TestUDPTimeout(t *testing.T) {
	d := newDriven(t, Options{})
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("q")))
	if got := d.e.FlowCount(); got != 1 {
		t.Fatalf("FlowCount = %d, want 1", got)
	}
	d.advance(29 * time.Second)
	if got := d.e.FlowCount(); got != 1 {
		t.Fatalf("after 29 s FlowCount = %d, want 1", got)
	}
	d.advance(2 * time.Second)
	if got := d.e.FlowCount(); got != 0 {
		t.Fatalf("after 31 s FlowCount = %d, want 0 (30 s timeout)", got)
	}
	if len(d.sys.open) != 0 {
		t.Errorf("%d host sockets left open, want 0", len(d.sys.open))
	}

	// One query and one answer (DNS) is not a stream: 30 s, as pasta
	// and conntrack.
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("q")))
	d.hostAnswers()
	d.advance(29 * time.Second)
	if got := d.e.FlowCount(); got != 1 {
		t.Fatalf("answered query: gone after 29 s, want kept until 30 s")
	}
	d.advance(2 * time.Second)
	if got := d.e.FlowCount(); got != 0 {
		t.Fatalf("answered query: FlowCount = %d after 31 s, want 0 (one answer is no stream)", got)
	}

	// Once answered and either side sent again, the flow is a stream
	// and lives 120 s.
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("q")))
	d.hostAnswers()
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("q")))
	d.advance(100 * time.Second)
	if got := d.e.FlowCount(); got != 1 {
		t.Fatalf("stream gone after 100 s, want kept until 120 s")
	}
	d.advance(21 * time.Second)
	if got := d.e.FlowCount(); got != 0 {
		t.Fatalf("stream FlowCount = %d after 121 s, want 0", got)
	}
}

// TestTableFull: a new flow that finds the table full is dropped, and the
// datagram flow idle longest makes room for the next one; the others keep
// working, and expired flows make room too.
func TestTableFull(t *testing.T) {
	d := newDriven(t, Options{FlowCapacity: 4, DatagramFlows: 4})
	for i := range 4 {
		d.cycle(udpFrame(ns4, ext, uint16(1000+i), 53, []byte("q")))
		d.advance(time.Second)
	}
	d.cycle(udpFrame(ns4, ext, 1004, 53, []byte("q")))
	d.cycle(udpFrame(ns4, ext, 1005, 53, []byte("q")))
	st := d.e.Stats()
	if st.FlowsUDP != 4 || st.Drops[DropTableFull] != 1 || st.Evicted != 1 {
		t.Fatalf("flows %d, table-full drops %d, evicted %d; want 4, 1, 1", st.FlowsUDP, st.Drops[DropTableFull], st.Evicted)
	}
	// The flows still there keep working while the table is full.
	sent, opened := d.sys.sent, st.FlowsOpened
	d.cycle(udpFrame(ns4, ext, 1001, 53, []byte("again")))
	if d.sys.sent != sent+1 || d.e.Stats().FlowsOpened != opened {
		t.Errorf("datagram on an existing flow: sent %d, opened %d; want %d, %d", d.sys.sent-sent, d.e.Stats().FlowsOpened-opened, 1, 0)
	}
	// Once flows expire, new ones fit again.
	d.advance(31 * time.Second)
	d.cycle(udpFrame(ns4, ext, 2000, 53, []byte("q")))
	if got := d.e.FlowCount(); got != 1 {
		t.Errorf("FlowCount after expiry and a new flow = %d, want 1", got)
	}
}

// TestDatagramShare: datagram flows beyond their share of the table
// replace the one idle longest, not the one the namespace just used, and
// nothing is dropped for it.
func TestDatagramShare(t *testing.T) {
	d := newDriven(t, Options{FlowCapacity: 8, DatagramFlows: 3})
	for i := range 3 {
		d.cycle(udpFrame(ns4, ext, uint16(1000+i), 53, []byte("q")))
		d.advance(time.Second)
	}
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("again"))) // 1001 is now idle longest
	for i, port := range []uint16{1003, 1004} {
		d.cycle(udpFrame(ns4, ext, port, 53, []byte("q")))
		st := d.e.Stats()
		if st.FlowsUDP != 3 || st.Evicted != uint64(i+1) || st.Drops[DropTableFull] != 0 {
			t.Fatalf("after flow %d: flows %d, evicted %d, table-full drops %d; want 3, %d, 0", port, st.FlowsUDP, st.Evicted, st.Drops[DropTableFull], i+1)
		}
	}
	// 1000 (used last) and the two new flows are left: 1001 and 1002 went.
	for _, c := range []struct {
		port uint16
		kept bool
	}{{1000, true}, {1003, true}, {1004, true}, {1001, false}} {
		opened := d.e.Stats().FlowsOpened
		d.cycle(udpFrame(ns4, ext, c.port, 53, []byte("x")))
		if got := d.e.Stats().FlowsOpened == opened; got != c.kept {
			t.Errorf("flow %d kept %v, want %v", c.port, got, c.kept)
		}
	}
	for _, o := range []Options{{FlowCapacity: 4, DatagramFlows: 5}, {FlowCapacity: 4, DatagramFlows: -1}, {DatagramFlows: DefaultFlowCapacity + 1}} {
		if _, err := New(newFakeLink(t), testParams(), o); err == nil || !strings.Contains(err.Error(), "datagram flows") {
			t.Errorf("New with FlowCapacity %d, DatagramFlows %d: got error %v, want one about datagram flows", o.FlowCapacity, o.DatagramFlows, err)
		}
	}
	if e, err := New(newFakeLink(t), testParams(), Options{DatagramFlows: DefaultFlowCapacity}); err != nil {
		t.Errorf("New with the default FlowCapacity and DatagramFlows %d: %v", DefaultFlowCapacity, err)
	} else {
		e.Close()
	}
}

// TestEvictionSparesBatch: the flow idle longest is not the one to go when
// the batch that opens a new flow also has a datagram of it, which would
// otherwise be lost: the next one goes.
func TestEvictionSparesBatch(t *testing.T) {
	d := newDriven(t, Options{FlowCapacity: 8, DatagramFlows: 2})
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("q")))
	d.advance(time.Second)
	d.cycle(udpFrame(ns4, ext, 1001, 53, []byte("q")))
	d.advance(time.Second)
	sent := d.sys.sent
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("again")), udpFrame(ns4, ext, 1002, 53, []byte("q")))
	if got, ev := d.sys.sent-sent, d.e.Stats().Evicted; got != 2 || ev != 1 {
		t.Fatalf("a batch with the flow idle longest and a new flow: sent %d, evicted %d; want 2, 1", got, ev)
	}
	opened := d.e.Stats().FlowsOpened
	d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("x")))
	if d.e.Stats().FlowsOpened != opened {
		t.Errorf("flow 1000 was evicted, want flow 1001 gone instead")
	}
}

// TestOutOfDescriptors: when the process runs out of descriptors before
// the datagram flows reach their share, the flow that found none is
// dropped and the datagram flow idle longest goes, so that the next new
// flow gets a socket.
func TestOutOfDescriptors(t *testing.T) {
	d := newDriven(t, Options{FlowCapacity: 16, DatagramFlows: 16})
	d.sys.fdLimit = 3
	for i := range 3 {
		d.cycle(udpFrame(ns4, ext, uint16(1000+i), 53, []byte("q")))
		d.advance(time.Second)
	}
	d.cycle(udpFrame(ns4, ext, 1003, 53, []byte("q")))
	st := d.e.Stats()
	if st.FlowsUDP != 2 || st.Evicted != 1 || st.Drops[DropHostSocket] != 1 {
		t.Fatalf("after the fourth flow: flows %d, evicted %d, host-socket drops %d; want 2, 1, 1", st.FlowsUDP, st.Evicted, st.Drops[DropHostSocket])
	}
	d.cycle(udpFrame(ns4, ext, 1003, 53, []byte("q")))
	if st := d.e.Stats(); st.FlowsUDP != 3 || st.Drops[DropHostSocket] != 1 {
		t.Errorf("the fourth flow again: flows %d, host-socket drops %d; want 3, 1", st.FlowsUDP, st.Drops[DropHostSocket])
	}
}

// TestMalformedDropped feeds one frame of each kind of bad input and checks
// each is counted under its reason, and a good flow in the same batch still
// goes out.
func TestMalformedDropped(t *testing.T) {
	good := udpFrame(ns4, ext, 1000, 53, []byte("ok"))
	mut := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		return f(b)
	}
	cases := []struct {
		name  string
		frame []byte
		why   DropReason
	}{
		{"short ethernet", good[:10], DropTruncated},
		{"vlan", mut(func(b []byte) []byte { b[12], b[13] = 0x81, 0x00; return b }), DropEtherType},
		{"unknown ethertype", mut(func(b []byte) []byte { b[12], b[13] = 0x88, 0xcc; return b }), DropEtherType},
		{"short ip", good[:14+10], DropTruncated},
		{"ip version", mut(func(b []byte) []byte { b[14] = 0x55; return b }), DropBadIP},
		{"total length too big", mut(func(b []byte) []byte { b[16], b[17] = 0xff, 0xff; return b }), DropBadIP},
		{"ip checksum", mut(func(b []byte) []byte { b[24] ^= 1; return b }), DropBadChecksum},
		{"fragment", mut(func(b []byte) []byte {
			b[20] = 0x20 // MF
			b[24], b[25] = 0, 0
			c := ipv4HeaderChecksum(b[14:34])
			b[24], b[25] = byte(c>>8), byte(c)
			return b
		}), DropFragment},
		{"udp checksum", mut(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), DropBadChecksum},
		{"udp length", mut(func(b []byte) []byte { b[38], b[39] = 0xff, 0xff; return b }), DropBadTransport},
		{"tcp to multicast", tcpSegment(netip.AddrPortFrom(ns4, 40000), netip.MustParseAddrPort("224.0.0.251:80"), 1, 0, header.TCPFlagSYN, nil), DropDestination},
		{"echo to broadcast", echoFrame(ns4, netip.MustParseAddr("255.255.255.255"), 7, 1, nil), DropDestination},
		{"echo to multicast", echoFrame(ns6, netip.MustParseAddr("ff02::1"), 7, 1, nil), DropDestination},
		{"udp to interface-local multicast", udpFrame(ns6, netip.MustParseAddr("ff01::fb"), 5353, 5353, []byte("m")), DropDestination},
		{"udp to unspecified", udpFrame(ns4, netip.MustParseAddr("0.0.0.0"), 5000, 5000, []byte("u")), DropDestination},
		{"udp to loopback", udpFrame(ns4, netip.MustParseAddr("127.0.0.1"), 5000, 5000, []byte("u")), DropDestination},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriven(t, Options{})
			d.cycle(tc.frame, good)
			st := d.e.Stats()
			if st.Drops[tc.why] != 1 {
				t.Errorf("drops[%v] = %d, want 1 (all: %v)", tc.why, st.Drops[tc.why], st.Drops)
			}
			if d.sys.sent != 1 || d.e.FlowCount() != 1 {
				t.Errorf("good datagram: sent %d, flows %d; want 1 and 1", d.sys.sent, d.e.FlowCount())
			}
		})
	}
}

func ipv4HeaderChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// TestProtocolSwitches checks --no-udp / --no-icmp drop and count.
func TestProtocolSwitches(t *testing.T) {
	d := newDriven(t, Options{NoUDP: true, NoICMP: true})
	d.cycle(udpFrame(ns4, ext, 1, 2, nil), echoFrame(ns4, ext, 1, 1, nil))
	if st := d.e.Stats(); st.Drops[DropProtocol] != 2 || d.e.FlowCount() != 0 {
		t.Errorf("protocol drops %d flows %d, want 2 and 0", st.Drops[DropProtocol], d.e.FlowCount())
	}
}

// failSys refuses ping sockets the way a restrictive ping_group_range does.
type failSys struct{ *fakeSys }

func (s failSys) socket(d, t, p int) (int, error) {
	if p == unix.IPPROTO_ICMP || p == unix.IPPROTO_ICMPV6 {
		return -1, unix.EACCES
	}
	return s.fakeSys.socket(d, t, p)
}

func TestPingForbiddenWarnsOnce(t *testing.T) {
	var lb nstest.SyncBuffer
	d := newDriven(t, Options{Logger: slog.New(slog.NewTextHandler(&lb, nil))})
	d.e.sys = failSys{d.sys}
	for i := range 5 {
		d.cycle(echoFrame(ns4, gw4, uint16(i), 1, []byte("x")))
	}
	if n := strings.Count(lb.String(), "ping sockets not permitted"); n != 1 {
		t.Errorf("warning logged %d times, want once:\n%s", n, lb.String())
	}
	if st := d.e.Stats(); st.Drops[DropHostSocket] != 5 || d.e.FlowCount() != 0 {
		t.Errorf("host-socket drops %d, flows %d; want 5 and 0", st.Drops[DropHostSocket], d.e.FlowCount())
	}
}

// TestRunStops checks Run returns promptly on cancel and closes every
// flow's socket.
func TestRunStops(t *testing.T) {
	h := newHostNS(t)
	port, _ := h.udpEcho("127.0.0.1:0")
	e, l := newTestEngine(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		h.do(func() { done <- e.Run(ctx) })
	}()
	l.inject(udpFrame(ns4, gw4, 1234, port, []byte("x")))
	l.next(t, 5*time.Second, nil)
	stopRun(t, cancel, done)
	if e.FlowCount() != 0 {
		t.Errorf("FlowCount after Run = %d, want 0", e.FlowCount())
	}
	if err := e.Run(context.Background()); err == nil {
		t.Errorf("second Run returned nil, want an error")
	}
}

// stopRun cancels a running engine and fails t unless its Run, which
// reports on done, returns nil within 5 s.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5 s of cancel")
	}
}

func TestNewErrors(t *testing.T) {
	l := newFakeLink(t)
	p := testParams()
	if _, err := New(nil, p, Options{}); err == nil {
		t.Error("New(nil link) = nil error")
	}
	bad := *p
	bad.OurMAC = net.HardwareAddr{1, 2}
	if _, err := New(l, &bad, Options{}); err == nil {
		t.Error("New with a 2-byte MAC = nil error")
	}
	if _, err := New(l, p, Options{FlowCapacity: -1}); err == nil {
		t.Error("New with capacity -1 = nil error")
	}
}

// BenchmarkUDPFrames measures the namespace-to-host UDP path on an existing
// flow with a real host socket (to a loopback sink), and proves it does not
// allocate.
func BenchmarkUDPFrames(b *testing.B) {
	sink, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := sink.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
		}
	}()
	port := uint16(sink.LocalAddr().(*net.UDPAddr).Port)
	l := newFakeLink(b)
	e, err := New(&discardLink{l}, testParams(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	batch := make([][]byte, 32)
	for i := range batch {
		batch[i] = udpFrame(ns4, gw4, uint16(20000+i%4), port, make([]byte, 1400))
	}
	e.updateClock()
	e.handleFrames(batch) // opens the flows
	b.ReportAllocs()
	b.SetBytes(int64(len(batch) * 1400))
	b.ResetTimer()
	for b.Loop() {
		e.updateClock()
		e.handleFrames(batch)
		e.flush()
	}
	b.StopTimer()
	if e.FlowCount() != 4 {
		b.Fatalf("FlowCount %d, want 4", e.FlowCount())
	}
}

// BenchmarkUDPReplies measures the host-to-namespace path: recvmmsg into
// the transmit queue and frame building, flushed to a discarding link.
func BenchmarkUDPReplies(b *testing.B) {
	l := newFakeLink(b)
	e, err := New(&discardLink{l}, testParams(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	src, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	port := uint16(src.LocalAddr().(*net.UDPAddr).Port)
	e.updateClock()
	e.handleFrames([][]byte{udpFrame(ns4, gw4, 20000, port, []byte("hi"))})
	idx := e.ft.active[0]
	buf := make([]byte, 1400)
	_, from, err := src.ReadFromUDPAddrPort(buf)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(16 * 1400)
	for b.Loop() {
		b.StopTimer()
		for range 16 {
			src.WriteToUDPAddrPort(buf, from)
		}
		b.StartTimer()
		e.updateClock()
		e.sockEvent(idx, e.ft.flows[idx].gen, unix.EPOLLIN)
		e.flush()
	}
}

// TestThreadPin: the loop holds its thread only while the link is
// backlogged (a read stopped at its budget), lets go before it sleeps in
// epoll_wait again, and has let go when Run returns.
func TestThreadPin(t *testing.T) {
	budget := rxBatch * rxBatchesPerCycle
	for _, tc := range []struct {
		name     string
		frames   int
		wantHeld bool
	}{
		{"within the budget", budget - 1, false},
		{"backlog", 3 * budget, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, l := newTestEngine(t, Options{})
			var locks, unlocks atomic.Int32
			e.pin = threadPin{lock: func() { locks.Add(1) }, unlock: func() { unlocks.Add(1) }}
			frames := make([][]byte, tc.frames)
			for i := range frames {
				frames[i] = []byte{1, 2, 3} // too short for Ethernet: dropped
			}
			l.inject(frames...)
			ctx, cancel := context.WithCancel(context.Background())
			done, exited := make(chan error, 1), make(chan struct{})
			go func() { done <- e.Run(ctx); close(exited) }()
			// A failure below stops the loop too, before the engine
			// closes (newTestEngine's cleanup, which runs after this).
			t.Cleanup(func() { cancel(); <-exited })
			deadline := time.Now().Add(5 * time.Second)
			for e.Stats().Drops[DropTruncated] < uint64(tc.frames) {
				if time.Now().After(deadline) {
					t.Fatalf("dropped %d of %d frames within 5s", e.Stats().Drops[DropTruncated], tc.frames)
				}
				time.Sleep(time.Millisecond)
			}
			if tc.wantHeld {
				// Drained: the loop must let go before it sleeps, not
				// only when Run returns.
				for locks.Load() == 0 || unlocks.Load() != locks.Load() {
					if time.Now().After(deadline) {
						t.Fatalf("idle loop: %d locks, %d unlocks, want at least one lock and as many unlocks", locks.Load(), unlocks.Load())
					}
					time.Sleep(time.Millisecond)
				}
			}
			stopRun(t, cancel, done)
			if held := locks.Load() > 0; held != tc.wantHeld {
				t.Errorf("thread held: got %v (%d locks), want %v", held, locks.Load(), tc.wantHeld)
			}
			if locks.Load() != unlocks.Load() {
				t.Errorf("after Run: %d locks, %d unlocks, want as many", locks.Load(), unlocks.Load())
			}
		})
	}
}
