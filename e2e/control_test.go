package e2e

// The control socket (-c PATH) and pesto, as root and as uid 65534: the
// listing, rules added, deleted, cleared and replaced while gopasta runs,
// reached over the TAP path (a non-loopback host peer) and the splice path
// (host loopback); ranges with exclusions, ADDR%IF rules, auto; a change
// of target; established connections across updates; and hostile
// clients, including one that stalls mid-update while traffic flows.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// ctl is a gopasta's control socket and the pesto to talk to it.
type ctl struct {
	e     *env
	sock  string
	pesto string // a symbolic link named pesto to the gopasta binary
}

// newCtl prepares a socket path and pesto. It skips when the binary under
// test has no control socket (GOPASTA_BIN naming Debian's pasta).
func newCtl(t *testing.T, e *env) *ctl {
	t.Helper()
	if r := nstest.Run(t, nstest.RootUser, e.bin, "--help"); !strings.Contains(r.Stdout, "--conf-path") {
		t.Skipf("%s has no --conf-path", e.bin)
	}
	dir := nstest.TempDir(t)
	c := &ctl{e: e, sock: filepath.Join(dir, "ctl"), pesto: filepath.Join(dir, "pesto")}
	if err := os.Symlink(e.bin, c.pesto); err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs pesto args... SOCK as the test's user, in the host namespace.
func (c *ctl) run(t *testing.T, args ...string) nstest.Result {
	t.Helper()
	return c.e.runArgv(t, append(append([]string{c.pesto}, args...), c.sock)...)
}

// must runs pesto and fails the test unless it exits 0.
func (c *ctl) must(t *testing.T, args ...string) string {
	t.Helper()
	r := c.run(t, args...)
	mustSucceed(t, fmt.Sprintf("pesto %q", args), r)
	return r.Stdout
}

// listing is what pesto lists for these HOST and SPLICE rules.
func (c *ctl) listing(host, splice []string) string {
	var b strings.Builder
	b.WriteString("passt/pasta configuration (" + c.sock + ")\n  HOST\n")
	for _, r := range host {
		b.WriteString("    " + r + "\n")
	}
	b.WriteString("  SPLICE\n")
	for _, r := range splice {
		b.WriteString("    " + r + "\n")
	}
	return b.String()
}

// wantListing fails the test unless pesto lists exactly host and splice.
func (c *ctl) wantListing(t *testing.T, what string, host, splice []string) {
	t.Helper()
	if got, want := c.must(t), c.listing(host, splice); got != want {
		t.Errorf("%s: pesto lists\n%s\nwant\n%s", what, got, want)
	}
}

// reachable checks a transfer to port over each path.
func reachable(t *testing.T, e *env, what string, port int, ps ...path) {
	t.Helper()
	for _, p := range ps {
		dst := addrPort(p.dst, port)
		// An update is applied right after pesto exits, not before: allow
		// the moment it takes.
		if err := nstest.WaitFor(3*time.Second, func() error { return e.put(p.local, dst, 64<<10, uint64(port)) }); err != nil {
			t.Errorf("%s: %s to port %d: %v", what, p.name, port, err)
		}
	}
}

// refused checks that nothing listens on port for each path.
func refused(t *testing.T, e *env, what string, port int, ps ...path) {
	t.Helper()
	for _, p := range ps {
		dst := addrPort(p.dst, port)
		err := nstest.WaitFor(3*time.Second, func() error {
			c, err := e.dial("tcp", p.local, dst)
			if err == nil {
				c.Close()
				return errors.New("connected")
			}
			if errors.Is(err, syscall.ECONNRESET) {
				// pesto exits before gopasta applies the update (the
				// protocol has no reply): a handshake the old listener
				// completed is reset as it closes. Not yet refused.
				return err
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return nstest.Stop(err)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %s to port %d: got %v, want the connection refused", what, p.name, port, err)
		}
	}
}

func pathNamed(name string) path {
	for _, p := range paths() {
		if p.name == name {
			return p
		}
	}
	panic(name)
}

// TestControl: pesto against a running gopasta: list, add, delete, clear,
// replace; ranges with exclusions, ADDR%IF, auto, a new target; 200
// connections on a port that stays survive a series of updates.
func TestControl(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			c := newCtl(t, e)
			const base = 18300
			ag := e.startAgent(t, "--config-net", "-c", c.sock, "-t", strconv.Itoa(base+1), "-u", "none", "-T", "none", "-U", "none")
			for p := base + 1; p <= base+15; p++ {
				ag.serve(t, p)
			}
			all := paths()

			// The socket: 0600, owned by the user gopasta runs as.
			var st syscall.Stat_t
			if err := syscall.Lstat(c.sock, &st); err != nil {
				t.Fatal(err)
			} else if st.Mode&0o777 != 0o600 || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || int(st.Uid) != u.UID {
				t.Errorf("control socket: mode %o owner %d, want a socket, 0600, owned by %d", st.Mode, st.Uid, u.UID)
			}

			c.wantListing(t, "at start", []string{fmt.Sprintf("TCP [*]:%d  =>  %d ", base+1, base+1)}, nil)
			reachable(t, e, "at start", base+1, all...)

			// Add, on every path; delete, and it refuses.
			if out := c.must(t, "-A", "-t", strconv.Itoa(base+2)); out != "" {
				t.Errorf("pesto -A: got output %q, want none", out)
			}
			reachable(t, e, "after -A", base+2, all...)
			c.wantListing(t, "after -A", []string{
				fmt.Sprintf("TCP [*]:%d  =>  %d ", base+1, base+1),
				fmt.Sprintf("TCP [*]:%d  =>  %d ", base+2, base+2),
			}, nil)
			c.must(t, "-D", "-t", strconv.Itoa(base+2))
			refused(t, e, "after -D", base+2, all...)
			reachable(t, e, "after -D, the other rule", base+1, all...)

			// Clear a table.
			c.must(t, "-C", "HOST")
			refused(t, e, "after -C HOST", base+1, all...)
			c.wantListing(t, "after -C HOST", nil, nil)

			// Replace everything: a range with an exclusion, UDP, and a
			// namespace-to-host rule.
			c.must(t, "-t", fmt.Sprintf("%d-%d,~%d", base+3, base+6, base+4), "-u", strconv.Itoa(base+3), "-T", strconv.Itoa(base+20))
			c.wantListing(t, "after replacing everything", []string{
				fmt.Sprintf("TCP [*]:%d  =>  %d ", base+3, base+3),
				fmt.Sprintf("TCP [*]:%d-%d  =>  %d-%d ", base+5, base+6, base+5, base+6),
				fmt.Sprintf("UDP [*]:%d  =>  %d ", base+3, base+3),
			}, []string{fmt.Sprintf("TCP [*]%%lo:%d  =>  %d ", base+20, base+20)})
			for _, p := range []int{base + 3, base + 5, base + 6} {
				reachable(t, e, "range", p, all...)
			}
			refused(t, e, "excluded port", base+4, all...)
			for _, p := range all {
				if err := e.udpEcho(p.local, addrPort(p.dst, base+3)); err != nil {
					t.Errorf("-u %d, %s: %v", base+3, p.name, err)
				}
			}
			// -T: the namespace reaches a host loopback server.
			hp := e.serveTCPOn(t, "127.0.0.1", base+20)
			if out, err := ag.do(10*time.Second, "waitput", fmt.Sprintf("127.0.0.1:%d", hp), "3000"); err != nil {
				t.Errorf("-T %d: namespace -> host loopback: %v (%s)", hp, err, out)
			}

			// ADDR%IF and %IF. A local peer's connection arrives on the
			// interface that holds the address it dials (and a socket
			// bound to an interface answers through it): lo for
			// loopback, and for loAddr, an address of the host put on lo
			// so that a non-loopback peer (peer4) reaches a listener
			// bound to lo: the TAP path.
			const loAddr = "198.51.100.9"
			if r := nstest.Run(t, nstest.RootUser, "ip", "-n", e.h.Name(), "addr", "add", loAddr+"/32", "dev", "lo"); r.Code != 0 {
				t.Fatalf("adding %s to lo: %s", loAddr, r)
			}
			tapLo := path{"tap4 to " + loAddr, netip.MustParseAddr(peer4), loAddr}
			c.must(t, "-t", fmt.Sprintf("127.0.0.1%%lo/%d", base+7), "-t", fmt.Sprintf("%s%%lo/%d", loAddr, base+8),
				"-t", fmt.Sprintf("%%lo/%d", base+15))
			c.wantListing(t, "ADDR%IF", []string{
				fmt.Sprintf("TCP [127.0.0.1]%%lo:%d  =>  %d ", base+7, base+7),
				fmt.Sprintf("TCP [%s]%%lo:%d  =>  %d ", loAddr, base+8, base+8),
				fmt.Sprintf("TCP [*]%%lo:%d  =>  %d ", base+15, base+15),
			}, []string{fmt.Sprintf("TCP [*]%%lo:%d  =>  %d ", base+20, base+20)})
			reachable(t, e, "127.0.0.1%lo", base+7, pathNamed("splice4"))
			refused(t, e, "127.0.0.1%lo", base+7, pathNamed("tap4"), pathNamed("splice6"), tapLo)
			reachable(t, e, loAddr+"%lo", base+8, tapLo)
			refused(t, e, loAddr+"%lo", base+8, pathNamed("splice4"), pathNamed("tap4"))
			reachable(t, e, "%lo", base+15, pathNamed("splice4"), pathNamed("splice6"), tapLo)
			refused(t, e, "%lo (the host's address is on eth0)", base+15, pathNamed("tap4"), pathNamed("tap6"))

			// auto: a port the namespace opens is forwarded within a
			// scan or two.
			c.must(t, "-t", "auto")
			if out := c.must(t); !strings.Contains(out, "(best effort) (auto-scan)") {
				t.Errorf("-t auto: pesto lists %q, want auto-scan rules", out)
			}
			ag.must(t, 10*time.Second, "listen", fmt.Sprintf("[::]:%d", base+40))
			reachableWithin(t, e, "-t auto", base+40, 4*time.Second, pathNamed("splice4"), pathNamed("tap6"))

			// A new target for a port that stays: its listener is kept
			// and connections go to the new target.
			c.must(t, "-t", fmt.Sprintf("%d:%d", base+9, base+10))
			reachable(t, e, "9->10", base+9, all...)
			c.must(t, "-t", fmt.Sprintf("%d:%d", base+9, base+11))
			ag.must(t, 10*time.Second, "unlisten", fmt.Sprintf("[::]:%d", base+10))
			reachable(t, e, "9->11 (10 closed in the namespace)", base+9, all...)

			// 200 connections on a port that stays, open across updates
			// that add, delete and replace other rules: none drops.
			c.must(t, "-t", strconv.Itoa(base+12))
			reachable(t, e, "before the 200", base+12, all...)
			conns := make([]net.Conn, 0, 200)
			for i := range 200 {
				p := all[i%len(all)]
				cn, err := e.dial("tcp", p.local, addrPort(p.dst, base+12))
				if err != nil {
					t.Fatalf("connection %d (%s): %v", i, p.name, err)
				}
				defer cn.Close()
				conns = append(conns, cn)
			}
			c.must(t, "-A", "-t", strconv.Itoa(base+13))
			c.must(t, "-A", "-u", strconv.Itoa(base+13), "-T", strconv.Itoa(base+21))
			c.must(t, "-D", "-t", strconv.Itoa(base+13))
			c.must(t, "-t", strconv.Itoa(base+12), "-t", strconv.Itoa(base+14), "-T", "none")
			reachable(t, e, "after the updates", base+14, all...)
			var wg sync.WaitGroup
			errs := make(chan error, len(conns))
			for i, cn := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := put(cn, 64<<10, uint64(i)); err != nil {
						errs <- fmt.Errorf("connection %d (%s), opened before the updates: %w", i, all[i%len(all)].name, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}

			// gopasta is still there, and removes its socket at exit.
			select {
			case <-ag.proc.Done():
				o, er := ag.proc.Output()
				t.Fatalf("gopasta exited during the test:\n%s\n%s", o, er)
			default:
			}
			ag.exit()
			r, ok := ag.proc.Wait(20 * time.Second)
			if !ok || r.Code != 0 {
				t.Errorf("gopasta at exit: %s (ok=%v), want exit 0", r, ok)
			}
			if _, err := os.Lstat(c.sock); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("control socket after exit: %v, want it removed", err)
			}
		})
	}
}

// reachableWithin is reachable with its own deadline.
func reachableWithin(t *testing.T, e *env, what string, port int, d time.Duration, ps ...path) {
	t.Helper()
	for _, p := range ps {
		dst := addrPort(p.dst, port)
		if err := nstest.WaitFor(d, func() error { return e.put(p.local, dst, 1<<10, 9) }); err != nil {
			t.Errorf("%s: %s to port %d: not forwarded within %v: %v", what, p.name, port, d, err)
		}
	}
}

// serveTCPOn is serveTCP on a given port of the host namespace.
func (e *env) serveTCPOn(t *testing.T, addr string, port int) int {
	t.Helper()
	return e.serveTCP(t, net.JoinHostPort(addr, strconv.Itoa(port)), "")
}

// TestControlHostile: clients that send garbage, truncated or oversized
// updates, and one that stalls in the middle of an update while transfers
// run through a forwarded port on the TAP and splice paths. The transfers
// never pause (no 500 ms without progress), gopasta never exits, the
// tables never change, and the stalled client is dropped at its deadline
// so that the next client is served.
func TestControlHostile(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			c := newCtl(t, e)
			const p = 18351
			ag := e.startAgent(t, "--config-net", "-c", c.sock, "-t", strconv.Itoa(p), "-u", "none", "-T", "none", "-U", "none")
			ag.serve(t, p)
			e.waitServing(t, ag.proc, addrPort("127.0.0.1", p), 10*time.Second)
			before := c.must(t)

			// Transfers on both paths, watched in 100 ms steps.
			const run = 4 * time.Second
			type watch struct {
				name   string
				maxGap time.Duration
				bytes  int64
				steps  []int64 // bytes per 100 ms
				err    error
			}
			var wg sync.WaitGroup
			watches := []*watch{{name: "tap4"}, {name: "splice4"}}
			for _, w := range watches {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w.maxGap, w.bytes, w.steps, w.err = timedDownload(e, pathNamed(w.name), p, run)
				}()
			}

			// Meanwhile: a client that reads the tables, sends half an
			// update and stalls.
			time.Sleep(500 * time.Millisecond)
			stalled := rawClient(t, c.sock)
			stalledAt := time.Now()
			if _, err := stalled.Write([]byte{1, 0, 0, 0, 1, 0, 0, 0}); err != nil {
				t.Fatalf("stalled client: %v", err)
			}
			// pesto queues behind it: served once the stalled one is
			// dropped at the server's deadline (10 s).
			type result struct {
				r    nstest.Result
				took time.Duration
			}
			next := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				start := time.Now()
				r := e.h.RunContext(ctx, e.u, c.pesto, c.sock)
				next <- result{r, time.Since(start)}
			}()
			wg.Wait()
			for _, w := range watches {
				if w.err != nil {
					t.Errorf("%s transfer during the stall: %v", w.name, w.err)
				}
				t.Logf("%s: %d MiB in %v, longest pause %v, per 100 ms (KiB): %v", w.name, w.bytes>>20, run, w.maxGap.Round(time.Millisecond), kib(w.steps))
				if w.maxGap > 500*time.Millisecond {
					t.Errorf("%s: the transfer paused %v while a control client stalled, want no pause over 500ms", w.name, w.maxGap.Round(time.Millisecond))
				}
			}
			select {
			case res := <-next:
				mustSucceed(t, "pesto behind the stalled client", res.r)
				waited := time.Since(stalledAt)
				if waited < 8*time.Second {
					t.Errorf("pesto was served %v after a client stalled, want it to wait for the stalled one's 10s deadline", waited)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("pesto behind a stalled client: no answer within 20s, want it served once the stalled one is dropped at 10s")
			}
			stalled.Close()

			// Garbage, truncated and oversized updates.
			big := []byte{1, 0, 0, 1, 0} // count 256
			big = append(big, make([]byte, 256*56)...)
			for _, h := range []struct {
				name string
				send []byte
			}{
				{"garbage", []byte("GET / HTTP/1.0\r\n\r\n")},
				{"truncated", []byte{1, 0, 0, 0, 1, 0, 0}},
				{"oversized", big},
				{"first port 0", append(append([]byte{1, 0, 0, 0, 1}, make([]byte, 48)...), 0, 0, 0, 0, 0x1b, 0x9e, 6, 1, 0)},
				{"no such table", []byte{2, 0, 0, 0, 0, 0}},
			} {
				cl := rawClient(t, c.sock)
				cl.Write(h.send)
				cl.(*net.UnixConn).CloseWrite()
				cl.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err := cl.Read(make([]byte, 1))
				cl.Close()
				if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("%s: got %v, want the server to close the connection", h.name, err)
				}
			}
			if after := c.must(t); after != before {
				t.Errorf("hostile clients changed the rules: pesto lists\n%s\nwant\n%s", after, before)
			}
			select {
			case <-ag.proc.Done():
				o, er := ag.proc.Output()
				t.Fatalf("gopasta exited:\n%s\n%s", o, er)
			default:
			}
			reachable(t, e, "after the hostile clients", p, paths()...)
		})
	}
}

// rawClient connects to the control socket and reads the greeting and
// the tables (up to the terminator), as a client about to send an update.
func rawClient(t *testing.T, sock string) net.Conn {
	t.Helper()
	cl, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatalf("connecting to %s: %v", sock, err)
	}
	t.Cleanup(func() { cl.Close() })
	cl.SetReadDeadline(time.Now().Add(5 * time.Second))
	// 20-byte greeting, then tables: u8 pif, 128-byte name, caps,
	// count, rules; u8 0 ends them.
	buf := make([]byte, 20)
	if _, err := io.ReadFull(cl, buf); err != nil {
		t.Fatalf("greeting: %v", err)
	}
	for {
		id := make([]byte, 1)
		if _, err := io.ReadFull(cl, id); err != nil {
			t.Fatalf("tables: %v", err)
		}
		if id[0] == 0 {
			break
		}
		hdr := make([]byte, 136)
		if _, err := io.ReadFull(cl, hdr); err != nil {
			t.Fatalf("tables: %v", err)
		}
		n := int(hdr[132])<<24 | int(hdr[133])<<16 | int(hdr[134])<<8 | int(hdr[135])
		if _, err := io.ReadFull(cl, make([]byte, n*56)); err != nil {
			t.Fatalf("rules: %v", err)
		}
	}
	cl.SetReadDeadline(time.Time{})
	return cl
}

// downloadRate caps timedDownload, so that the test measures pauses
// without loading the machine with a full-speed transfer.
const downloadRate = 64 << 20 // bytes per second

// timedDownload reads zeros ('D') from the namespace's server through
// port over p for d, at most downloadRate, and reports the longest time
// without data while it wanted some, the bytes, and the bytes of each
// 100 ms step.
func timedDownload(e *env, p path, port int, d time.Duration) (maxGap time.Duration, total int64, steps []int64, err error) {
	c, err := e.dial("tcp", p.local, addrPort(p.dst, port))
	if err != nil {
		return 0, 0, nil, err
	}
	defer c.Close()
	if err := request(c, 'D', 1<<50); err != nil {
		return 0, 0, nil, err
	}
	buf := make([]byte, 64<<10)
	start := time.Now()
	last := start
	steps = make([]int64, int(d/(100*time.Millisecond)))
	for time.Since(start) < d {
		// Ahead of the rate: wait, and start the gap clock after.
		if ahead := time.Duration(total)*time.Second/downloadRate - time.Since(start); ahead > 0 {
			time.Sleep(ahead)
			last = time.Now()
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Read(buf)
		now := time.Now()
		if n > 0 {
			if g := now.Sub(last); g > maxGap {
				maxGap = g
			}
			last = now
			total += int64(n)
			if i := int(now.Sub(start) / (100 * time.Millisecond)); i < len(steps) {
				steps[i] += int64(n)
			}
		}
		if err != nil {
			return max(maxGap, now.Sub(last)), total, steps, err
		}
	}
	return maxGap, total, steps, nil
}

func kib(steps []int64) []int64 {
	out := make([]int64, len(steps))
	for i, s := range steps {
		out[i] = s >> 10
	}
	return out
}

// TestControlModes: -c in attach mode (by PID, in the background) and
// with --splice-only; a second gopasta on a live socket refused as
// "already in use"; the socket a killed gopasta left behind replaced by
// the next one; the option's errors, each a one-line message and exit 1.
func TestControlModes(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			c := newCtl(t, e)
			const p = 18371

			// Attach mode.
			sl := e.startSleeper(t)
			d := e.attachDaemon(t, sl.PID(), "--config-net", "-c", c.sock, "-t", strconv.Itoa(p), "-u", "none", "-T", "none", "-U", "none")
			ag := e.startAgentIn(t, sl.PID())
			ag.serve(t, p)
			ag.serve(t, p+1)
			c.wantListing(t, "attach mode", []string{fmt.Sprintf("TCP [*]:%d  =>  %d ", p, p)}, nil)
			c.must(t, "-A", "-t", strconv.Itoa(p+1))
			reachable(t, e, "attach mode, added", p+1, pathNamed("tap4"), pathNamed("splice4"))

			// A live socket is not taken over.
			r := e.run(t, "--config-net", "-c", c.sock, "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--", "true")
			if r.Code != 1 || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, "already in use") {
				t.Errorf("a second gopasta on a live socket: got %s; want exit 1 and one line saying it is already in use", r)
			}
			c.wantListing(t, "after the refused second gopasta", []string{
				fmt.Sprintf("TCP [*]:%d  =>  %d ", p, p), fmt.Sprintf("TCP [*]:%d  =>  %d ", p+1, p+1)}, nil)

			// Killed: the socket stays behind, stale; the next gopasta
			// replaces it.
			syscall.Kill(d, syscall.SIGKILL)
			if _, err := nstest.WaitGone(d, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(c.sock); err != nil {
				t.Fatalf("after SIGKILL: %v, want the socket file left behind", err)
			}
			ag2 := e.startAgent(t, "--splice-only", "-c", c.sock, "-t", strconv.Itoa(p+2), "-u", "none", "-T", "none", "-U", "none")
			ag2.serve(t, p+2)
			ag2.serve(t, p+3)
			c.wantListing(t, "--splice-only over a stale socket", []string{fmt.Sprintf("TCP [*]:%d  =>  %d ", p+2, p+2)}, nil)
			c.must(t, "-A", "-t", strconv.Itoa(p+3))
			reachable(t, e, "--splice-only, added", p+3, pathNamed("splice4"), pathNamed("splice6"))
			refused(t, e, "--splice-only, added", p+3, pathNamed("tap4"))

			// The option's errors.
			long := "/tmp/" + strings.Repeat("c", 103)
			for _, tc := range []struct{ val, want string }{
				{"", `invalid --conf-path value ""`},
				{long, `invalid --conf-path value "` + long + `": invalid configuration path (1 to 107 bytes)`},
				{"/nonexistent-gopasta-dir/ctl", "cannot use directory /nonexistent-gopasta-dir"},
				{c.sock, "already in use"},
			} {
				r := e.run(t, "-c", tc.val, "--", "true")
				if r.Code != 1 || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, tc.want) {
					t.Errorf("-c %q: got %s; want exit 1 and one line containing %q", tc.val, r, tc.want)
				}
			}
		})
	}
}
