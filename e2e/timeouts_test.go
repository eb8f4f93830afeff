package e2e

// TCP and UDP timeouts taken from the host's sysctls (passt bebafa7,
// 3dde0e0 and the RTO commits around them): set in the test's own host
// namespace, where they are per namespace, before gopasta starts.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

func init() {
	// ip ARGS...: runs ip(8) in the namespace (routes that make it drop
	// what it would send).
	moreCommands["ip"] = func(f []string) (string, error) {
		out, err := exec.Command(ipPath(), f[1:]...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ip %q: %v: %s", f[1:], err, out)
		}
		return "", nil
	}
	// udpidle ADDR TAG N MS: sends TAG to ADDR N times from one socket,
	// each time waiting for its echo, then counts the datagrams that
	// reach the socket in the next MS ms; the result is that count.
	moreCommands["udpidle"] = func(f []string) (string, error) {
		if len(f) != 5 {
			return "", fmt.Errorf("want udpidle ADDR TAG N MS, got %q", f)
		}
		n, _ := strconv.Atoi(f[3])
		ms, _ := strconv.Atoi(f[4])
		c, err := dialRetry("udp", f[1])
		if err != nil {
			return "", err
		}
		defer c.Close()
		buf := make([]byte, 64)
		for i := range n {
			got := false
			for try := 0; try < 3 && !got; try++ {
				if _, err := c.Write([]byte(f[2])); err != nil {
					return "", err
				}
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				k, err := c.Read(buf)
				got = err == nil && string(buf[:k]) == f[2]
			}
			if !got {
				return "", fmt.Errorf("datagram %d: no echo", i)
			}
		}
		count := 0
		c.SetReadDeadline(time.Now().Add(time.Duration(ms) * time.Millisecond))
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
			count++
		}
		return strconv.Itoa(count), nil
	}
}

// ipPath is ip(8) on PATH, or where distributions put it.
func ipPath() string {
	if p, err := exec.LookPath("ip"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "ip"
}

// hostSysctl reads a sysctl (a path under /proc/sys) in the host namespace;
// ok is false when the kernel has no such setting there.
func (e *env) hostSysctl(t *testing.T, path string) (string, bool) {
	t.Helper()
	var b []byte
	err := e.h.Do(func() (err error) {
		b, err = os.ReadFile(filepath.Join("/proc/sys", path))
		return err
	})
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatalf("reading %s in the host namespace: %v", path, err)
	}
	return strings.TrimSpace(string(b)), true
}

// setSysctl sets a sysctl in the host namespace, failing the test if it
// cannot.
func (e *env) setSysctl(t *testing.T, key, value string) {
	t.Helper()
	if err := e.h.Sysctl(key, value); err != nil {
		t.Fatalf("sysctl %s=%s in the host namespace: %v", key, value, err)
	}
}

// conntrackExpected reports whether this kernel can have the nf_conntrack
// module: built in, or a module file for the running kernel.
func conntrackExpected() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	for _, f := range []string{"modules.builtin", "modules.dep"} {
		b, err := os.ReadFile(filepath.Join("/lib/modules", rel, f))
		if err == nil && strings.Contains(string(b), "/nf_conntrack.ko") {
			return true
		}
	}
	return false
}

// TestHostTimeouts: with tcp_syn_retries 1 (and no linear SYN timeouts)
// in the host's namespace, a host connection to a forwarded port whose
// namespace never answers the SYN is reset after 3 s (1 s, then 2 s; 2 s
// where tcp_rto_max_ms caps the second), not after the minute the
// defaults take; with tcp_rto_max_ms 1000, one whose
// namespace stops acknowledging data is reset within about 10 s of
// retransmissions at most 1 s apart, not after a minute or two; and with
// the conntrack UDP timeouts at 2 s and 6 s, a UDP flow of one datagram
// and its answer is gone after 5 s (a later datagram to it no longer
// reaches the namespace), while a stream lives on at 5 s and is gone 9 s
// after that. The namespace drops what it would answer through blackhole
// routes.
func TestHostTimeouts(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			e.setSysctl(t, "net.ipv4.tcp_syn_retries", "1")
			if _, ok := e.hostSysctl(t, "net/ipv4/tcp_syn_linear_timeouts"); ok {
				e.setSysctl(t, "net.ipv4.tcp_syn_linear_timeouts", "0")
			}
			_, rtoMax := e.hostSysctl(t, "net/ipv4/tcp_rto_max_ms")
			if rtoMax {
				e.setSysctl(t, "net.ipv4.tcp_rto_max_ms", "1000")
			}
			_, conntrack := e.hostSysctl(t, "net/netfilter/nf_conntrack_udp_timeout")
			if !conntrack {
				if p, err := exec.LookPath("modprobe"); err == nil {
					exec.Command(p, "nf_conntrack").Run()
				}
				_, conntrack = e.hostSysctl(t, "net/netfilter/nf_conntrack_udp_timeout")
			}
			if conntrack {
				e.setSysctl(t, "net.netfilter.nf_conntrack_udp_timeout", "2")
				e.setSysctl(t, "net.netfilter.nf_conntrack_udp_timeout_stream", "6")
			}
			const synPort, dataPort = 18301, 18302
			ag := e.startAgent(t, "--config-net", "-t", fmt.Sprintf("%d,%d", synPort, dataPort), "-u", "none", "-T", "none", "-U", "none")
			ag.must(t, 10*time.Second, "listen", fmt.Sprintf("[::]:%d", synPort))
			ag.must(t, 10*time.Second, "sink", fmt.Sprintf("[::]:%d", dataPort))

			t.Run("tcp_rto_max_ms", func(t *testing.T) {
				if !rtoMax {
					t.Skip("this kernel has no net.ipv4.tcp_rto_max_ms (Linux 6.15)")
				}
				c, err := e.dial("tcp", netip.MustParseAddr(peer6), netip.AddrPortFrom(netip.MustParseAddr(ns6), dataPort))
				if err != nil {
					t.Fatalf("connecting to the namespace: %v", err)
				}
				defer c.Close()
				if _, err := c.Write([]byte("established")); err != nil {
					t.Fatal(err)
				}
				time.Sleep(500 * time.Millisecond)
				ag.must(t, 10*time.Second, "ip", "-6", "route", "add", "blackhole", peer6+"/128")
				if _, err := c.Write(make([]byte, 1000)); err != nil {
					t.Fatal(err)
				}
				how, took := readUntilEnd(c, 40*time.Second)
				if how != "reset" || took < 4*time.Second || took > 20*time.Second {
					t.Errorf("namespace no longer acknowledging: the host client saw %s after %v, want a reset within 4-20 s", how, took.Round(time.Millisecond))
				} else {
					t.Logf("reset after %v", took.Round(time.Millisecond))
				}
			})

			t.Run("tcp_syn_retries", func(t *testing.T) {
				ag.must(t, 10*time.Second, "ip", "route", "add", "blackhole", peer4+"/32")
				c, err := e.dial("tcp", netip.MustParseAddr(peer4), netip.AddrPortFrom(netip.MustParseAddr(ns4), synPort))
				if err != nil {
					t.Fatalf("connecting to the forwarded port: %v", err)
				}
				defer c.Close()
				// 1 s, then 2 s, or 1 s where tcp_rto_max_ms caps it.
				how, took := readUntilEnd(c, 30*time.Second)
				if how != "reset" || took < 1500*time.Millisecond || took > 10*time.Second {
					t.Errorf("namespace not answering the SYN: the host client saw %s after %v, want a reset after 2 or 3 s (1.5-10 s)", how, took.Round(time.Millisecond))
				} else {
					t.Logf("reset after %v", took.Round(time.Millisecond))
				}
			})

			t.Run("conntrack UDP", func(t *testing.T) {
				if !conntrack {
					msg := "no net.netfilter.nf_conntrack_udp_timeout in the host namespace: nf_conntrack is not loaded"
					if os.Getenv(ciEnv) == "1" && conntrackExpected() {
						t.Fatalf("%s=1 and %s, though this kernel has the module", ciEnv, msg)
					}
					t.Skipf("skipping: %s", msg)
				}
				srv := e.udpTagServer(t, netip.MustParseAddr(peer4))
				ag.must(t, 10*time.Second, "ip", "route", "del", "blackhole", peer4+"/32")
				ag.bg(t, "one", "udpidle", srv.addr.String(), "one", "1", "17000")
				ag.bg(t, "stream", "udpidle", srv.addr.String(), "stream", "2", "17000")
				if err := nstest.WaitFor(10*time.Second, func() error {
					if srv.seen("one") < 1 || srv.seen("stream") < 2 {
						return errors.New("not every datagram arrived")
					}
					return nil
				}); err != nil {
					t.Fatalf("UDP from the namespace: %v", err)
				}
				start := time.Now()
				time.Sleep(5 * time.Second)
				srv.send(t, "one")
				srv.send(t, "stream")
				time.Sleep(time.Until(start.Add(14 * time.Second)))
				srv.send(t, "stream")
				for _, w := range []struct{ tag, want, why string }{
					{"one", "0", "gone 5 s after one datagram and its answer (timeout 2 s)"},
					{"stream", "1", "alive 5 s after a stream's last datagram (stream timeout 6 s), gone 9 s after the next"},
				} {
					got, err := ag.waitBg(w.tag, 20*time.Second)
					if err != nil {
						t.Errorf("%s: %v", w.tag, err)
					} else if got != w.want {
						t.Errorf("%s: the namespace got %s of the host's later datagrams, want %s: %s", w.tag, got, w.want, w.why)
					}
				}
			})
		})
	}
}

// readUntilEnd reads c until it ends or timeout passes, and says how and
// after how long: "reset", "eof", "timeout" or the error.
func readUntilEnd(c net.Conn, timeout time.Duration) (string, time.Duration) {
	start := time.Now()
	c.SetReadDeadline(start.Add(timeout))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		took := time.Since(start)
		switch {
		case errors.Is(err, unix.ECONNRESET):
			return "reset", took
		case errors.Is(err, os.ErrDeadlineExceeded):
			return "timeout", took
		case err.Error() == "EOF":
			return "eof", took
		}
		return err.Error(), took
	}
}

// udpTagServer is a UDP echo server in the host namespace that remembers
// where each tag (a datagram's content) came from and how often.
type udpTagServer struct {
	pc   net.PacketConn
	addr netip.AddrPort
	mu   sync.Mutex
	from map[string]net.Addr
	n    map[string]int
}

func (e *env) udpTagServer(t *testing.T, addr netip.Addr) *udpTagServer {
	t.Helper()
	pc, err := e.h.ListenPacket("udp4", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatalf("UDP server in the host namespace: %v", err)
	}
	s := &udpTagServer{pc: pc, addr: pc.LocalAddr().(*net.UDPAddr).AddrPort(), from: map[string]net.Addr{}, n: map[string]int{}}
	go func() {
		buf := make([]byte, 64)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			tag := string(buf[:k])
			s.mu.Lock()
			s.from[tag] = from
			s.n[tag]++
			s.mu.Unlock()
			pc.WriteTo(buf[:k], from)
		}
	}()
	return s
}

func (s *udpTagServer) seen(tag string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[tag]
}

// send sends tag to where it came from.
func (s *udpTagServer) send(t *testing.T, tag string) {
	t.Helper()
	s.mu.Lock()
	to := s.from[tag]
	s.mu.Unlock()
	if _, err := s.pc.WriteTo([]byte(tag), to); err != nil {
		t.Errorf("sending %q to %v: %v", tag, to, err)
	}
}
