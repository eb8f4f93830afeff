package e2e

// Spliced UDP flows that end in an empty datagram: a burst, then a
// zero-length datagram as its end marker (socat's null-eof, for one). Every
// burst is a new flow, so its first datagrams reach gopasta's listening
// socket before the flow has a socket of its own: the part of the path
// where datagrams were lost or overtaken.

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// A burst: burstLen datagrams of burstSize bytes, then an empty one.
const (
	burstLen  = 32
	burstSize = 1000
	// burstWait bounds the wait for the sink's answer to a burst's end.
	burstWait = 2 * time.Second
)

// burstDatagram fills b with datagram seq of burst: the burst and sequence
// numbers, then bytes derived from both.
func burstDatagram(b []byte, burst, seq uint32) {
	binary.BigEndian.PutUint32(b[0:], burst)
	binary.BigEndian.PutUint32(b[4:], seq)
	for i := 8; i < len(b); i++ {
		b[i] = byte(burst*7 + seq + uint32(i))
	}
}

// udpBursts sends n bursts to addr, each from a new socket (dial), and
// checks the sink's (serveUDPSink) answer to each burst's empty datagram:
// every datagram of the burst arrived, intact, in order, before the empty
// one. Every burst runs, whatever the earlier ones did; the error lists the
// failures.
func udpBursts(dial func() (net.Conn, error), n int) error {
	var fails []string
	b := make([]byte, burstSize)
	ans := make([]byte, 256)
	for burst := range uint32(n) {
		c, err := dial()
		if err != nil {
			return fmt.Errorf("burst %d: %w", burst, err)
		}
		for seq := range uint32(burstLen) {
			burstDatagram(b, burst, seq)
			if _, err := c.Write(b); err != nil {
				fails = append(fails, fmt.Sprintf("burst %d: sending datagram %d: %v", burst, seq, err))
			}
		}
		if _, err := c.Write(nil); err != nil {
			fails = append(fails, fmt.Sprintf("burst %d: sending the empty datagram: %v", burst, err))
		}
		want := fmt.Sprintf("%d %d ok 1", burst, burstLen)
		c.SetReadDeadline(time.Now().Add(burstWait))
		m, err := c.Read(ans)
		switch got := string(ans[:m]); {
		case err != nil:
			fails = append(fails, fmt.Sprintf("burst %d: no answer to the empty datagram within %v (lost): %v", burst, burstWait, err))
		case got != want:
			fails = append(fails, fmt.Sprintf("burst %d: the sink saw %q at the empty datagram, want %q", burst, got, want))
		}
		c.Close()
	}
	if len(fails) > 0 {
		return fmt.Errorf("%d of %d bursts failed:\n%s", len(fails), n, strings.Join(fails, "\n"))
	}
	return nil
}

// serveUDPSink takes bursts on pc until it closes. For each source it
// counts the datagrams of a burst that arrive intact and in order; an empty
// datagram ends the burst and is answered, to its source, with "BURST
// COUNT ok SOURCES" ("bad" instead of "ok" if anything arrived damaged,
// twice or out of order; BURST -1 when nothing came before it), SOURCES
// being how many sources sent datagrams of that burst: one flow each.
func serveUDPSink(pc net.PacketConn) {
	type state struct {
		burst int64
		count uint32
		bad   bool
	}
	flows := map[string]*state{}
	sources := map[int64]map[string]bool{}
	buf := make([]byte, 65536)
	want := make([]byte, burstSize)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		s := flows[from.String()]
		if s == nil {
			s = &state{burst: -1}
			flows[from.String()] = s
		}
		if n == 0 {
			verdict := "ok"
			if s.bad {
				verdict = "bad"
			}
			pc.WriteTo([]byte(fmt.Sprintf("%d %d %s %d", s.burst, s.count, verdict, len(sources[s.burst]))), from)
			delete(sources, s.burst)
			delete(flows, from.String())
			continue
		}
		if n < 8 {
			s.bad = true
			continue
		}
		burst, seq := binary.BigEndian.Uint32(buf), binary.BigEndian.Uint32(buf[4:])
		if s.burst < 0 {
			s.burst = int64(burst)
		}
		if sources[int64(burst)] == nil {
			sources[int64(burst)] = map[string]bool{}
		}
		sources[int64(burst)][from.String()] = true
		burstDatagram(want, burst, seq)
		if int64(burst) != s.burst || seq != s.count || n != burstSize || string(buf[:n]) != string(want) {
			s.bad = true
		}
		s.count++
	}
}

// TestForwardUDPEmptyDatagram: bursts ending in an empty datagram over the
// spliced UDP paths, -U (namespace to host loopback) and -u (host loopback
// to the namespace), IPv4 and IPv6, 50 each: none is lost, none overtakes
// the data before it.
func TestForwardUDPEmptyDatagram(t *testing.T) {
	const bursts = 50
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			const toHost, toNS = 18301, 18302
			for _, a := range []string{"127.0.0.1", "[::1]"} {
				network := "udp4"
				if a[0] == '[' {
					network = "udp6"
				}
				pc, err := e.h.ListenPacket(network, fmt.Sprintf("%s:%d", a, toHost))
				if err != nil {
					t.Fatalf("UDP sink on the host: %v", err)
				}
				t.Cleanup(func() { pc.Close() })
				go serveUDPSink(pc)
			}
			ag := e.startAgent(t, "--config-net", "-t", "none", "-T", "none",
				"-u", strconv.Itoa(toNS), "-U", strconv.Itoa(toHost))
			ag.must(t, 10*time.Second, "udpsink", fmt.Sprintf("[::]:%d", toNS))
			for _, a := range []string{"127.0.0.1", "::1"} {
				t.Run(a, func(t *testing.T) {
					dst := net.JoinHostPort(a, strconv.Itoa(toHost))
					if _, err := ag.do(time.Duration(bursts)*burstWait+30*time.Second, "udpbursts", dst, strconv.Itoa(bursts)); err != nil {
						t.Errorf("-U: namespace %s to host loopback: %v", dst, err)
					}
					dst = net.JoinHostPort(a, strconv.Itoa(toNS))
					err := udpBursts(func() (net.Conn, error) {
						return e.dial("udp", netip.Addr{}, addrPort(a, toNS))
					}, bursts)
					if err != nil {
						t.Errorf("-u: host loopback to namespace %s: %v", dst, err)
					}
				})
			}
		})
	}
}
