package e2e

// At a limit, gopasta refuses what is new and keeps what is established:
// the tests here run it out of descriptors for real (prlimit), under its
// real sandbox, on every path a connection can take.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// refusedLine captures the refused TCP connections of a --stats line.
var refusedLine = regexp.MustCompile(`stats .*\brefused_tcp=(\d+)`)

// TestDescriptorLimit: gopasta with a descriptor limit of 300 takes
// connection storms on the four TCP paths at once (host to namespace over
// the TAP and spliced, namespace to host over the TAP and spliced with -T),
// far more than the limit holds. Every attempt is either held (it echoes)
// or refused with a reset, none hangs; four paced transfers opened before
// the storms finish intact; gopasta lives, says so in one episode of log
// lines rather than one per connection, counts the refusals in --stats,
// and once the storms let go serves new connections on every path at once
// with its descriptors back where they were.
func TestDescriptorLimit(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const limit, storm = 300, 150
			const tPort, hServe = 18411, 18412
			hPort := e.serveTCP(t, ":0", "")
			e.serveTCP(t, fmt.Sprintf("127.0.0.1:%d", hServe), "")
			pidFile := nstest.TempDir(t) + "/gopasta.pid"
			// The limit is gopasta's alone: the agent, in the namespace
			// gopasta attaches to, keeps the machine's.
			sl := e.startSleeper(t)
			args := slices.Concat(hostileArgs, []string{
				"-t", strconv.Itoa(tPort), "-u", "none", "-T", strconv.Itoa(hServe), "-U", "none",
				"--stats", "1", "-f", "-P", pidFile, strconv.Itoa(sl.PID())})
			gp := e.h.Start(e.u, slices.Concat([]string{"prlimit", fmt.Sprintf("--nofile=%d:%d", limit, limit), "--"},
				e.gopasta(args...))...)
			pid := waitPIDFile(t, gp, pidFile)
			ag := e.startAgentIn(t, sl.PID())
			ag.must(t, 10*time.Second, "listen", fmt.Sprintf("[::]:%d", tPort))
			e.waitServing(t, gp, addrPort("127.0.0.1", tPort), 20*time.Second)
			e.waitServing(t, gp, addrPort(nstest.HostAddr4, tPort), 20*time.Second)

			type route struct {
				name string
				hold func(n int) (string, error) // opens n connections, kept open
			}
			var mu sync.Mutex
			var hostHeld []net.Conn
			hostHold := func(local netip.Addr, dst string) func(int) (string, error) {
				return func(n int) (string, error) {
					cs, cnt := holdConns(func() (net.Conn, error) { return e.dial("tcp", local, addrPort(dst, tPort)) }, n)
					mu.Lock()
					hostHeld = append(hostHeld, cs...)
					mu.Unlock()
					return cnt.String(), nil
				}
			}
			// Agent commands that run beside others go through its bg
			// command, each under an id of its own.
			var bgN atomic.Int32
			agentBg := func(args ...string) (string, error) {
				id := fmt.Sprintf("x%d", bgN.Add(1))
				if _, err := ag.do(10*time.Second, append([]string{"bg", id}, args...)...); err != nil {
					return "", err
				}
				return ag.waitBg(id, 2*time.Minute)
			}
			agentHold := func(dst string) func(int) (string, error) {
				return func(n int) (string, error) { return agentBg("hold", dst, strconv.Itoa(n)) }
			}
			routes := []route{
				{"host to namespace, TAP", hostHold(netip.MustParseAddr(peer4), nstest.HostAddr4)},
				{"host to namespace, spliced", hostHold(netip.Addr{}, "127.0.0.1")},
				{"namespace to host, TAP", agentHold(fmt.Sprintf("192.0.2.254:%d", hPort))},
				{"namespace to host, spliced (-T)", agentHold(fmt.Sprintf("127.0.0.1:%d", hServe))},
			}

			// The baseline: with the splice loop's pipe pool (a bounded
			// cache of idle pipes) as full as spliced connections leave
			// it, which is how it will be after the storms too.
			warm, cnt := holdConns(func() (net.Conn, error) { return e.dial("tcp", netip.Addr{}, addrPort("127.0.0.1", tPort)) }, 16)
			if cnt.held != 16 {
				t.Fatalf("16 spliced connections before the storms: %s", cnt)
			}
			for _, c := range warm {
				c.Close()
			}
			var base int
			err := nstest.WaitFor(5*time.Second, func() (err error) {
				n, err := countFDs(pid)
				if err == nil && n != base {
					base, err = n, errors.New("still changing")
				}
				return err
			})
			if err != nil {
				t.Fatalf("gopasta's descriptors before the storms: %v", err)
			}

			// Paced transfers, one per path, open before the storms and
			// busy through them.
			const paced, pace = 4 << 20, 4 * time.Second
			xfers := make(chan error, 4)
			for i, dst := range []string{fmt.Sprintf("192.0.2.254:%d", hPort), fmt.Sprintf("127.0.0.1:%d", hServe)} {
				go func() {
					_, err := agentBg("slowput", dst, strconv.Itoa(paced), strconv.Itoa(50+i), strconv.Itoa(int(pace/time.Millisecond)))
					xfers <- err
				}()
			}
			for i, p := range []path{{"tap", netip.MustParseAddr(peer4), nstest.HostAddr4}, {"splice", netip.Addr{}, "127.0.0.1"}} {
				go func() {
					c, err := e.dial("tcp", p.local, addrPort(p.dst, tPort))
					if err == nil {
						defer c.Close()
						err = slowPut(c, paced, uint64(60+i), pace)
					}
					xfers <- err
				}()
			}
			time.Sleep(300 * time.Millisecond)

			res := make([]string, len(routes))
			errs := make([]error, len(routes))
			var wg sync.WaitGroup
			for i, r := range routes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res[i], errs[i] = r.hold(storm)
				}()
			}
			wg.Wait()
			refused := 0
			for i, r := range routes {
				if errs[i] != nil {
					t.Fatalf("%s: %v", r.name, errs[i])
				}
				var held, ref, failed int
				if _, err := fmt.Sscanf(res[i], "held %d refused %d failed %d ", &held, &ref, &failed); err != nil {
					t.Fatalf("%s: %q: %v", r.name, res[i], err)
				}
				t.Logf("%s: %d connections: %s", r.name, storm, res[i])
				if failed != 0 {
					t.Errorf("%s: %d of %d connections neither held nor refused (timed out or failed otherwise), want 0", r.name, failed, storm)
				}
				refused += ref
			}
			if refused == 0 {
				t.Errorf("the storms: got no connection refused with a limit of %d descriptors, want some", limit)
			}
			for range 4 {
				if err := <-xfers; err != nil {
					t.Errorf("a transfer established before the storms: %v", err)
				}
			}

			// Let go, then every path serves at once.
			mu.Lock()
			for _, c := range hostHeld {
				c.Close()
			}
			mu.Unlock()
			ag.must(t, 10*time.Second, "release")
			released := time.Now()
			for _, r := range routes {
				err := nstest.WaitFor(2*time.Second, func() error {
					out, err := r.hold(1)
					if err == nil && !strings.HasPrefix(out, "held 1 ") {
						err = errors.New(out)
					}
					return err
				})
				if err != nil {
					t.Errorf("%s after the storms: got %v, want a connection served within 2s", r.name, err)
				}
			}
			t.Logf("every path served again %v after the release", time.Since(released).Round(time.Millisecond))
			mu.Lock()
			for _, c := range hostHeld {
				c.Close()
			}
			mu.Unlock()
			ag.must(t, 10*time.Second, "release")
			err = nstest.WaitFor(10*time.Second, func() error {
				n, err := countFDs(pid)
				if err != nil {
					return nstest.Stop(err)
				}
				if n > base {
					return fmt.Errorf("gopasta holds %d descriptors, want at most the %d it held before the storms", n, base)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
				r := nstest.Run(t, nstest.RootUser, "ls", "-l", fmt.Sprintf("/proc/%d/fd", pid))
				t.Logf("gopasta's descriptors:\n%s", r.Stdout)
			}
			err = nstest.WaitFor(5*time.Second, func() error {
				_, stderr := gp.Output()
				m := refusedLine.FindAllStringSubmatch(stderr, -1)
				if len(m) == 0 {
					return errors.New("no --stats line with refusals yet")
				}
				if n, _ := strconv.Atoi(m[len(m)-1][1]); n < refused {
					return fmt.Errorf("--stats: refused_tcp=%d, want at least the %d the storms saw refused", n, refused)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			_, stderr := gp.Output()
			if n := strings.Count(stderr, "refusing new connections"); n < 1 || n > 2 {
				t.Errorf("log: got %d lines starting an episode of refusals, want 1 or 2:\n%s", n, stderr)
			}
			checkNoPanic(t, nstest.Result{Stderr: stderr})
			select {
			case <-gp.Done():
				t.Fatalf("gopasta exited during the test:\n%s", stderr)
			default:
			}
		})
	}
}

// faultsLine captures the counts of the "faults injected" line a
// faultinject build logs at exit (package faults).
var faultsLine = regexp.MustCompile(`faults injected counts="([^"]*)"`)

// TestInjectedFaults drives the event loops' error paths that a test
// cannot bring about for real, or not at every call site: a gopasta built
// with package faults' failures (every fourth call at each site fails with
// the next of the site's errors: EMFILE, ENFILE, ENOBUFS, ENOMEM, ENOSPC)
// forwards TCP both ways over the TAP and spliced, UDP both ways and ICMP
// echo, under its real, killing seccomp filter. Whatever the failures,
// gopasta lives (no SIGSYS, no panic), every path still serves within a
// few tries, and at exit it reports every site failing with every one of
// its errors.
func TestInjectedFaults(t *testing.T) {
	if os.Getenv(nstest.BinEnv) != "" {
		t.Skip("fault injection needs gopasta's own test build")
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true, ping: true})
			e.bin = nstest.BinaryWithTags(t, "faultinject")
			// The filter kills, whatever mode the run asked nstest to
			// pass on (make test's report mode): a call outside the
			// allowlist on an error path must fail this test.
			e.gopastaEnv = []string{"-u", "GOPASTA_SECCOMP", "-u", "GOPASTA_SECCOMP_REPORT", "GOPASTA_FAULTS=every=4"}
			const tPort, hServe, hUDP = 18421, 18422, 18423
			hPort := e.serveTCP(t, ":0", "")
			e.serveTCP(t, fmt.Sprintf("127.0.0.1:%d", hServe), "")
			uPort := e.serveUDP(t, ":0")
			e.serveUDP(t, fmt.Sprintf("127.0.0.1:%d", hUDP))
			ag := e.startAgent(t, slices.Concat(hostileArgs, []string{
				"-t", strconv.Itoa(tPort), "-u", strconv.Itoa(tPort),
				"-T", strconv.Itoa(hServe), "-U", strconv.Itoa(hUDP)})...)
			ag.serve(t, tPort)

			// Each round: connections on every TCP path, some held at once
			// (new pipes, not the pool's), UDP datagrams on every path from
			// new sockets (new flows), pings. Failures are expected; a round
			// only has to run.
			hostHold := func(local netip.Addr, dst string, n int) {
				cs, _ := holdConns(func() (net.Conn, error) { return e.dial("tcp", local, addrPort(dst, tPort)) }, n)
				for _, c := range cs {
					c.Close()
				}
			}
			hostSpray := func(local netip.Addr, dst string, n int) {
				for range n {
					if c, err := e.dial("udp", local, addrPort(dst, tPort)); err == nil {
						c.Write([]byte("spray"))
						c.Close()
					}
				}
			}
			for round := range 2 {
				hostHold(netip.MustParseAddr(peer4), nstest.HostAddr4, 10)
				hostHold(netip.Addr{}, "127.0.0.1", 24)
				ag.do(time.Minute, "hold", fmt.Sprintf("192.0.2.254:%d", hPort), "10")
				ag.do(time.Minute, "hold", fmt.Sprintf("127.0.0.1:%d", hServe), "24")
				ag.do(10*time.Second, "release")
				ag.do(20*time.Second, "udpspray", fmt.Sprintf("192.0.2.254:%d", uPort), "30")
				ag.do(20*time.Second, "udpspray", fmt.Sprintf("127.0.0.1:%d", hUDP), "30")
				hostSpray(netip.MustParseAddr(peer4), nstest.HostAddr4, 30)
				hostSpray(netip.Addr{}, "127.0.0.1", 30)
				ag.do(20*time.Second, "ping", "192.0.2.254")
				select {
				case <-ag.proc.Done():
					r, _ := ag.proc.Wait(0)
					t.Fatalf("gopasta exited in round %d: %s", round, r)
				default:
				}
			}

			// Every path still serves, in a few tries.
			for _, p := range []path{{"tap", netip.MustParseAddr(peer4), nstest.HostAddr4}, {"splice", netip.Addr{}, "127.0.0.1"}} {
				err := nstest.WaitFor(20*time.Second, func() error { return e.put(p.local, addrPort(p.dst, tPort), 64<<10, 3) })
				if err != nil {
					t.Errorf("host to namespace, %s, after the faults: %v", p.name, err)
				}
			}
			for _, dst := range []string{fmt.Sprintf("192.0.2.254:%d", hPort), fmt.Sprintf("127.0.0.1:%d", hServe)} {
				if _, err := ag.do(time.Minute, "waitput", dst, "20000"); err != nil {
					t.Errorf("namespace to host (%s) after the faults: %v", dst, err)
				}
			}
			for _, p := range []path{{"tap", netip.MustParseAddr(peer4), nstest.HostAddr4}, {"splice", netip.Addr{}, "127.0.0.1"}} {
				err := nstest.WaitFor(20*time.Second, func() error { return e.udpEcho(p.local, addrPort(p.dst, tPort)) })
				if err != nil {
					t.Errorf("UDP host to namespace, %s, after the faults: %v", p.name, err)
				}
			}
			for _, dst := range []string{fmt.Sprintf("192.0.2.254:%d", uPort), fmt.Sprintf("127.0.0.1:%d", hUDP)} {
				err := nstest.WaitFor(30*time.Second, func() error { _, err := ag.do(20*time.Second, "udp", dst, "1"); return err })
				if err != nil {
					t.Errorf("UDP namespace to host (%s) after the faults: %v", dst, err)
				}
			}

			ag.exit()
			r, ok := ag.proc.Wait(30 * time.Second)
			if !ok {
				t.Fatal("gopasta: got no exit within 30s of the agent's end")
			}
			checkNoPanic(t, r)
			if r.Code != 0 {
				t.Fatalf("gopasta: got exit %d, want 0 (159 is the seccomp filter's SIGSYS)\n%s", r.Code, r)
			}
			m := faultsLine.FindStringSubmatch(r.Stderr)
			if m == nil {
				t.Fatalf("gopasta's log: got no \"faults injected\" line, want one at exit:\n%s", r.Stderr)
			}
			t.Logf("injected: %s", m[1])
			for _, c := range strings.Fields(m[1]) {
				if strings.HasSuffix(c, "=0") {
					t.Errorf("injected %s: got none, want that error path driven at least once", strings.TrimSuffix(c, "=0"))
				}
			}
		})
	}
}
