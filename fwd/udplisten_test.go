package fwd

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestListenerSpliceUDPBursts: fifty loopback peers in turn send a burst
// larger than one recvmmsg batch, then an empty datagram, before their
// flow exists. Each peer is handed to the splice hook once; its early
// datagrams followed by what its own socket then holds are the burst in
// order, but for datagrams the hook gets as late ones (the kernel may queue
// one on the listener just after the peer's socket was connected), and
// together they are the whole burst, each datagram once. A second hand-over
// would make a second socket for the peer, which would take the rest of
// the burst from the first.
func TestListenerSpliceUDPBursts(t *testing.T) {
	e, _ := newTestEngine(t, Options{})
	got := make(chan SpliceConn, 64)
	e.SetSpliceHook(func(c *SpliceConn) bool { got <- *c; return true })
	fd, port := listenFd(t, true)
	if _, err := e.AddListener(Listener{Fd: fd, UDP: true, ToPort: 53, Splice: true,
		Local: netip.AddrPortFrom(loop4, port)}); err != nil {
		t.Fatalf("AddListener: %v", err)
	}
	runEngine(t, e)

	const bursts, count = 50, 3 * udpBatch
	lateSeen := 0
	for b := range bursts {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(loop4, port)))
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		peer := netip.MustParseAddrPort(c.LocalAddr().String())
		for i := range count {
			c.Write(fmt.Appendf(nil, "%d:%d", b, i))
		}
		c.Write(nil)
		var sc SpliceConn
		select {
		case sc = <-got:
		case <-time.After(2 * time.Second):
			t.Fatalf("burst %d: got no splice hand-over within 2s", b)
		}
		if sc.Peer != peer || sc.Late || sc.Local != netip.AddrPortFrom(loop4, port) {
			t.Fatalf("burst %d: hand-over for %v to %v (late %v), want %v to %v", b, sc.Peer, sc.Local, sc.Late, peer, netip.AddrPortFrom(loop4, port))
		}
		seq := sc.Data
		var late [][]byte
		deadline := time.Now().Add(3 * time.Second)
		for len(seq)+len(late) < count+1 && time.Now().Before(deadline) {
			select {
			case more := <-got:
				if !more.Late || more.Peer != peer || more.Local != sc.Local || more.Fd != -1 {
					unix.Close(more.Fd)
					t.Fatalf("burst %d: a second hand-over for %v with %d datagrams (the first %q, after %d of %d, late %v), want one per peer",
						b, more.Peer, len(more.Data), more.Data[0], len(seq), count+1, more.Late)
				}
				late = append(late, more.Data...)
				continue
			default:
			}
			seq = append(seq, nstest.ReadDatagrams(t, sc.Fd, 20*time.Millisecond, 0)...)
		}
		// Both stay open to the end, as a flow's would: a later burst
		// from the same port would be the same flow.
		t.Cleanup(func() { unix.Close(sc.Fd); c.Close() })
		lateSeen += len(late)
		// The datagrams the flow's sockets carried are in order ...
		last := -1
		for i, d := range seq {
			n := indexIn(b, d, count)
			if n <= last {
				t.Fatalf("burst %d: datagram %d of %d (%d early): got %q after #%d, want increasing", b, i, len(seq), len(sc.Data), d, last)
			}
			last = n
		}
		// ... and with the late ones they are the burst, each once.
		seen := make([]bool, count+1)
		for _, d := range append(seq, late...) {
			n := indexIn(b, d, count)
			if n < 0 || seen[n] {
				t.Fatalf("burst %d: got %q (#%d) twice or from another burst", b, d, n)
			}
			seen[n] = true
		}
		if len(seq)+len(late) != count+1 {
			t.Fatalf("burst %d: got %d datagrams (%d early, %d late), want %d", b, len(seq)+len(late), len(sc.Data), len(late), count+1)
		}
	}
	t.Logf("%d late datagrams in %d bursts", lateSeen, bursts)
}

// indexIn is the index of datagram d of burst b ("b:i", count for the
// empty one), or -1.
func indexIn(b int, d []byte, count int) int {
	if len(d) == 0 {
		return count
	}
	var gb, i int
	if _, err := fmt.Sscanf(string(d), "%d:%d", &gb, &i); err != nil || gb != b || i < 0 || i >= count {
		return -1
	}
	return i
}
