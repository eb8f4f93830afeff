package fwd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
)

// TestUDPEcho sends datagrams from the "namespace" to the gateway address,
// which maps to host loopback, through a real host socket to a real echo
// server, and checks the reply frames: addresses and ports swapped back to
// what the namespace used, checksums valid, source port preserved.
func TestUDPEcho(t *testing.T) {
	for _, tc := range []struct {
		name, listen string
		ns, gw       netip.Addr
	}{
		{"ipv4", "127.0.0.1:0", netip.MustParseAddr("10.0.2.100"), netip.MustParseAddr("10.0.2.2")},
		{"ipv6", "[::1]:0", netip.MustParseAddr("fd00::100"), netip.MustParseAddr("fe80::1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostNS(t)
			port, seen := h.udpEcho(tc.listen)
			e, l := newTestEngine(t, Options{})
			h.start(e)
			const nsPort = 47113
			for i := range 3 {
				msg := []byte(fmt.Sprintf("hello %d", i))
				l.inject(udpFrame(tc.ns, tc.gw, nsPort, port, msg))
				p := parseOut(t, l.next(t, 5*time.Second, nil))
				if p.proto != header.ProtocolUDP {
					t.Fatalf("reply protocol %d, want UDP", p.proto)
				}
				if p.src != tc.gw || p.dst != tc.ns || p.sport != port || p.dport != nsPort {
					t.Errorf("reply %v:%d -> %v:%d, want %v:%d -> %v:%d",
						p.src, p.sport, p.dst, p.dport, tc.gw, port, tc.ns, nsPort)
				}
				if got := header.UDP(p.l4).Payload(); !bytes.Equal(got, msg) {
					t.Errorf("payload %q, want %q", got, msg)
				}
			}
			from := <-seen
			if h.isNew && from.Port() != nsPort {
				// In a fresh namespace the port is certainly free.
				t.Errorf("server saw source port %d, want %d (preserved)", from.Port(), nsPort)
			}
			if got := e.FlowCount(); got != 1 {
				t.Errorf("FlowCount = %d, want 1", got)
			}
		})
	}
}

// TestUDPSourcePortShared: one namespace port talking to two host peers
// keeps its port toward both: each flow's socket binds it, with
// SO_REUSEADDR, as pasta's do. (A forwarded port's listener, which binds
// with SO_REUSEADDR too, shares it the same way.)
func TestUDPSourcePortShared(t *testing.T) {
	h := newHostNS(t)
	if !h.isNew {
		t.Skip("needs a fresh network namespace, where the port is certainly free")
	}
	const nsPort = 47115
	seen := make(chan netip.AddrPort, 4)
	record := func(pc *net.UDPConn, msg []byte, from netip.AddrPort) {
		seen <- from
		pc.WriteToUDPAddrPort(msg, from)
	}
	a := h.udpServe("127.0.0.1:0", record)
	b := h.udpServe("127.0.0.1:0", record)
	e, l := newTestEngine(t, Options{})
	h.start(e)
	ns, gw := netip.MustParseAddr("10.0.2.100"), netip.MustParseAddr("10.0.2.2")
	for _, port := range []uint16{a, b} {
		l.inject(udpFrame(ns, gw, nsPort, port, []byte("hi")))
		if p := parseOut(t, l.next(t, 5*time.Second, nil)); p.sport != port || p.dport != nsPort {
			t.Errorf("reply %d -> %d, want %d -> %d", p.sport, p.dport, port, nsPort)
		}
		if from := <-seen; from.Port() != nsPort {
			t.Errorf("server on port %d saw source port %d, want %d (kept for every peer)", port, from.Port(), nsPort)
		}
	}
}

// udpEchoEngine starts an engine in a host namespace with a UDP echo
// server on 127.0.0.1 and returns them with the server's port.
func udpEchoEngine(t *testing.T) (*Engine, *fakeLink, uint16) {
	t.Helper()
	h := newHostNS(t)
	port, _ := h.udpEcho("127.0.0.1:0")
	e, l := newTestEngine(t, Options{})
	h.start(e)
	return e, l, port
}

// TestUDPBatchAndFlows sends several flows' datagrams in one batch, mixed
// with malformed frames, and checks every good datagram is answered and
// every bad one counted.
func TestUDPBatchAndFlows(t *testing.T) {
	e, l, port := udpEchoEngine(t)
	ns, gw := ns4, gw4
	var frames [][]byte
	want := map[string]bool{}
	for i := range 8 {
		sp := uint16(40000 + i%4)
		msg := fmt.Sprintf("m%d", i)
		want[fmt.Sprintf("%d/%s", sp, msg)] = true
		frames = append(frames, udpFrame(ns, gw, sp, port, []byte(msg)))
		bad := udpFrame(ns, gw, sp, port, []byte("bad"))
		bad[len(bad)-1] ^= 0xff // breaks the UDP checksum
		frames = append(frames, bad)
	}
	trunc := udpFrame(ns, gw, 1, port, []byte("x"))
	frames = append(frames, trunc[:20], []byte{1, 2, 3})
	l.inject(frames...)
	for range 8 {
		p := parseOut(t, l.next(t, 5*time.Second, nil))
		k := fmt.Sprintf("%d/%s", p.dport, header.UDP(p.l4).Payload())
		if !want[k] {
			t.Errorf("unexpected reply %s", k)
		}
		delete(want, k)
	}
	st := e.Stats()
	if st.Drops[DropBadChecksum] != 8 {
		t.Errorf("bad-checksum drops = %d, want 8", st.Drops[DropBadChecksum])
	}
	if st.Drops[DropTruncated] != 2 {
		t.Errorf("truncated drops = %d, want 2", st.Drops[DropTruncated])
	}
	if got := e.FlowCount(); got != 4 {
		t.Errorf("FlowCount = %d, want 4", got)
	}
}

// TestUDPFullReadBatchOneFlow: a whole link read of one flow's datagrams
// (rxBatch, and one more for the next read) goes out in one call of
// frames, whose send arrays must hold that many. Every datagram gets its
// echo back.
func TestUDPFullReadBatchOneFlow(t *testing.T) {
	e, l, port := udpEchoEngine(t)
	const n = rxBatch + 1
	frames := make([][]byte, n)
	want := map[string]bool{}
	for i := range frames {
		msg := fmt.Sprintf("m%d", i)
		want[msg] = true
		frames[i] = udpFrame(ns4, gw4, 40000, port, []byte(msg))
	}
	l.inject(frames...)
	for range n {
		p := parseOut(t, l.next(t, 5*time.Second, nil))
		msg := string(header.UDP(p.l4).Payload())
		if !want[msg] {
			t.Fatalf("unexpected or repeated reply %q", msg)
		}
		delete(want, msg)
	}
	if got := e.FlowCount(); got != 1 {
		t.Errorf("FlowCount = %d, want 1", got)
	}
}

// recvRecorder passes every call through to the kernel and records how
// many datagrams each recvmmsg asked for and got.
type recvRecorder struct {
	sysOps
	mu              sync.Mutex
	fds, asked, got []int
	// hold, when set, stops the next recvmmsg on holdFd until it is
	// closed, so that a test can queue datagrams while the engine waits.
	hold   chan struct{}
	holdFd int
}

func (r *recvRecorder) recvmmsg(fd int, m []unix.Mmsghdr) (int, error) {
	r.mu.Lock()
	h := r.hold
	if h != nil && fd == r.holdFd {
		r.hold = nil
	} else {
		h = nil
	}
	r.mu.Unlock()
	if h != nil {
		<-h
	}
	n, err := r.sysOps.recvmmsg(fd, m)
	r.mu.Lock()
	r.fds, r.asked, r.got = append(r.fds, fd), append(r.asked, len(m)), append(r.got, n)
	r.mu.Unlock()
	return n, err
}

// check fails t unless, after the first recvmmsg on fd (-1: any) that
// returned datagrams, later ones read the rest, each asking for at most
// most datagrams. The tests give most as a number rather than as
// udpBurst(size), so that a wrong rule fails them too.
func (r *recvRecorder) check(t *testing.T, fd, most int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen, later := false, 0
	for i := range r.asked {
		if fd >= 0 && r.fds[i] != fd {
			continue
		}
		if seen {
			if r.asked[i] > most {
				t.Errorf("recvmmsg %d asked for %d datagrams after the first batch, want at most %d (asked %v, got %v)",
					i, r.asked[i], most, r.asked, r.got)
				return
			}
			later += r.got[i]
		}
		seen = seen || r.got[i] > 0
	}
	if later == 0 {
		// The bound was never exercised: the test did not do what it
		// says.
		t.Errorf("no datagram read after the first batch (asked %v, got %v)", r.asked, r.got)
	}
}

// TestUDPBurstLargeDatagrams has a host peer answer a namespace flow with
// one large datagram and, once that reached the namespace, a run of more:
// every one arrives intact and in order, and having seen their size the
// engine reads at most three (64 KiB) of them at a time.
func TestUDPBurstLargeDatagrams(t *testing.T) {
	h := newHostNS(t)
	pc := h.listenUDP("127.0.0.1:0")
	port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	e, l := newTestEngine(t, Options{})
	rec := &recvRecorder{sysOps: e.sys}
	e.sys = rec
	h.start(e)

	ns, gw := netip.MustParseAddr("10.0.2.100"), netip.MustParseAddr("10.0.2.2")
	l.inject(udpFrame(ns, gw, 47114, port, []byte("go")))
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	_, from, err := pc.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("host peer: %v", err)
	}
	const size, count = 20000, 6
	send := func(i int) {
		t.Helper()
		if _, err := pc.WriteToUDPAddrPort(bytes.Repeat([]byte{byte(i)}, size), from); err != nil {
			t.Fatalf("host peer send %d: %v", i, err)
		}
	}
	recv := func(i int) {
		t.Helper()
		p := parseOut(t, l.next(t, 5*time.Second, nil))
		pay := header.UDP(p.l4).Payload()
		if len(pay) != size || pay[0] != byte(i) || pay[size-1] != byte(i) {
			t.Fatalf("datagram %d: got %d bytes, want %d bytes of %d", i, len(pay), size, i)
		}
	}
	// The first alone, so the engine knows the size before the rest
	// queue up.
	send(0)
	recv(0)
	for i := 1; i < count; i++ {
		send(i)
	}
	for i := 1; i < count; i++ {
		recv(i)
	}
	rec.check(t, -1, 3) // 64 KiB of 20000-byte datagrams
}

// TestUDPLargerThanMTU: with a virtio-net header the transmit buffers hold
// 64 KiB, and a host datagram larger than the namespace's MTU, on a flow
// the namespace opened, goes to it whole as one frame (as pasta sends it:
// the namespace's stack takes frames larger than its MTU from a TAP), up
// to the largest an IPv4 packet carries; none is dropped. A DNS answer
// over 1472 bytes at MTU 1500 is the common case.
func TestUDPLargerThanMTU(t *testing.T) {
	sizes := []int{1400, 3000, 65507}
	h := newHostNS(t)
	port := h.udpServe("127.0.0.1:0", func(pc *net.UDPConn, _ []byte, from netip.AddrPort) {
		for _, n := range sizes {
			pc.WriteToUDPAddrPort(make([]byte, n), from)
		}
	})
	p := testParams()
	p.MTU = 1500
	l := newFakeLink(t)
	e, err := New(l, p, Options{VnetHdr: true})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	h.start(e)
	hdr := make([]byte, header.VirtioNetHdrSize)
	l.inject(append(hdr, udpFrame(netip.MustParseAddr("10.0.2.100"), netip.MustParseAddr("10.0.2.2"), 47114, port, []byte("x"))...))
	for _, n := range sizes {
		// Virtio-net header, Ethernet, IPv4, UDP, payload.
		want := header.VirtioNetHdrSize + header.EthernetMinimumSize + header.IPv4MinimumSize + header.UDPMinimumSize + n
		if f := l.next(t, 5*time.Second, nil); len(f) != want {
			t.Errorf("frame for the %d-byte datagram: got %d bytes, want %d", n, len(f), want)
		}
	}
	if got := e.Stats().Drops[DropTooBig]; got != 0 {
		t.Errorf("too-big drops: got %d, want 0", got)
	}
}

// sendRecorder passes sendmmsg through to the kernel, after failing, with
// refuse, any call whose first message asks for segmentation offload, and
// records each message that went: "N×S" for N datagrams of segment size S
// in one, or the single datagram's size.
type sendRecorder struct {
	sysOps
	refuse error
	mu     sync.Mutex
	msgs   []string
}

func (r *sendRecorder) sendmmsg(fd int, m []unix.Mmsghdr) (int, error) {
	if r.refuse != nil && m[0].Hdr.Controllen != 0 {
		return 0, r.refuse
	}
	n, err := r.sysOps.sendmmsg(fd, m)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, msg := range m[:max(n, 0)] {
		iov := unsafe.Slice(msg.Hdr.Iov, msg.Hdr.Iovlen)
		if msg.Hdr.Iovlen == 1 {
			r.msgs = append(r.msgs, fmt.Sprint(iov[0].Len))
		} else {
			r.msgs = append(r.msgs, fmt.Sprintf("%d×%d", msg.Hdr.Iovlen, iov[0].Len))
		}
	}
	return n, err
}

// TestUDPSegmentation sends one batch of a namespace flow's datagrams of
// mixed sizes, empty ones included, to a host peer: each arrives whole,
// once and in order. Runs of one size go as one UDP_SEGMENT message each.
// Where the host refuses that, the datagrams go singly: refused by the
// recorder (as a kernel without UDP_SEGMENT would), and by the real
// kernel, the segment size being beyond the path MTU (loopback's MTU made
// 1280 in the test's own namespace; the single datagrams are fragmented
// and reassembled).
func TestUDPSegmentation(t *testing.T) {
	rep := func(n, size int) []int { return slices.Repeat([]int{size}, n) }
	mixed := slices.Concat(rep(5, 1000), []int{600}, rep(3, 1000), []int{0, 1200, 1200, 1300})
	for _, tc := range []struct {
		name   string
		listen string
		ns, gw netip.Addr
		sizes  []int
		refuse error
		loMTU  int
		want   []string // the messages each batch goes as
	}{
		{"ipv4", "127.0.0.1:0", ns4, gw4, mixed, nil, 0,
			[]string{"6×1000", "3×1000", "0", "2×1200", "1300"}},
		{"ipv6", "[::1]:0", netip.MustParseAddr("fd00::100"), netip.MustParseAddr("fe80::1"), mixed, nil, 0,
			[]string{"6×1000", "3×1000", "0", "2×1200", "1300"}},
		{"refused", "127.0.0.1:0", ns4, gw4, mixed, unix.EIO, 0,
			[]string{"1000", "1000", "1000", "1000", "1000", "600", "1000", "1000", "1000", "0", "1200", "1200", "1300"}},
		{"path MTU", "127.0.0.1:0", ns4, gw4, rep(4, 1400), nil, 1280,
			[]string{"1400", "1400", "1400", "1400"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostNS(t)
			if tc.loMTU != 0 {
				if !h.isNew {
					t.Skip("needs a network namespace of its own, to set loopback's MTU")
				}
				h.do(func() { setMTU(t, "lo", tc.loMTU) })
			}
			pc := h.listenUDP(tc.listen)
			port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
			e, l := newTestEngine(t, Options{})
			rec := &sendRecorder{sysOps: e.sys, refuse: tc.refuse}
			e.sys = rec
			h.start(e)
			payload := func(i, size int) []byte {
				b := bytes.Repeat([]byte{byte(i)}, size)
				if size >= 2 {
					binary.BigEndian.PutUint16(b, uint16(i))
				}
				return b
			}
			var frames [][]byte
			for i, s := range tc.sizes {
				frames = append(frames, udpFrame(tc.ns, tc.gw, 47116, port, payload(i, s)))
			}
			buf := make([]byte, 65536)
			pc.SetReadDeadline(time.Now().Add(5 * time.Second))
			// Twice: the second batch must find the flow's choice
			// (offload or not) kept.
			for round := range 2 {
				l.inject(frames...)
				for i, s := range tc.sizes {
					n, _, err := pc.ReadFromUDPAddrPort(buf)
					if err != nil {
						t.Fatalf("round %d, datagram %d: %v", round, i, err)
					}
					if want := payload(i, s); !bytes.Equal(buf[:n], want) {
						t.Fatalf("round %d, datagram %d: got %d bytes starting %x, want %d bytes starting %x",
							round, i, n, buf[:min(n, 4)], s, want[:min(s, 4)])
					}
				}
			}
			if st := e.Stats(); st.Drops[DropHostSocket] != 0 {
				t.Errorf("host socket drops: got %d, want 0", st.Drops[DropHostSocket])
			}
			// The recorder notes a call's messages after it returned,
			// which may be after the peer read them.
			want := slices.Concat(tc.want, tc.want)
			var got []string
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				rec.mu.Lock()
				got = slices.Clone(rec.msgs)
				rec.mu.Unlock()
				if len(got) >= len(want) || time.Now().After(deadline) {
					break
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("messages of the two batches: got %v, want %v", got, want)
			}
		})
	}
}

// setMTU sets the MTU of the interface named ifname in the calling thread's
// network namespace.
func setMTU(t *testing.T, ifname string, mtu int) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(ifname)
	if err != nil {
		t.Fatalf("ifreq: %v", err)
	}
	ifr.SetUint32(uint32(mtu))
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFMTU, ifr); err != nil {
		t.Fatalf("set %s MTU %d: %v", ifname, mtu, err)
	}
}

// withTTL returns a copy of frame fr with its IPv4 TTL or IPv6 hop limit
// set to ttl (the IPv4 header checksum fixed; no transport checksum covers
// it).
func withTTL(fr []byte, ttl uint8) []byte {
	fr = slices.Clone(fr)
	if header.Ethernet(fr).Type() == header.EtherTypeIPv6 {
		header.IPv6(fr[header.EthernetMinimumSize:]).SetHopLimit(ttl)
		return fr
	}
	ip := header.IPv4(fr[header.EthernetMinimumSize:])
	ip.SetTTL(ttl)
	ip.SetChecksum(0)
	ip.SetChecksum(ip.CalculateChecksum())
	return fr
}

// sendSys is callSys that records sendmmsg too, with the datagrams each
// message array carries.
type sendSys struct{ *callSys }

func (s *sendSys) sendmmsg(fd int, m []unix.Mmsghdr) (int, error) {
	n := 0
	for _, msg := range m {
		n += int(msg.Hdr.Iovlen)
	}
	s.calls = append(s.calls, fmt.Sprintf("sendmmsg %d", n))
	return s.fakeSys.sendmmsg(fd, m)
}

// TestUDPTTL: a flow's datagrams leave with the TTL or hop limit the
// namespace sent them with (passt a7775e9): the socket takes each new value
// before the datagrams that carry it (runs of one value still go in one
// sendmmsg), keeps it for the next cycle, and a TTL of 0, which no wire
// carries, is dropped. A multicast destination takes the multicast option.
func TestUDPTTL(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst netip.Addr
		opt      string
	}{
		{"ipv4", ns4, ext, "IP_TTL"},
		{"ipv6", ns6, netip.MustParseAddr("2001:db8::7"), "IPV6_UNICAST_HOPS"},
		{"ipv4 multicast", ns4, netip.MustParseAddr("239.255.255.250"), "IP_MULTICAST_TTL"},
		{"ipv6 multicast", ns6, netip.MustParseAddr("ff05::c"), "IPV6_MULTICAST_HOPS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriven(t, Options{})
			sys := &sendSys{&callSys{fakeSys: d.sys}}
			d.e.sys = sys
			fr := udpFrame(tc.src, tc.dst, 33434, 9, []byte("probe"))
			var batch [][]byte
			for _, ttl := range []uint8{64, 64, 1, 1, 2, 0, 64} {
				batch = append(batch, withTTL(fr, ttl))
			}
			d.cycle(batch...)
			first := slices.IndexFunc(sys.calls, func(c string) bool { return strings.HasPrefix(c, "watch") })
			got := sys.calls[first+1:]
			want := []string{
				"setsockopt " + tc.opt + "=64", "sendmmsg 2",
				"setsockopt " + tc.opt + "=1", "sendmmsg 2",
				"setsockopt " + tc.opt + "=2", "sendmmsg 1",
				"setsockopt " + tc.opt + "=64", "sendmmsg 1",
			}
			if !slices.Equal(got, want) {
				t.Errorf("got calls\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
			}
			if got := d.e.Stats().Drops[DropBadIP]; got != 1 {
				t.Errorf("bad-ip drops: got %d, want 1 (the TTL 0 datagram)", got)
			}
			sys.calls = nil
			d.cycle(withTTL(fr, 64), withTTL(fr, 64))
			if want := []string{"sendmmsg 2"}; !slices.Equal(sys.calls, want) {
				t.Errorf("next cycle, same TTL: got calls %q, want %q", sys.calls, want)
			}
		})
	}
}
