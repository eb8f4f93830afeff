package fwd

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/nstest"
)

// fakeNeighbours is a NeighbourSource the test feeds: each Read delivers
// the calls queued since the last one; an eventfd makes it readable.
type fakeNeighbours struct {
	mu    sync.Mutex
	efd   int
	queue []func(h NeighbourHandler)
	err   error // Read's error, once the queue is delivered
	reads int
}

func newFakeNeighbours(t testing.TB) *fakeNeighbours {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	return &fakeNeighbours{efd: efd}
}

func (f *fakeNeighbours) Fd() int { return f.efd }

func (f *fakeNeighbours) Read(h NeighbourHandler) error {
	f.mu.Lock()
	q, err := f.queue, f.err
	f.queue = nil
	f.reads++
	f.mu.Unlock()
	var b [8]byte
	unix.Read(f.efd, b[:])
	for _, c := range q {
		c(h)
	}
	return err
}

// push queues calls and makes the source readable.
func (f *fakeNeighbours) push(calls ...func(h NeighbourHandler)) {
	f.mu.Lock()
	f.queue = append(f.queue, calls...)
	f.mu.Unlock()
	one := [8]byte{1}
	unix.Write(f.efd, one[:])
}

func set(a string, mac net.HardwareAddr) func(h NeighbourHandler) {
	return func(h NeighbourHandler) { h.NeighbourSet(netip.MustParseAddr(a), [6]byte(mac)) }
}
func gone(a string) func(h NeighbourHandler) {
	return func(h NeighbourHandler) { h.NeighbourGone(netip.MustParseAddr(a)) }
}
func dumpBegin(h NeighbourHandler) { h.NeighbourDumpBegin() }
func dumpEnd(h NeighbourHandler)   { h.NeighbourDumpEnd(true) }

var (
	lanMAC  = net.HardwareAddr{0x02, 0x4c, 0x41, 0x4e, 0, 0x07}
	lanMAC2 = net.HardwareAddr{0x02, 0x4c, 0x41, 0x4e, 0, 0x08}
	gwMAC   = net.HardwareAddr{0x02, 0x67, 0x77, 0, 0, 0x01}
)

// neighEngine is an engine, not running, whose mirror follows a fake
// source; the test drives it with mirror and frames.
type neighEngine struct {
	e   *Engine
	l   *fakeLink
	src *fakeNeighbours
}

func newNeighEngine(t *testing.T, opts Options) *neighEngine {
	t.Helper()
	n := &neighEngine{src: newFakeNeighbours(t)}
	opts.Neighbours = n.src
	n.e, n.l = newTestEngine(t, opts)
	n.e.updateClock()
	return n
}

// mirror delivers calls to the engine as one reading of the source.
func (n *neighEngine) mirror(calls ...func(h NeighbourHandler)) {
	n.src.push(calls...)
	n.e.readNeighbours()
	n.e.flush()
}

// frames hands the engine frames from the namespace and returns what it
// answers.
func (n *neighEngine) frames(t *testing.T, frames ...[]byte) [][]byte {
	n.e.handleFrames(frames)
	n.e.flush()
	return n.out()
}

// out is what the engine wrote so far.
func (n *neighEngine) out() [][]byte {
	var got [][]byte
	for {
		select {
		case f := <-n.l.out:
			got = append(got, f)
		default:
			return got
		}
	}
}

// arpAnswer asks the engine for addr's MAC address over ARP and returns
// the answer's (sender hardware address, Ethernet source).
func (n *neighEngine) arpAnswer(t *testing.T, addr string) (sha, src net.HardwareAddr) {
	t.Helper()
	out := n.frames(t, arpRequest(header.ARPRequest, "10.0.2.100", addr))
	if len(out) != 1 {
		t.Fatalf("ARP for %s: got %d frames, want an answer", addr, len(out))
	}
	a := header.ARP(header.Ethernet(out[0]).Payload())
	if !a.IsValid() || a.Op() != header.ARPReply || a.SenderIP() != netip.MustParseAddr(addr) {
		t.Fatalf("ARP for %s: got %x, want a reply", addr, out[0])
	}
	return net.HardwareAddr(slices.Clone(a.SenderMAC())), net.HardwareAddr(slices.Clone(header.Ethernet(out[0]).Src()))
}

// ndpAnswer asks for addr's MAC address over NDP and returns the
// advertisement's target link-layer address and Ethernet source.
func (n *neighEngine) ndpAnswer(t *testing.T, addr string) (tll, src net.HardwareAddr) {
	t.Helper()
	out := n.frames(t, icmp6Frame("fd00::100", "ff02::1:ff00:7", 255, nsMessage(addr, true)))
	if len(out) != 1 {
		t.Fatalf("NS for %s: got %d frames, want an advertisement", addr, len(out))
	}
	return naTarget(t, out[0], addr), net.HardwareAddr(slices.Clone(header.Ethernet(out[0]).Src()))
}

// naTarget checks that fr is a neighbour advertisement for addr and
// returns its target link-layer address.
func naTarget(t *testing.T, fr []byte, addr string) net.HardwareAddr {
	t.Helper()
	ip, icmp, ok := parseICMPv6(fr)
	if !ok || icmp.Type() != header.ICMPv6NeighborAdvertisement || ip.HopLimit() != 255 {
		t.Fatalf("got %x, want a neighbour advertisement", fr)
	}
	na := header.NDPNeighbor(icmp)
	if na.Target() != netip.MustParseAddr(addr) {
		t.Fatalf("advertisement for %v, want %s", na.Target(), addr)
	}
	it := header.NDPOptionIter{Options: na.Options()}
	for typ, data, ok := it.Next(); ok; typ, data, ok = it.Next() {
		if typ == header.NDPOptionTargetLinkAddr && len(data) >= 6 {
			return net.HardwareAddr(slices.Clone(data[:6]))
		}
	}
	t.Fatalf("advertisement without a target link-layer address: %x", fr)
	return nil
}

// TestNeighbourMirror: ARP and NDP answers for the host's neighbours carry
// their own MAC addresses (passt 3c46901..7917155), other addresses ours;
// a neighbour that goes away is answered for with ours again.
func TestNeighbourMirror(t *testing.T) {
	n := newNeighEngine(t, Options{})
	n.mirror(dumpBegin, set("10.0.2.7", lanMAC), set("fd00::7", lanMAC2), dumpEnd)
	for _, c := range []struct {
		addr string
		want net.HardwareAddr
	}{
		{"10.0.2.7", lanMAC},
		{"10.0.2.8", ourMAC},
		{"10.0.2.2", ourMAC}, // the gateway: host loopback
		{"203.0.113.9", ourMAC},
	} {
		if sha, src := n.arpAnswer(t, c.addr); !bytes.Equal(sha, c.want) || !bytes.Equal(src, c.want) {
			t.Errorf("ARP for %s: got %v from %v, want %v from it", c.addr, sha, src, c.want)
		}
	}
	for _, c := range []struct {
		addr string
		want net.HardwareAddr
	}{
		{"fd00::7", lanMAC2},
		{"fd00::8", ourMAC},
		{"2001:db8::9", ourMAC},
	} {
		if tll, src := n.ndpAnswer(t, c.addr); !bytes.Equal(tll, c.want) || !bytes.Equal(src, c.want) {
			t.Errorf("NS for %s: got %v from %v, want %v from it", c.addr, tll, src, c.want)
		}
	}
	n.mirror(gone("10.0.2.7"), gone("fd00::7"))
	if sha, _ := n.arpAnswer(t, "10.0.2.7"); !bytes.Equal(sha, ourMAC) {
		t.Errorf("ARP for a neighbour gone: got %v, want ours %v", sha, ourMAC)
	}
	if tll, _ := n.ndpAnswer(t, "fd00::7"); !bytes.Equal(tll, ourMAC) {
		t.Errorf("NS for a neighbour gone: got %v, want ours %v", tll, ourMAC)
	}
}

// TestNeighbourGateway: without --no-map-gw the gateway is host loopback
// and keeps our MAC address whatever the host's table says; with it, the
// gateway is the host's router, mirrored, and stands for every address
// the host has no entry for, as a router on a real link would.
func TestNeighbourGateway(t *testing.T) {
	for _, c := range []struct {
		noMapGW          bool
		gateway, unknown net.HardwareAddr
	}{
		{false, ourMAC, ourMAC},
		{true, gwMAC, gwMAC},
	} {
		n := newNeighEngine(t, Options{NoMapGW: c.noMapGW})
		n.mirror(dumpBegin, set("10.0.2.2", gwMAC), set("10.0.2.7", lanMAC), dumpEnd)
		if sha, _ := n.arpAnswer(t, "10.0.2.2"); !bytes.Equal(sha, c.gateway) {
			t.Errorf("no-map-gw %v: ARP for the gateway: got %v, want %v", c.noMapGW, sha, c.gateway)
		}
		if sha, _ := n.arpAnswer(t, "10.0.2.9"); !bytes.Equal(sha, c.unknown) {
			t.Errorf("no-map-gw %v: ARP for an address the host has no entry for: got %v, want %v", c.noMapGW, sha, c.unknown)
		}
		if sha, _ := n.arpAnswer(t, "10.0.2.7"); !bytes.Equal(sha, lanMAC) {
			t.Errorf("no-map-gw %v: ARP for a neighbour: got %v, want %v", c.noMapGW, sha, lanMAC)
		}
	}
}

// TestNeighbourBlocked: addresses the engine answers for itself keep our
// MAC address even when the host has a neighbour of that address: the
// mapped host loopback and guest address, the --dns-forward address, the
// namespace's own address (or what the host's copy of it maps to), and
// our link-local address.
func TestNeighbourBlocked(t *testing.T) {
	a := netip.MustParseAddr
	n := newNeighEngine(t, Options{MapGuestAddr4: a("10.0.2.9"), DNSForward4: a("10.0.2.3"), DNSHost4: a("192.0.2.53")})
	n.mirror(dumpBegin, set("10.0.2.2", gwMAC), set("10.0.2.3", lanMAC), set("10.0.2.9", lanMAC),
		set("10.0.2.100", lanMAC), set("127.0.0.1", lanMAC), set("fe80::1", lanMAC), dumpEnd)
	if len(n.e.neigh.ents) != 0 {
		t.Errorf("mirrored %d entries, want none", len(n.e.neigh.ents))
	}
	for _, addr := range []string{"10.0.2.2", "10.0.2.3", "10.0.2.9"} {
		if sha, _ := n.arpAnswer(t, addr); !bytes.Equal(sha, ourMAC) {
			t.Errorf("ARP for %s: got %v, want ours %v", addr, sha, ourMAC)
		}
	}
	if tll, _ := n.ndpAnswer(t, "fe80::1"); !bytes.Equal(tll, ourMAC) {
		t.Errorf("NS for our link-local address: got %v, want ours %v", tll, ourMAC)
	}
}

// TestNeighbourAnnounce: once the first dump is over and the namespace has
// spoken, a neighbour whose MAC address the namespace may hold wrong (ours
// before the host learnt it, its old one after it changed) is announced:
// an ARP announcement or an unsolicited neighbour advertisement (Override,
// not Solicited, to all nodes). A neighbour the dump brings, one that
// goes away, and one whose address did not change are not.
func TestNeighbourAnnounce(t *testing.T) {
	n := newNeighEngine(t, Options{})
	n.mirror(dumpBegin, set("10.0.2.7", lanMAC))
	if got := n.out(); len(got) != 0 {
		t.Fatalf("during the first dump: got %d frames, want none", len(got))
	}
	n.mirror(dumpEnd, set("10.0.2.8", lanMAC))
	if got := n.out(); len(got) != 0 {
		t.Fatalf("before the namespace spoke: got %d frames, want none", len(got))
	}
	n.arpAnswer(t, "10.0.2.1") // the namespace speaks: its MAC address is known
	n.mirror(set("10.0.2.9", lanMAC), set("10.0.2.7", lanMAC2), set("10.0.2.8", lanMAC), gone("10.0.2.9"),
		set("fd00::7", lanMAC))
	got := n.out()
	if len(got) != 3 {
		t.Fatalf("got %d frames, want 3 announcements", len(got))
	}
	for i, c := range []struct {
		addr string
		mac  net.HardwareAddr
	}{{"10.0.2.9", lanMAC}, {"10.0.2.7", lanMAC2}} {
		eth := header.Ethernet(got[i])
		a := header.ARP(eth.Payload())
		switch {
		case eth.Type() != header.EtherTypeARP || !bytes.Equal(eth.Dst(), header.EthernetBroadcast[:]) || !bytes.Equal(eth.Src(), c.mac):
			t.Errorf("announcement %d: ethernet %x -> %x type %#x, want ARP from %v to broadcast", i, eth.Src(), eth.Dst(), eth.Type(), c.mac)
		case !a.IsValid() || a.Op() != header.ARPRequest || !bytes.Equal(a.SenderMAC(), c.mac) ||
			a.SenderIP() != netip.MustParseAddr(c.addr) || a.TargetIP() != a.SenderIP() || !bytes.Equal(a.TargetMAC(), make([]byte, 6)):
			t.Errorf("announcement %d: got %x, want a request from %s at %v for itself", i, []byte(a), c.addr, c.mac)
		}
	}
	if mac := naTarget(t, got[2], "fd00::7"); !bytes.Equal(mac, lanMAC) {
		t.Errorf("unsolicited advertisement: target link-layer address %v, want %v", mac, lanMAC)
	}
	ip, icmp, _ := parseICMPv6(got[2])
	flags := header.NDPNeighbor(icmp)[4]
	if ip.Dst() != allNodes6 || ip.Src() != netip.MustParseAddr("fd00::7") || flags != 0xa0 {
		t.Errorf("unsolicited advertisement %v -> %v flags %#x, want fd00::7 -> ff02::1 with Router and Override (0xa0)", ip.Src(), ip.Dst(), flags)
	}
}

// TestNeighbourDumpSweep: a complete dump drops the entries it did not
// bring (they went while notifications were lost); an incomplete one
// drops nothing.
func TestNeighbourDumpSweep(t *testing.T) {
	n := newNeighEngine(t, Options{})
	n.mirror(dumpBegin, set("10.0.2.7", lanMAC), set("10.0.2.8", lanMAC), dumpEnd)
	n.mirror(dumpBegin, set("10.0.2.7", lanMAC), func(h NeighbourHandler) { h.NeighbourDumpEnd(false) })
	if len(n.e.neigh.ents) != 2 {
		t.Fatalf("after an incomplete dump: %d entries, want 2", len(n.e.neigh.ents))
	}
	n.mirror(dumpBegin, set("10.0.2.7", lanMAC), dumpEnd)
	if sha, _ := n.arpAnswer(t, "10.0.2.8"); !bytes.Equal(sha, ourMAC) || len(n.e.neigh.ents) != 1 {
		t.Errorf("after a complete dump without it: ARP for 10.0.2.8 got %v with %d entries, want ours and 1", sha, len(n.e.neigh.ents))
	}
}

// TestNeighbourFull: at neighMax entries a new neighbour is refused (and
// answered for with our MAC address), an entry changing or going is not,
// and once one has gone a new one fits again.
func TestNeighbourFull(t *testing.T) {
	n := newNeighEngine(t, Options{})
	addr := func(i int) string { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String() }
	calls := []func(NeighbourHandler){dumpBegin}
	for i := range neighMax {
		calls = append(calls, set(addr(i), lanMAC))
	}
	n.mirror(append(calls, dumpEnd, set("10.0.2.7", lanMAC), set(addr(5), lanMAC2))...)
	if len(n.e.neigh.ents) != neighMax {
		t.Fatalf("got %d entries, want %d", len(n.e.neigh.ents), neighMax)
	}
	if sha, _ := n.arpAnswer(t, "10.0.2.7"); !bytes.Equal(sha, ourMAC) {
		t.Errorf("ARP for a neighbour refused at the limit: got %v, want ours", sha)
	}
	if sha, _ := n.arpAnswer(t, addr(5)); !bytes.Equal(sha, lanMAC2) {
		t.Errorf("ARP for a neighbour changed at the limit: got %v, want %v", sha, lanMAC2)
	}
	n.mirror(gone(addr(7)), set("10.0.2.7", lanMAC))
	if got := n.out(); len(got) != 1 {
		t.Errorf("the neighbour let in: got %d frames, want its announcement", len(got))
	}
	if sha, _ := n.arpAnswer(t, "10.0.2.7"); !bytes.Equal(sha, lanMAC) {
		t.Errorf("ARP for a neighbour after room was made: got %v, want %v", sha, lanMAC)
	}
}

// TestNeighbourFrameSource: frames the engine builds from a neighbour's
// address carry the neighbour's MAC address as their source, and follow
// it when it changes.
func TestNeighbourFrameSource(t *testing.T) {
	n := newNeighEngine(t, Options{})
	b := make([]byte, 128)
	src := func(from string) net.HardwareAddr {
		n.e.writeHeaders(b, false, header.ProtocolUDP, netip.MustParseAddr(from), ns4, 8)
		return net.HardwareAddr(slices.Clone(header.Ethernet(b).Src()))
	}
	if got := src("10.0.2.7"); !bytes.Equal(got, ourMAC) {
		t.Errorf("before the mirror: got %v, want ours", got)
	}
	n.mirror(dumpBegin, set("10.0.2.7", lanMAC), dumpEnd)
	if got := src("10.0.2.7"); !bytes.Equal(got, lanMAC) {
		t.Errorf("from a neighbour: got %v, want %v", got, lanMAC)
	}
	if got := src("203.0.113.1"); !bytes.Equal(got, ourMAC) {
		t.Errorf("from elsewhere: got %v, want ours", got)
	}
	n.mirror(set("10.0.2.7", lanMAC2))
	if got := src("10.0.2.7"); !bytes.Equal(got, lanMAC2) {
		t.Errorf("from a neighbour whose address changed: got %v, want %v", got, lanMAC2)
	}
}

// TestNeighbourSourceInLoop: the running engine reads its source when the
// source's descriptor is readable, and stops following a source whose
// Read fails, with one warning, answering with what it has.
func TestNeighbourSourceInLoop(t *testing.T) {
	src := newFakeNeighbours(t)
	var logs nstest.SyncBuffer
	e, l := newTestEngine(t, Options{Neighbours: src, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	runEngine(t, e)
	src.push(dumpBegin, set("10.0.2.7", lanMAC), dumpEnd)
	arp := func() net.HardwareAddr {
		fr := arpRequest(header.ARPRequest, "10.0.2.100", "10.0.2.7")
		var sha net.HardwareAddr
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			l.inject(fr)
			a := header.ARP(header.Ethernet(l.next(t, 5*time.Second, nil)).Payload())
			if sha = net.HardwareAddr(slices.Clone(a.SenderMAC())); bytes.Equal(sha, lanMAC) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return sha
	}
	if got := arp(); !bytes.Equal(got, lanMAC) {
		t.Fatalf("ARP for a neighbour: got %v, want %v", got, lanMAC)
	}
	src.mu.Lock()
	src.err = errors.New("socket gone")
	src.mu.Unlock()
	src.push(set("10.0.2.7", lanMAC2))
	if err := waitLog(&logs, "stopped following", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	src.err = nil
	reads := src.reads
	src.mu.Unlock()
	src.push(set("10.0.2.7", lanMAC))
	time.Sleep(100 * time.Millisecond)
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.reads != reads {
		t.Errorf("the source was read %d more times after it failed, want 0", src.reads-reads)
	}
}

// waitLog waits until the log holds want.
func waitLog(l *nstest.SyncBuffer, want string, d time.Duration) error {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if bytes.Contains([]byte(l.String()), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("log: got %q, want %q in it", l.String(), want)
}

// TestNeighbourLookupAllocs: answering from a full mirror, and building
// frames from its neighbours, allocates nothing.
func TestNeighbourLookupAllocs(t *testing.T) {
	n := newNeighEngine(t, Options{})
	calls := []func(NeighbourHandler){dumpBegin}
	for i := range 1000 {
		calls = append(calls, set(netip.AddrFrom4([4]byte{10, 0, byte(2 + i>>8), byte(i)}).String(), lanMAC))
	}
	n.mirror(append(calls, dumpEnd)...)
	p, out := testParams(), make([]byte, 1514)
	fr := arpRequest(header.ARPRequest, "10.0.2.100", "10.0.3.7")
	b := make([]byte, 128)
	if a := testing.AllocsPerRun(100, func() {
		arpReply(p, &n.e.neigh, fr, out)
		n.e.writeHeaders(b, false, header.ProtocolUDP, netip.MustParseAddr("10.0.3.7"), ns4, 8)
		n.e.writeHeaders(b, false, header.ProtocolUDP, netip.MustParseAddr("10.0.3.8"), ns4, 8)
	}); a != 0 {
		t.Errorf("got %v allocations per lookup, want 0", a)
	}
}

func BenchmarkARPReplyMirrored(b *testing.B) {
	src := newFakeNeighbours(b)
	l := newFakeLink(b)
	e, err := New(&discardLink{l}, testParams(), Options{Neighbours: src})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	src.push(dumpBegin)
	for i := range 1000 {
		src.push(set(netip.AddrFrom4([4]byte{10, 0, byte(2 + i>>8), byte(i)}).String(), lanMAC))
	}
	src.push(dumpEnd)
	e.readNeighbours()
	p, fr, out := testParams(), arpRequest(header.ARPRequest, "10.0.2.100", "10.0.3.7"), make([]byte, 1514)
	b.ReportAllocs()
	for b.Loop() {
		if arpReply(p, &e.neigh, fr, out) == 0 {
			b.Fatal("no reply")
		}
	}
}
