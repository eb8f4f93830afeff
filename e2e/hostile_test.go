package e2e

// A hostile namespace: while well-behaved transfers and a UDP echo loop
// run through gopasta, a peer in the namespace writes crafted and malformed
// Ethernet frames to the TAP through an AF_PACKET socket. The rule under
// test: the namespace may be adversarial; bad input gets a clean drop, and
// gopasta keeps serving, loses no data of well-behaved flows, never panics,
// does not flood its log, and holds no descriptor a live flow does not
// account for. A second test checks that peers that stop reading (both
// ways, over the TAP and spliced) do not hold up anyone else's transfers.
//
// Every crafted frame goes to the test's own addresses: the namespace's
// gateway (host loopback in the test-made host namespace), the host
// namespace's 192.0.2.1 and 2001:db8::1, or the on-link responders.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// The namespace's and the host's addresses as the hostile test configures
// them (-a), and the gateways gopasta answers for.
var (
	hNS4   = netip.MustParseAddr("192.0.2.2")
	hNS6   = netip.MustParseAddr("2001:db8::2")
	hGW4   = netip.MustParseAddr(nstest.HostGW4)
	hGW6   = netip.MustParseAddr(nstest.HostGW6)
	hHost4 = netip.MustParseAddr(nstest.HostAddr4)
	hHost6 = netip.MustParseAddr(nstest.HostAddr6)
)

// hostileArgs are gopasta's options in both tests: the namespace gets
// addresses of its own, so the host's 192.0.2.1 stays reachable.
var hostileArgs = []string{"--config-net", "-a", "192.0.2.2", "-a", "2001:db8::2/64"}

// statsLine matches a --stats line and captures the live flows.
var statsLine = regexp.MustCompile(`stats .*\btcp=(\d+) udp=(\d+) icmp=(\d+)`)

// TestHostile: 64 MiB transfers both ways over the TAP (namespace to a host
// server through the gateway, host to a namespace server through -t) and a
// UDP echo loop, repeated while a namespace peer writes a few seconds of
// crafted frames, must all complete intact; afterwards gopasta still serves
// new connections, UDP and ping, logged no panic and no per-frame lines,
// and its descriptors are those of its live flows.
func TestHostile(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true, ping: true})
			const tp, up, hp = 18301, 18302, 18303
			port := e.serveTCP(t, ":0", "")
			uport := e.serveUDP(t, "127.0.0.1:0")
			e.serveTCP(t, fmt.Sprintf("127.0.0.1:%d", hp), "")
			pidFile := nstest.TempDir(t) + "/gopasta.pid"
			ag := e.startAgent(t, slices.Concat(hostileArgs, []string{
				"-t", strconv.Itoa(tp), "-u", strconv.Itoa(up), "-T", strconv.Itoa(hp), "-U", "none",
				"--stats", "1", "-P", pidFile})...)
			ag.serve(t, tp)
			ag.serve(t, up)
			e.waitServing(t, ag.proc, addrPort("127.0.0.1", tp), 20*time.Second)
			pid := waitPIDFile(t, ag.proc, pidFile)
			before, err := countFDs(pid)
			if err != nil {
				t.Fatal(err)
			}

			gw4 := fmt.Sprintf("192.0.2.254:%d", port)
			gw6 := fmt.Sprintf("[2001:db8::fe]:%d", port)
			udp4 := fmt.Sprintf("192.0.2.254:%d", uport)
			const size = 64 << 20
			const hostileMS = 3000
			ag.bg(t, "hostile", "hostile", strconv.Itoa(hostileMS), "1", fmt.Sprintf("%d,%d", port, tp))
			start := time.Now()
			hostileUntil := start.Add(hostileMS * time.Millisecond)

			// Host to namespace over the TAP, through -t, in a loop
			// until the hostile frames stop (at least once).
			var hostRuns int
			var hostErr error
			hostDone := make(chan struct{})
			go func() {
				defer close(hostDone)
				for i := 0; i == 0 || time.Now().Before(hostileUntil); i++ {
					local, dst := netip.MustParseAddr(peer4), addrPort(nstest.HostAddr4, tp)
					if i%2 == 1 {
						local, dst = netip.MustParseAddr(peer6), addrPort(nstest.HostAddr6, tp)
					}
					if err := e.put(local, dst, size, uint64(100+i)); err != nil {
						hostErr = fmt.Errorf("host -> namespace transfer %d (%v): %w", i, dst, err)
						return
					}
					hostRuns++
				}
			}()

			// Namespace to host and the UDP echo loop, as background
			// commands of the agent, restarted until the hostile frames
			// stop.
			loops := []struct {
				name string
				cmd  func(i int) []string
				runs int
				done bool
			}{
				{name: "put", cmd: func(i int) []string {
					dst := gw4
					if i%2 == 1 {
						dst = gw6
					}
					return []string{"put", dst, strconv.Itoa(size), strconv.Itoa(200 + i)}
				}},
				{name: "udp", cmd: func(int) []string { return []string{"udp", udp4, "64"} }},
			}
			for i := range loops {
				ag.bg(t, fmt.Sprintf("%s-0", loops[i].name), loops[i].cmd(0)...)
			}
			deadline := hostileUntil.Add(xferTimeout(size))
			for active := len(loops); active > 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("namespace loops: not done within %v", time.Since(start).Round(time.Millisecond))
				}
				if err := ag.gone(); err != nil {
					t.Fatal(err)
				}
				for i := range loops {
					l := &loops[i]
					if l.done {
						continue
					}
					_, done, err := ag.pollBg(fmt.Sprintf("%s-%d", l.name, l.runs))
					if !done {
						continue
					}
					if err != nil {
						t.Fatalf("namespace %s loop, run %d, %v after the hostile frames started: %v", l.name, l.runs, time.Since(start).Round(time.Millisecond), err)
					}
					l.runs++
					if time.Now().After(hostileUntil) {
						l.done, active = true, active-1
						continue
					}
					ag.bg(t, fmt.Sprintf("%s-%d", l.name, l.runs), l.cmd(l.runs)...)
				}
			}
			res, err := ag.waitBg("hostile", 30*time.Second)
			if err != nil {
				t.Fatalf("hostile frames: %v", err)
			}
			select {
			case <-hostDone:
			case <-time.After(xferTimeout(size)):
				t.Fatalf("host -> namespace transfers: not done within %v", xferTimeout(size))
			}
			if hostErr != nil {
				t.Fatal(hostErr)
			}
			t.Logf("hostile peer: %s", res)
			t.Logf("completed during it: %d host->namespace and %d namespace->host transfers of %d MiB, %d UDP loops of 64 echoes, in %v",
				hostRuns, loops[0].runs, size>>20, loops[1].runs, time.Since(start).Round(time.Millisecond))
			if !strings.Contains(res, "live=") || strings.Contains(res, "live=0 ") {
				t.Errorf("hostile peer: %s; want segments injected into the live transfers (live=N > 0)", res)
			}

			// Invalid frames from another MAC address, then the host
			// reaches the namespace before the namespace sends anything
			// that would tell gopasta its address again.
			if _, err := ag.do(10*time.Second, "badmac"); err != nil {
				t.Fatal(err)
			}
			if err := e.echoOnce(netip.MustParseAddr(peer4), addrPort(nstest.HostAddr4, up), 2*time.Second); err != nil {
				t.Errorf("after invalid frames from another MAC address: host -> namespace UDP: %v", err)
			}

			// Still serving: fresh connections both ways, spliced too,
			// UDP and ping.
			for _, cmd := range [][]string{
				{"put", gw4, "1000000", "7"}, {"get", gw6, "1000000", "8"},
				{"put", fmt.Sprintf("127.0.0.1:%d", hp), "1000000", "9"},
				{"udp", udp4}, {"ping", hGW4.String()}, {"ping", hGW6.String()},
			} {
				if _, err := ag.do(60*time.Second, cmd...); err != nil {
					t.Errorf("after the hostile frames: %v", err)
				}
			}
			if err := e.get(netip.MustParseAddr(peer6), addrPort(nstest.HostAddr6, tp), 1000000, 11); err != nil {
				t.Errorf("after the hostile frames: host -> namespace over the TAP: %v", err)
			}
			if err := e.udpEcho(netip.MustParseAddr(peer6), addrPort(nstest.HostAddr6, up)); err != nil {
				t.Errorf("after the hostile frames: host -> namespace UDP: %v", err)
			}

			// Descriptors: every TCP flow the frames opened is gone
			// within a few seconds (refused or reset at once); UDP and
			// ICMP flows live their timeouts (30 and 60 s), each with
			// one host socket, and nothing else may remain but the
			// spliced path's pool of namespace sockets, which refills
			// by up to poolSlack at a time: SYNs to the gateway's port
			// tp reach gopasta's own loopback listener of -t, and each
			// takes a socket from it.
			const poolSlack = 32
			_, stderr := ag.proc.Output()
			mark := len(stderr)
			var after, tcpN, udpN, icmpN int
			err = nstest.WaitFor(20*time.Second, func() error {
				if after, err = countFDs(pid); err != nil {
					return nstest.Stop(err)
				}
				_, stderr := ag.proc.Output()
				m := statsLine.FindAllStringSubmatch(stderr[mark:], -1)
				if len(m) == 0 {
					return errors.New("no --stats line yet")
				}
				last := m[len(m)-1]
				tcpN, _ = strconv.Atoi(last[1])
				udpN, _ = strconv.Atoi(last[2])
				icmpN, _ = strconv.Atoi(last[3])
				if tcpN != 0 || after > before+udpN+icmpN+poolSlack {
					return fmt.Errorf("gopasta fds: got %d, want at most %d before the frames + %d UDP + %d ICMP flows + %d (socket pool); live TCP flows: got %d, want 0",
						after, before, udpN, icmpN, poolSlack, tcpN)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			t.Logf("gopasta fds: %d before, %d after (live flows: tcp=%d udp=%d icmp=%d)", before, after, tcpN, udpN, icmpN)

			_, stderr = ag.proc.Output()
			checkNoPanic(t, nstest.Result{Stderr: stderr})
			var logLines []string
			for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if l != "" && !statsLine.MatchString(l) {
					logLines = append(logLines, l)
				}
			}
			if len(logLines) > 5 {
				t.Errorf("gopasta stderr: got %d lines besides --stats, want a handful at most:\n%s", len(logLines), strings.Join(logLines[:min(len(logLines), 20)], "\n"))
			}
			t.Logf("gopasta stderr: %d lines besides --stats", len(logLines))
			ag.exit()
			r, ok := ag.proc.Wait(20 * time.Second)
			if !ok {
				t.Fatal("gopasta: got no exit within 20s of the agent's end")
			}
			checkNoPanic(t, r)
			mustSucceed(t, "gopasta after the hostile frames", r)
		})
	}
}

// TestHostileDatagramFlood: a namespace that opens UDP flows faster than
// they expire, into a gopasta whose descriptor limit (400, set with
// prlimit) is far below its flow table, does not take the descriptors
// that TCP and other UDP flows need: the UDP flows stay within their
// share (half the limit, in --stats), the flows idle longest make room
// (evicted in --stats), and a transfer over TCP and a UDP exchange then
// succeed. (Running out of descriptors
// below the share is fwd's TestOutOfDescriptors: lowering a running
// process's limit from outside needs CAP_SYS_RESOURCE, which a test
// machine's root may lack.)
func TestHostileDatagramFlood(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("no prlimit (util-linux)")
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			port := e.serveTCP(t, ":0", "")
			uport := e.serveUDP(t, "127.0.0.1:0")
			pidFile := nstest.TempDir(t) + "/gopasta.pid"
			const limit = 400
			ag := e.startAgentVia(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", limit, limit), "--"},
				slices.Concat(hostileArgs, []string{
					"-t", "none", "-u", "none", "-T", "none", "-U", "none", "--stats", "1", "-P", pidFile})...)
			pid := waitPIDFile(t, ag.proc, pidFile)
			udp4 := fmt.Sprintf("192.0.2.254:%d", uport)
			if _, err := ag.do(60*time.Second, "udpspray", udp4, "1500"); err != nil {
				t.Fatalf("udpspray: %v", err)
			}
			// The UDP flows stay within their share, half the limit,
			// in the first --stats line written after the spray.
			_, stderr := ag.proc.Output()
			mark := len(stderr)
			err := nstest.WaitFor(5*time.Second, func() error {
				_, stderr := ag.proc.Output()
				m := statsLine.FindStringSubmatch(stderr[mark:])
				if m == nil {
					return errors.New("no --stats line after the spray yet")
				}
				if n, _ := strconv.Atoi(m[2]); n > limit/2 {
					return nstest.Stop(fmt.Errorf("--stats after the spray: udp=%d flows, want at most %d (half the descriptor limit)", n, limit/2))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if fds, err := countFDs(pid); err == nil {
				t.Logf("gopasta holds %d descriptors of its %d", fds, limit)
			}
			gw4 := fmt.Sprintf("192.0.2.254:%d", port)
			if _, err := ag.do(60*time.Second, "put", gw4, strconv.Itoa(1<<20), "7"); err != nil {
				t.Errorf("TCP after the flood: %v", err)
			}
			if _, err := ag.do(60*time.Second, "udp", udp4, "16"); err != nil {
				t.Errorf("UDP after the flood: %v", err)
			}
			err = nstest.WaitFor(5*time.Second, func() error {
				_, stderr := ag.proc.Output()
				m := evictedLine.FindAllStringSubmatch(stderr, -1)
				if len(m) == 0 {
					return errors.New("no --stats line with evictions yet")
				}
				if n, _ := strconv.Atoi(m[len(m)-1][1]); n == 0 {
					return fmt.Errorf("--stats: evicted=0 after 1500 flows under a limit of %d descriptors", limit)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			_, stderr = ag.proc.Output()
			checkNoPanic(t, nstest.Result{Stderr: stderr})
		})
	}
}

// evictedLine captures the evictions of a --stats line.
var evictedLine = regexp.MustCompile(`stats .*\bevicted=(\d+)`)

// TestHostileSlowPeers: peers that stop reading, with their windows and
// buffers full (namespace to a host server over the TAP and spliced with
// -T, host to a namespace server through -t over the TAP and spliced),
// leave other transfers on the same paths unaffected: they complete, intact.
func TestHostileSlowPeers(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const tSink, tServe, hSink, hServe = 18311, 18312, 18313, 18314
			port := e.serveTCP(t, ":0", "")
			sinkPort := e.sinkTCP(t, ":0")
			e.serveTCP(t, fmt.Sprintf("127.0.0.1:%d", hServe), "")
			e.sinkTCP(t, fmt.Sprintf("127.0.0.1:%d", hSink))
			ag := e.startAgent(t, slices.Concat(hostileArgs, []string{
				"-t", fmt.Sprintf("%d,%d", tSink, tServe), "-u", "none",
				"-T", fmt.Sprintf("%d,%d", hSink, hServe), "-U", "none"})...)
			ag.must(t, 10*time.Second, "sink", fmt.Sprintf("[::]:%d", tSink))
			ag.must(t, 10*time.Second, "listen", fmt.Sprintf("[::]:%d", tServe))
			e.waitServing(t, ag.proc, addrPort("127.0.0.1", tServe), 20*time.Second)

			// Fill every stuck path: the writer stops when a second
			// passes without progress.
			for _, dst := range []string{fmt.Sprintf("192.0.2.254:%d", sinkPort), fmt.Sprintf("127.0.0.1:%d", hSink)} {
				n, err := ag.do(60*time.Second, "stall", dst)
				if err != nil {
					t.Fatalf("namespace writer to a host peer that never reads (%s): %v", dst, err)
				}
				t.Logf("namespace -> %s (never read): %s bytes taken before it stalled", dst, n)
			}
			for _, p := range []path{
				{"tap", netip.MustParseAddr(peer4), nstest.HostAddr4},
				{"splice", netip.Addr{}, "127.0.0.1"},
			} {
				c, err := e.dial("tcp", p.local, addrPort(p.dst, tSink))
				if err != nil {
					t.Fatalf("%s: host writer to a namespace peer that never reads: %v", p.name, err)
				}
				defer c.Close()
				n, err := stallWrite(c)
				if err != nil {
					t.Fatalf("%s: host writer to a namespace peer that never reads: %v", p.name, err)
				}
				t.Logf("%s: host -> namespace (never read): %d bytes taken before it stalled", p.name, n)
			}

			// Meanwhile, transfers on the same paths both ways.
			const size = 16 << 20
			var cmds [][]string
			for i, dst := range []string{fmt.Sprintf("192.0.2.254:%d", port), fmt.Sprintf("[2001:db8::fe]:%d", port), fmt.Sprintf("127.0.0.1:%d", hServe)} {
				cmds = append(cmds, []string{"put", dst, strconv.Itoa(size), strconv.Itoa(10 + i)}, []string{"get", dst, strconv.Itoa(size), strconv.Itoa(20 + i)})
			}
			for _, c := range cmds {
				if _, err := ag.do(xferTimeout(size), c...); err != nil {
					t.Errorf("namespace transfer beside the stuck ones: %v", err)
				}
			}
			for i, p := range paths() {
				dst := addrPort(p.dst, tServe)
				if err := e.put(p.local, dst, size, uint64(30+i)); err != nil {
					t.Errorf("%s: host -> namespace beside the stuck ones: %v", p.name, err)
				}
				if err := e.get(p.local, dst, size, uint64(40+i)); err != nil {
					t.Errorf("%s: namespace -> host beside the stuck ones: %v", p.name, err)
				}
			}
			if n, err := ag.do(10*time.Second, "release"); err != nil {
				t.Errorf("release: %v", err)
			} else {
				t.Logf("released %s namespace sockets", n)
			}
			ag.exit()
			r, ok := ag.proc.Wait(20 * time.Second)
			if !ok {
				t.Fatal("gopasta: got no exit within 20s of the agent's end")
			}
			checkNoPanic(t, r)
		})
	}
}

// echoOnce sends one datagram from local to dst's echo server in the host
// namespace and wants it back within timeout, without a retry.
func (e *env) echoOnce(local netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	c, err := e.dial("udp", local, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	msg := []byte("once")
	if _, err := c.Write(msg); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("got no echo of one datagram within %v, want it (no retry): %w", timeout, err)
	}
	if string(buf[:n]) != string(msg) {
		return fmt.Errorf("got %q back, want %q", buf[:n], msg)
	}
	return nil
}

// waitPIDFile waits for gopasta's pid file (-P) and returns the PID.
func waitPIDFile(t *testing.T, p *nstest.Proc, file string) int {
	t.Helper()
	var pid int
	err := nstest.WaitFor(20*time.Second, func() error {
		select {
		case <-p.Done():
			r, _ := p.Wait(0)
			return nstest.Stop(fmt.Errorf("gopasta exited early:\n%s", r))
		default:
		}
		var err error
		pid, err = nstest.ReadPIDFile(file)
		return err
	})
	if err != nil {
		t.Fatalf("gopasta pid file: %v", err)
	}
	return pid
}

// sinkTCP listens on addr in the host namespace, accepts, and never reads,
// until the test ends; it returns the port.
func (e *env) sinkTCP(t *testing.T, addr string) int {
	t.Helper()
	l, err := e.h.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("sink on %s in the host namespace: %v", addr, err)
	}
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// stallWrite writes to c until a second passes without the connection
// taking a byte, and returns how many it took; a connection that keeps
// taking bytes for 30 s is an error (its peer reads after all).
func stallWrite(c net.Conn) (int64, error) {
	buf := make([]byte, 64<<10)
	var total int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		n, err := c.Write(buf)
		total += int64(n)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			c.SetWriteDeadline(time.Time{})
			return total, nil
		case err != nil:
			return total, err
		}
	}
	return total, fmt.Errorf("still writing after 30s (%d bytes): the peer reads", total)
}

// pingCheck pings addr from the namespace (busybox, through its ping
// socket) and wants an answer.
func pingCheck(addr string) error {
	out, err := exec.Command("busybox", "ping", "-c", "2", "-W", "3", addr).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s: %v\n%s", addr, err, out)
	}
	return nil
}

// liveTCP is what the hostile peer learnt of a live connection from the
// namespace's own segments: the four-tuple, as the namespace sends, and
// the sequence, acknowledgement and window it sent last.
type liveTCP struct {
	v6           bool
	src, dst     netip.Addr
	sport, dport uint16
	seq, ack     uint32
	win          uint16
}

// hostileGen builds the hostile frames.
type hostileGen struct {
	r       *rand.Rand
	ourMAC  net.HardwareAddr
	gwMAC   net.HardwareAddr // learnt from gopasta's frames; broadcast until then
	mtu     int
	mu      sync.Mutex
	live    map[uint16]liveTCP // by the test's port
	sniffed int
}

// hostileFrames is the peer's hostile command: for d, it writes frames of
// every kind hostileGen makes to the namespace's TAP, and reads the TAP's
// traffic to learn gopasta's MAC address and the live connections on ports.
func hostileFrames(d time.Duration, seed uint64, ports string) (string, error) {
	ifi, fd, err := tapPacketSocket()
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	g := &hostileGen{
		r:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		ourMAC: ifi.HardwareAddr,
		gwMAC:  net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		mtu:    ifi.MTU,
		live:   map[uint16]liveTCP{},
	}
	want := map[uint16]bool{}
	for _, p := range strings.Split(ports, ",") {
		if n, err := strconv.Atoi(p); err == nil {
			want[uint16(n)] = true
		}
	}
	stop := make(chan struct{})
	sniffDone := make(chan struct{})
	go func() {
		defer close(sniffDone)
		g.sniff(fd, want, stop)
	}()
	defer func() { close(stop); <-sniffDone }()
	// Let the sniffer see a few frames of the transfers first.
	time.Sleep(200 * time.Millisecond)

	counts := map[string]int{}
	var sent, failed, live int
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 64 {
			kind, fr := g.frame()
			if kind == "live" {
				live++
			}
			counts[kind]++
			if err := unix.Sendto(fd, fr, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}); err != nil {
				failed++ // too short or too long for the device: the kernel's check
				continue
			}
			sent++
		}
		// Leave the well-behaved flows some of the machine.
		time.Sleep(time.Millisecond)
	}
	kinds := slices.Sorted(func(yield func(string) bool) {
		for k := range counts {
			if !yield(k) {
				return
			}
		}
	})
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	g.mu.Lock()
	sniffed := g.sniffed
	g.mu.Unlock()
	return fmt.Sprintf("sent=%d refused=%d live=%d sniffed=%d on %s (%s)", sent, failed, live, sniffed, ifi.Name, strings.Join(parts, " ")), nil
}

// foreignMAC is a unicast address no interface of the test has.
var foreignMAC = net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x20, 0x30}

// foreignMACFrames is the peer's badmac command: frames every receiver must
// drop (an unknown EtherType, IPv4 cut short, a wrong IPv4 header checksum,
// a UDP datagram with a wrong checksum), all from foreignMAC. Dropping them
// must change nothing: frames toward the namespace still go to the TAP's
// own address, or its kernel would discard them all as not its own.
func foreignMACFrames() (string, error) {
	ifi, fd, err := tapPacketSocket()
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	g := &hostileGen{r: rand.New(rand.NewPCG(1, 2)), ourMAC: foreignMAC, gwMAC: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	udp := g.udpSeg(40000, 40001, []byte("foreign"))
	binary.BigEndian.PutUint16(udp[6:], 0x1234) // not its checksum
	badSum := g.ip(hNS4, hGW4, unix.IPPROTO_UDP, udp)
	badHdr := g.ip(hNS4, hGW4, unix.IPPROTO_UDP, g.udpSeg(40000, 40001, nil))
	badHdr[24] ^= 0xff // IPv4 header checksum
	frames := [][]byte{
		g.eth(0x88b5, make([]byte, 46)), // local experimental EtherType
		g.ip(hNS4, hGW4, unix.IPPROTO_UDP, g.udpSeg(40000, 40001, nil))[:20],
		badHdr,
		badSum,
	}
	for _, fr := range frames {
		if err := unix.Sendto(fd, fr, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}); err != nil {
			return "", fmt.Errorf("writing a %d-byte frame: %w", len(fr), err)
		}
	}
	return strconv.Itoa(len(frames)), nil
}

// tapPacketSocket opens an AF_PACKET socket bound to the namespace's TAP
// (tapInterface), which reads all its traffic and writes whole frames.
func tapPacketSocket() (*net.Interface, int, error) {
	ifi, err := tapInterface()
	if err != nil {
		return nil, -1, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, -1, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("binding to %s: %w", ifi.Name, err)
	}
	return ifi, fd, nil
}

// tapInterface is the namespace's interface that is not loopback.
func tapInterface() (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 {
			return &i, nil
		}
	}
	return nil, errors.New("no interface besides loopback")
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// sniff reads the TAP's frames until stop: gopasta's MAC address from what
// it sends, and the namespace's latest segment of each live connection on
// the wanted ports.
func (g *hostileGen) sniff(fd int, want map[uint16]bool, stop <-chan struct{}) {
	buf := make([]byte, 70000)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil || n < 14 {
			continue
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		if !ok {
			continue
		}
		fr := buf[:n]
		if ll.Pkttype != unix.PACKET_OUTGOING {
			g.mu.Lock()
			g.gwMAC = slices.Clone(net.HardwareAddr(fr[6:12]))
			g.mu.Unlock()
			continue
		}
		s, ok := parseTCP(fr)
		if !ok {
			continue
		}
		for _, p := range []uint16{s.sport, s.dport} {
			if want[p] {
				g.mu.Lock()
				g.live[p] = s
				g.sniffed++
				g.mu.Unlock()
			}
		}
	}
}

// parseTCP reads an Ethernet frame's TCP segment: four-tuple, sequence
// number past its payload, acknowledgement, window.
func parseTCP(fr []byte) (liveTCP, bool) {
	var s liveTCP
	var l4, end int
	switch binary.BigEndian.Uint16(fr[12:]) {
	case unix.ETH_P_IP:
		if len(fr) < 34 || fr[23] != unix.IPPROTO_TCP {
			return s, false
		}
		l4 = 14 + int(fr[14]&0xf)*4
		end = 14 + int(binary.BigEndian.Uint16(fr[16:]))
		s.src, _ = netip.AddrFromSlice(fr[26:30])
		s.dst, _ = netip.AddrFromSlice(fr[30:34])
	case unix.ETH_P_IPV6:
		if len(fr) < 54 || fr[20] != unix.IPPROTO_TCP {
			return s, false
		}
		s.v6 = true
		l4 = 54
		end = 54 + int(binary.BigEndian.Uint16(fr[18:]))
		s.src, _ = netip.AddrFromSlice(fr[22:38])
		s.dst, _ = netip.AddrFromSlice(fr[38:54])
	default:
		return s, false
	}
	if l4+20 > len(fr) || end > len(fr) {
		return s, false
	}
	t := fr[l4:]
	s.sport, s.dport = binary.BigEndian.Uint16(t), binary.BigEndian.Uint16(t[2:])
	plen := end - l4 - int(t[12]>>4)*4
	s.seq = binary.BigEndian.Uint32(t[4:]) + uint32(max(plen, 0))
	s.ack = binary.BigEndian.Uint32(t[8:])
	s.win = binary.BigEndian.Uint16(t[14:])
	return s, true
}

// frame makes one hostile frame and says what kind it is.
func (g *hostileGen) frame() (string, []byte) {
	kinds := []struct {
		name   string
		weight int
		make   func() []byte
	}{
		{"random", 4, g.random},
		{"truncated", 6, func() []byte { f := g.valid(); return f[:g.r.IntN(len(f)+1)] }},
		{"ipv4", 8, g.badIPv4},
		{"ipv6", 8, g.badIPv6},
		{"tcp", 10, g.badTCP},
		{"synflood", 6, g.synFlood},
		{"udp", 6, g.udpPorts},
		{"icmp", 4, g.icmp},
		{"arp", 3, g.arp},
		{"ndp", 3, g.ndp},
		{"dhcp", 3, g.dhcp},
		{"oversize", 1, g.oversize},
		{"live", 10, g.liveSegment},
	}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	n := g.r.IntN(total)
	for _, k := range kinds {
		if n < k.weight {
			fr := k.make()
			if fr == nil {
				return "live-none", g.random()
			}
			return k.name, fr
		}
		n -= k.weight
	}
	panic("unreachable")
}

func (g *hostileGen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
	return b
}

// random: random bytes, half with our own MAC as source (the rest say
// anything at all about who sent them).
func (g *hostileGen) random() []byte {
	b := g.bytes(g.r.IntN(200))
	if len(b) >= 12 && g.r.IntN(2) == 0 {
		copy(b[6:], g.ourMAC)
	}
	return b
}

func (g *hostileGen) eth(typ uint16, payload []byte) []byte {
	g.mu.Lock()
	dst := g.gwMAC
	g.mu.Unlock()
	b := make([]byte, 14, 14+len(payload))
	copy(b, dst)
	copy(b[6:], g.ourMAC)
	binary.BigEndian.PutUint16(b[12:], typ)
	return append(b, payload...)
}

// csum is the Internet checksum of b on top of the partial sum s.
func csum(b []byte, s uint32) uint16 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

func pseudo(src, dst netip.Addr, proto uint8, n int) uint32 {
	var s uint32
	for _, a := range []netip.Addr{src, dst} {
		b := a.AsSlice()
		for i := 0; i < len(b); i += 2 {
			s += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	return s + uint32(proto) + uint32(n)
}

// l4 finishes a transport header with its checksum at off (right, or in
// a quarter of the frames wrong) and wraps it in IP and Ethernet.
func (g *hostileGen) l4(src, dst netip.Addr, proto uint8, seg []byte, off int) []byte {
	c := csum(seg, pseudo(src, dst, proto, len(seg)))
	if g.r.IntN(4) == 0 {
		c ^= uint16(1 + g.r.IntN(0xffff))
	}
	binary.BigEndian.PutUint16(seg[off:], c)
	return g.ip(src, dst, proto, seg)
}

func (g *hostileGen) ip(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	if src.Is6() {
		h := make([]byte, 40, 40+len(payload))
		h[0] = 0x60
		binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
		h[6], h[7] = proto, 64
		copy(h[8:], src.AsSlice())
		copy(h[24:], dst.AsSlice())
		return g.eth(unix.ETH_P_IPV6, append(h, payload...))
	}
	return g.eth(unix.ETH_P_IP, ipv4Header(src, dst, proto, nil, payload))
}

func ipv4Header(src, dst netip.Addr, proto uint8, opts, payload []byte) []byte {
	hl := 20 + len(opts)
	h := make([]byte, hl, hl+len(payload))
	h[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(h[2:], uint16(hl+len(payload)))
	h[8], h[9] = 64, proto
	copy(h[12:], src.AsSlice())
	copy(h[16:], dst.AsSlice())
	copy(h[20:], opts)
	binary.BigEndian.PutUint16(h[10:], csum(h, 0))
	return append(h, payload...)
}

// dst picks one of the test's own destinations of the family.
func (g *hostileGen) dst(v6 bool) (src, dst netip.Addr) {
	if v6 {
		return hNS6, []netip.Addr{hGW6, hHost6}[g.r.IntN(2)]
	}
	return hNS4, []netip.Addr{hGW4, hHost4}[g.r.IntN(2)]
}

func (g *hostileGen) port() uint16 { return uint16(1024 + g.r.IntN(60000)) }

func (g *hostileGen) tcpSeg(flags byte, doff int, opts, payload []byte, sport, dport uint16, seq, ack uint32, win uint16) []byte {
	hl := 20 + len(opts)
	b := make([]byte, hl, hl+len(payload))
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], seq)
	binary.BigEndian.PutUint32(b[8:], ack)
	b[12] = byte(doff << 4)
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], win)
	copy(b[20:], opts)
	return append(b, payload...)
}

func (g *hostileGen) udpSeg(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

// valid is a well-formed frame of a random kind, for cutting short.
func (g *hostileGen) valid() []byte {
	v6 := g.r.IntN(2) == 0
	src, dst := g.dst(v6)
	switch g.r.IntN(5) {
	case 0:
		return g.arp()
	case 1:
		return g.l4(src, dst, unix.IPPROTO_UDP, g.udpSeg(g.port(), g.port(), g.bytes(g.r.IntN(64))), 6)
	case 2:
		return g.l4(src, dst, unix.IPPROTO_TCP, g.tcpSeg(0x02, 5, nil, nil, g.port(), g.port(), g.r.Uint32(), 0, 65535), 16)
	case 3:
		return g.ndp()
	}
	return g.icmp()
}

// badIPv4: header length below 5 or past the frame, total length longer
// or shorter than the frame, fragments, options, a wrong version, with
// the header checksum recomputed or not.
func (g *hostileGen) badIPv4() []byte {
	src, dst := g.dst(false)
	proto := []uint8{unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMP, 0, 255}[g.r.IntN(5)]
	payload := g.bytes(g.r.IntN(100))
	var opts []byte
	if g.r.IntN(3) == 0 {
		opts = g.bytes(4 * (1 + g.r.IntN(10)))
		if g.r.IntN(2) == 0 {
			opts[0], opts[1] = 0x94, 4 // router alert
		}
	}
	h := ipv4Header(src, dst, proto, opts, payload)
	switch g.r.IntN(6) {
	case 0:
		h[0] = 0x40 | byte(g.r.IntN(16))
	case 1:
		binary.BigEndian.PutUint16(h[2:], uint16(len(h)+1+g.r.IntN(2000)))
	case 2:
		binary.BigEndian.PutUint16(h[2:], uint16(g.r.IntN(len(h))))
	case 3:
		binary.BigEndian.PutUint16(h[6:], uint16(g.r.IntN(0x10000))|0x2000) // MF
	case 4:
		binary.BigEndian.PutUint16(h[6:], uint16(1+g.r.IntN(0x1fff))) // an offset
	case 5:
		h[0] = byte(g.r.IntN(16))<<4 | 5
	}
	if g.r.IntN(4) != 0 {
		hl := min(int(h[0]&0xf)*4, len(h))
		h[10], h[11] = 0, 0
		binary.BigEndian.PutUint16(h[10:], csum(h[:hl], 0))
	}
	return g.eth(unix.ETH_P_IP, h)
}

// badIPv6: chains of extension headers (fragment headers among them), a
// hop-by-hop jumbo option, payload length 0 with data, or far beyond it.
func (g *hostileGen) badIPv6() []byte {
	src, dst := g.dst(true)
	var chain []byte
	types := []uint8{0, 43, 60, 44, 51, 59}
	last := []uint8{unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMPV6, 59, 255}[g.r.IntN(5)]
	n := g.r.IntN(12)
	hdrTypes := make([]uint8, n)
	for i := range hdrTypes {
		hdrTypes[i] = types[g.r.IntN(len(types))]
	}
	first := last
	if n > 0 {
		first = hdrTypes[0]
	}
	for i, ty := range hdrTypes {
		next := last
		if i+1 < n {
			next = hdrTypes[i+1]
		}
		var h []byte
		switch ty {
		case 44:
			h = make([]byte, 8)
			binary.BigEndian.PutUint16(h[2:], uint16(g.r.IntN(0x10000)))
		case 0:
			if g.r.IntN(3) == 0 {
				h = []byte{0, 0, 0xc2, 4, 0, 1, 0, 0} // jumbo payload
			} else {
				h = g.bytes(8 * (1 + g.r.IntN(3)))
				h[1] = byte(len(h)/8 - 1)
			}
		default:
			h = g.bytes(8 * (1 + g.r.IntN(3)))
			h[1] = byte(len(h)/8 - 1)
			if g.r.IntN(4) == 0 {
				h[1] = byte(g.r.IntN(256)) // the length lies
			}
		}
		h[0] = next
		chain = append(chain, h...)
	}
	body := g.bytes(g.r.IntN(80))
	if last == unix.IPPROTO_TCP && len(body) >= 20 {
		body[12] = 5 << 4
	}
	payload := append(chain, body...)
	fr := g.ip(src, dst, first, payload)
	switch g.r.IntN(4) {
	case 0:
		binary.BigEndian.PutUint16(fr[18:], 0)
	case 1:
		binary.BigEndian.PutUint16(fr[18:], uint16(len(payload)+1+g.r.IntN(0x10000-len(payload)-1)))
	}
	return fr
}

// tcpOptions are options of every shape: lengths 0 and 1, past the header,
// and sane ones.
func (g *hostileGen) tcpOptions() []byte {
	var o []byte
	for range g.r.IntN(6) {
		switch g.r.IntN(6) {
		case 0:
			o = append(o, 2, 4, byte(g.r.IntN(256)), byte(g.r.IntN(256))) // MSS, maybe 0
		case 1:
			o = append(o, 3, 3, byte(g.r.IntN(256))) // window scale beyond 14 too
		case 2:
			o = append(o, byte(g.r.IntN(256)), 0)
		case 3:
			o = append(o, byte(g.r.IntN(256)), 1)
		case 4:
			o = append(o, byte(g.r.IntN(256)), byte(40+g.r.IntN(200)))
		case 5:
			o = append(o, 1)
		}
	}
	for len(o)%4 != 0 {
		o = append(o, 0)
	}
	return o[:min(len(o), 40)]
}

// badTCP: every flag combination, data offsets below 5 and past the
// segment, odd options, SYNs with data.
func (g *hostileGen) badTCP() []byte {
	v6 := g.r.IntN(2) == 0
	src, dst := g.dst(v6)
	opts := g.tcpOptions()
	doff := 5 + len(opts)/4
	switch g.r.IntN(4) {
	case 0:
		doff = g.r.IntN(5)
	case 1:
		doff = 5 + len(opts)/4 + 1 + g.r.IntN(10-len(opts)/4)
	}
	seg := g.tcpSeg(byte(g.r.IntN(256)), doff, opts, g.bytes(g.r.IntN(300)), g.port(), g.port(), g.r.Uint32(), g.r.Uint32(), uint16(g.r.Uint32()))
	return g.l4(src, dst, unix.IPPROTO_TCP, seg, 16)
}

// synFlood: SYNs (some with data) to many ports of the gateway and the
// host; nothing listens on almost all, so each is refused.
func (g *hostileGen) synFlood() []byte {
	v6 := g.r.IntN(2) == 0
	src, dst := g.dst(v6)
	var data []byte
	if g.r.IntN(4) == 0 {
		data = g.bytes(1 + g.r.IntN(100))
	}
	seg := g.tcpSeg(0x02, 6, []byte{2, 4, 5, 0xb4}, data, g.port(), g.port(), g.r.Uint32(), 0, 65535)
	return g.l4(src, dst, unix.IPPROTO_TCP, seg, 16)
}

// udpPorts: datagrams to many ports (flow-table pressure), some with a
// length field that lies.
func (g *hostileGen) udpPorts() []byte {
	v6 := g.r.IntN(2) == 0
	src, dst := g.dst(v6)
	seg := g.udpSeg(g.port(), g.port(), g.bytes(g.r.IntN(200)))
	if g.r.IntN(5) == 0 {
		binary.BigEndian.PutUint16(seg[4:], uint16(g.r.IntN(0x10000)))
	}
	return g.l4(src, dst, unix.IPPROTO_UDP, seg, 6)
}

// icmp: echo requests of odd sizes and identifiers, checksums right and
// wrong, and other types.
func (g *hostileGen) icmp() []byte {
	v6 := g.r.IntN(2) == 0
	src, dst := g.dst(v6)
	typ, proto := byte(8), uint8(unix.IPPROTO_ICMP)
	if v6 {
		typ, proto = 128, unix.IPPROTO_ICMPV6
	}
	if g.r.IntN(4) == 0 {
		typ = byte(g.r.IntN(256))
	}
	b := append([]byte{typ, byte(g.r.IntN(2)), 0, 0}, g.bytes(4+g.r.IntN(1500))...)
	if !v6 {
		// ICMPv4's checksum has no pseudo-header.
		c := csum(b, 0)
		if g.r.IntN(3) == 0 {
			c++
		}
		binary.BigEndian.PutUint16(b[2:], c)
		return g.ip(src, dst, proto, b)
	}
	return g.l4(src, dst, proto, b, 2)
}

// arp: requests and replies with wrong hardware and protocol lengths,
// opcodes, and lengths cut short or padded.
func (g *hostileGen) arp() []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b, 1)
	binary.BigEndian.PutUint16(b[2:], unix.ETH_P_IP)
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:], uint16(1+g.r.IntN(2)))
	copy(b[8:], g.ourMAC)
	copy(b[14:], hNS4.AsSlice())
	copy(b[24:], hGW4.AsSlice())
	switch g.r.IntN(5) {
	case 0:
		b[4], b[5] = byte(g.r.IntN(256)), byte(g.r.IntN(256))
	case 1:
		b = b[:g.r.IntN(28)]
	case 2:
		binary.BigEndian.PutUint16(b[6:], uint16(g.r.IntN(0x10000)))
	case 3:
		b[27] = byte(g.r.IntN(256)) // another address in 192.0.2.0/24
	}
	return g.eth(unix.ETH_P_ARP, b)
}

// ndp: neighbour and router solicitations with option lengths 0, past the
// end, and the message cut short.
func (g *hostileGen) ndp() []byte {
	src := hNS6
	typ := byte(135)
	b := []byte{typ, 0, 0, 0, 0, 0, 0, 0}
	if g.r.IntN(3) == 0 {
		b[0] = 133 // router solicitation
	} else {
		b = append(b, hGW6.AsSlice()...)
	}
	opt := append([]byte{1, 1}, g.ourMAC...)
	switch g.r.IntN(4) {
	case 0:
		opt[1] = 0
	case 1:
		opt[1] = byte(2 + g.r.IntN(250))
	case 2:
		opt = append(opt, g.bytes(g.r.IntN(20))...)
	}
	b = append(b, opt...)
	if g.r.IntN(5) == 0 {
		b = b[:4+g.r.IntN(len(b)-4)]
	}
	dst := netip.MustParseAddr("ff02::1:ff00:fe")
	if b[0] == 133 {
		dst = netip.MustParseAddr("ff02::2")
	}
	c := csum(b, pseudo(src, dst, unix.IPPROTO_ICMPV6, len(b)))
	if g.r.IntN(4) == 0 {
		c++
	}
	binary.BigEndian.PutUint16(b[2:], c)
	fr := g.ip(src, dst, unix.IPPROTO_ICMPV6, b)
	fr[21] = 255 // hop limit, as NDP wants
	return fr
}

// dhcp: DHCP to port 67 and DHCPv6 to 547: messages cut short, options of
// lengths past the end, random types.
func (g *hostileGen) dhcp() []byte {
	if g.r.IntN(2) == 0 {
		b := make([]byte, 240)
		b[0], b[1], b[2] = 1, 1, 6
		copy(b[28:], g.ourMAC)
		copy(b[236:], []byte{99, 130, 83, 99})
		for range g.r.IntN(8) {
			code := byte(g.r.IntN(256))
			if g.r.IntN(2) == 0 {
				code = 53
			}
			l := g.r.IntN(12)
			b = append(b, code, byte(l))
			b = append(b, g.bytes(l)...)
		}
		if g.r.IntN(2) == 0 {
			b = append(b, 53, 200) // length past the end
		} else {
			b = append(b, 255)
		}
		if g.r.IntN(4) == 0 {
			b = b[:g.r.IntN(len(b))]
		}
		seg := g.udpSeg(68, 67, b)
		bcast := netip.MustParseAddr("255.255.255.255")
		return g.l4(netip.IPv4Unspecified(), []netip.Addr{bcast, hGW4}[g.r.IntN(2)], unix.IPPROTO_UDP, seg, 6)
	}
	b := []byte{byte(1 + g.r.IntN(13)), byte(g.r.IntN(256)), byte(g.r.IntN(256)), byte(g.r.IntN(256))}
	for range g.r.IntN(8) {
		l := g.r.IntN(20)
		opt := binary.BigEndian.AppendUint16(nil, uint16(1+g.r.IntN(30)))
		if g.r.IntN(5) == 0 {
			opt = binary.BigEndian.AppendUint16(opt, uint16(l+1+g.r.IntN(1000))) // past the end
		} else {
			opt = binary.BigEndian.AppendUint16(opt, uint16(l))
		}
		b = append(b, append(opt, g.bytes(l)...)...)
	}
	seg := g.udpSeg(546, 547, b)
	return g.l4(netip.MustParseAddr("fe80::2"), netip.MustParseAddr("ff02::1:2"), unix.IPPROTO_UDP, seg, 6)
}

// oversize: frames up to a few bytes longer than the MTU allows; the
// kernel refuses most, and what it passes must be dropped cleanly.
func (g *hostileGen) oversize() []byte {
	v6 := g.r.IntN(2) == 0
	src, dst := g.dst(v6)
	n := g.mtu - 28 + g.r.IntN(40)
	if v6 {
		n -= 20
	}
	return g.l4(src, dst, unix.IPPROTO_UDP, g.udpSeg(g.port(), g.port(), g.bytes(max(n, 0))), 6)
}

// liveSegment: a segment on a live transfer's four-tuple that the real
// kernel ignores or only answers with an ACK: data and resets far outside
// the window (either side of it), SYNs, ACKs of data never sent, data
// at the next sequence number with a wrong checksum. None of their bytes
// may reach the other end.
func (g *hostileGen) liveSegment() []byte {
	g.mu.Lock()
	var tuples []liveTCP
	for _, s := range g.live {
		tuples = append(tuples, s)
	}
	g.mu.Unlock()
	if len(tuples) == 0 {
		return nil
	}
	slices.SortFunc(tuples, func(a, b liveTCP) int { return int(a.sport) - int(b.sport) })
	s := tuples[g.r.IntN(len(tuples))]
	far := uint32(1<<30 + g.r.IntN(1<<29))
	if g.r.IntN(2) == 0 {
		far = -far
	}
	const ack, psh, rst, syn, fin = 0x10, 0x08, 0x04, 0x02, 0x01
	var flags byte
	seq, ackN, win := s.seq+far, s.ack, s.win
	var data []byte
	badSum := false
	switch g.r.IntN(7) {
	case 0, 1:
		flags, data = ack|psh, g.bytes(1+g.r.IntN(1400))
	case 2:
		flags = rst
	case 3:
		flags = rst | ack
	case 4:
		flags, seq = syn, g.r.Uint32()
	case 5:
		flags, ackN = ack, s.ack+far // acknowledges the future, or the distant past
		data = g.bytes(g.r.IntN(2) * (1 + g.r.IntN(1000)))
	case 6:
		flags, seq, data, badSum = ack|psh, s.seq, g.bytes(1+g.r.IntN(1400)), true
	}
	if g.r.IntN(8) == 0 {
		flags |= fin
	}
	seg := g.tcpSeg(flags, 5, nil, data, s.sport, s.dport, seq, ackN, win)
	c := csum(seg, pseudo(s.src, s.dst, unix.IPPROTO_TCP, len(seg)))
	if badSum {
		c ^= 0x5a5a
	}
	binary.BigEndian.PutUint16(seg[16:], c)
	return g.ip(s.src, s.dst, unix.IPPROTO_TCP, seg)
}
