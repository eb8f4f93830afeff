package e2e

// TCP keepalives through gopasta (passt aa809d3, d2f7c21): a namespace
// application's keepalive probes turn keepalives on for the host side, and
// a connection the namespace is silent on gets probes from gopasta. The
// probes are seen on the wire: AF_PACKET captures on the host namespace's
// loopback and on the namespace's TAP.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

func init() {
	// kaclient ADDR IDLEMS HOLDMS: connects to ADDR with keepalives on
	// (idle and interval IDLEMS), holds the connection idle for HOLDMS
	// ms, then checks it still carries a byte.
	moreCommands["kaclient"] = func(f []string) (string, error) {
		if len(f) != 4 {
			return "", fmt.Errorf("want kaclient ADDR IDLEMS HOLDMS, got %q", f)
		}
		idle, _ := strconv.Atoi(f[2])
		hold, _ := strconv.Atoi(f[3])
		d := net.Dialer{Timeout: 10 * time.Second, KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: time.Duration(idle) * time.Millisecond,
			Interval: time.Duration(idle) * time.Millisecond, Count: 9}}
		c, err := d.Dial("tcp", f[1])
		if err != nil {
			return "", err
		}
		defer c.Close()
		time.Sleep(time.Duration(hold) * time.Millisecond)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte{1}); err != nil {
			return "", fmt.Errorf("after %d ms idle: %w", hold, err)
		}
		return "", nil
	}
	// kaprobes ADDR MS: connects to ADDR without keepalives of its own,
	// stays silent, and counts gopasta's keepalive probes on the
	// connection (captured on the TAP) until the first or MS ms; the
	// result is "N MS": how many, and after how many ms the first came.
	moreCommands["kaprobes"] = func(f []string) (string, error) {
		if len(f) != 3 {
			return "", fmt.Errorf("want kaprobes ADDR MS, got %q", f)
		}
		ms, _ := strconv.Atoi(f[2])
		ifi, err := tapInterface()
		if err != nil {
			return "", err
		}
		s, err := newProbeSniffer(ifi.Index)
		if err != nil {
			return "", err
		}
		defer s.close()
		d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: -1}
		c, err := d.Dial("tcp", f[1])
		if err != nil {
			return "", err
		}
		defer c.Close()
		remote := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		local := c.LocalAddr().(*net.TCPAddr).AddrPort()
		start := time.Now()
		for time.Since(start) < time.Duration(ms)*time.Millisecond {
			if n := s.count(remote, local); n > 0 {
				return fmt.Sprintf("%d %d", n, time.Since(start).Milliseconds()), nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Sprintf("0 %d", ms), nil
	}
}

// TestTCPKeepalive: a namespace application's keepalive probes (every
// second) make the host side probe the host's server too, seen on the
// host's loopback (the host's tcp_keepalive_time is 1 s, which pasta's
// probes follow; gopasta's follow the namespace's idle time); a
// connection without keepalives gets none on the host side; and one the
// namespace is silent on gets a probe from gopasta on the TAP within a
// minute (gopasta: after 30 s; pasta: 30 to 60 s).
func TestTCPKeepalive(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, u, hostSetup{peers: true})
			for _, kv := range [][2]string{{"net.ipv4.tcp_keepalive_time", "1"}, {"net.ipv4.tcp_keepalive_intvl", "1"}} {
				if err := e.h.Sysctl(kv[0], kv[1]); err != nil {
					t.Fatalf("sysctl %s=%s in the host namespace: %v", kv[0], kv[1], err)
				}
			}
			var withKA, without netip.AddrPort
			for _, p := range []*netip.AddrPort{&withKA, &without} {
				*p = e.holdServer(t, netip.MustParseAddr(peer4))
			}
			var host *probeSniffer
			err := e.h.Do(func() (err error) {
				host, err = newProbeSniffer(1) // lo
				return err
			})
			if err != nil {
				t.Fatalf("capture on the host's loopback: %v", err)
			}
			t.Cleanup(host.close)

			ag := e.startAgent(t, "--config-net", "-t", "none", "-u", "none", "-T", "none", "-U", "none")
			ag.bg(t, "silent", "kaprobes", without.String(), "70000")
			ag.bg(t, "ka", "kaclient", withKA.String(), "1000", "6000")
			toServer := func(dst netip.AddrPort) func(src, d netip.AddrPort) bool {
				return func(_, d netip.AddrPort) bool { return d == dst }
			}
			err = nstest.WaitFor(8*time.Second, func() error {
				if n := host.countFunc(toServer(withKA)); n < 2 {
					return fmt.Errorf("%d keepalive probes to the host's server", n)
				}
				return nil
			})
			if err != nil {
				t.Errorf("namespace client probing every second: %v on the host's loopback within 8 s, want 2 or more", err)
			}
			if _, err := ag.waitBg("ka", 15*time.Second); err != nil {
				t.Errorf("namespace client with keepalives: %v", err)
			}
			if n := host.countFunc(toServer(without)); n != 0 {
				t.Errorf("connection without keepalives in the namespace: got %d probes to its host server, want none", n)
			}
			out, err := ag.waitBg("silent", 80*time.Second)
			if err != nil {
				t.Fatalf("silent namespace connection: %v", err)
			}
			n, ms, _ := strings.Cut(strings.TrimSpace(out), " ")
			if n == "0" {
				t.Errorf("silent namespace connection: got no keepalive probe on the TAP within %s ms, want one within 70 s", ms)
			} else {
				t.Logf("silent namespace connection: the first keepalive probe came after %s ms", ms)
			}
		})
	}
}

// holdServer accepts TCP connections on addr (port chosen by the kernel)
// in the host namespace, without keepalives of its own, and holds each
// open, reading, until its peer closes or the test ends.
func (e *env) holdServer(t *testing.T, addr netip.Addr) netip.AddrPort {
	t.Helper()
	var l net.Listener
	err := e.h.Do(func() (err error) {
		l, err = (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	})
	if err != nil {
		t.Fatalf("server on %s in the host namespace: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).AddrPort()
}

// probeSniffer counts TCP keepalive probes on one interface, read through
// an AF_PACKET socket that strips link headers: segments with only ACK set
// and no data, one sequence number behind what their sender had sent
// before. Only frames coming in on the interface count (not
// PACKET_OUTGOING), so that loopback's two copies of a packet count once
// and on a TAP only what gopasta writes does.
type probeSniffer struct {
	fd     int
	mu     sync.Mutex
	next   map[[2]netip.AddrPort]uint32 // by source and destination: the sender's next sequence number
	probes map[[2]netip.AddrPort]int
	done   chan struct{}
	wg     sync.WaitGroup
}

// newProbeSniffer captures on interface ifindex of the calling thread's
// network namespace until close.
func newProbeSniffer(ifindex int) (*probeSniffer, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("AF_PACKET bind to interface %d: %w", ifindex, err)
	}
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s := &probeSniffer{fd: fd, next: map[[2]netip.AddrPort]uint32{}, probes: map[[2]netip.AddrPort]int{}, done: make(chan struct{})}
	s.wg.Add(1)
	go s.run()
	return s, nil
}

func (s *probeSniffer) run() {
	defer s.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-s.done:
			return
		default:
		}
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if seg, ok := parseIPTCP(buf[:n]); ok {
			s.add(seg)
		}
	}
}

func (s *probeSniffer) add(seg ipTCP) {
	key := [2]netip.AddrPort{seg.src, seg.dst}
	s.mu.Lock()
	defer s.mu.Unlock()
	next, known := s.next[key]
	if known && seg.flags == tcpACK && seg.plen == 0 && seg.seq+1 == next {
		s.probes[key]++
		return
	}
	end := seg.seq + uint32(seg.plen)
	if seg.flags&(tcpSYN|tcpFIN) != 0 {
		end++
	}
	if !known || int32(end-next) > 0 {
		s.next[key] = end
	}
}

// count is the number of probes seen from src to dst.
func (s *probeSniffer) count(src, dst netip.AddrPort) int {
	return s.countFunc(func(a, b netip.AddrPort) bool { return a == src && b == dst })
}

// countFunc is the number of probes seen between the addresses match
// takes (source, destination).
func (s *probeSniffer) countFunc(match func(src, dst netip.AddrPort) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, v := range s.probes {
		if match(k[0], k[1]) {
			n += v
		}
	}
	return n
}

func (s *probeSniffer) close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	s.wg.Wait()
	unix.Close(s.fd)
}

// TCP flags, as parseIPTCP reports them.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpACK = 0x10
)

// ipTCP is a TCP segment as seen in a packet.
type ipTCP struct {
	src, dst netip.AddrPort
	seq      uint32
	flags    uint8
	plen     int
}

// parseIPTCP reads a TCP segment from an IPv4 or IPv6 packet (without
// IPv6 extension headers).
func parseIPTCP(p []byte) (ipTCP, bool) {
	var s ipTCP
	if len(p) < 1 {
		return s, false
	}
	var src, dst netip.Addr
	var l4, end int
	switch p[0] >> 4 {
	case 4:
		if len(p) < 20 || p[9] != unix.IPPROTO_TCP {
			return s, false
		}
		l4, end = int(p[0]&0xf)*4, int(binary.BigEndian.Uint16(p[2:]))
		src, dst = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
	case 6:
		if len(p) < 40 || p[6] != unix.IPPROTO_TCP {
			return s, false
		}
		l4, end = 40, 40+int(binary.BigEndian.Uint16(p[4:]))
		src, dst = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
	default:
		return s, false
	}
	if l4+20 > len(p) || end > len(p) || end < l4+20 {
		return s, false
	}
	t := p[l4:end]
	doff := int(t[12]>>4) * 4
	if doff < 20 || doff > len(t) {
		return s, false
	}
	s.src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(t))
	s.dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(t[2:]))
	s.seq = binary.BigEndian.Uint32(t[4:])
	s.flags = t[13]
	s.plen = len(t) - doff
	return s, true
}
