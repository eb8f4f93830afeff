package e2e

// Port forwarding into the namespace (-t, -u, auto, --no-splice,
// --splice-only), as root and as uid 65534. The namespace side is a peer
// agent gopasta runs; the host side dials from this process inside the host
// namespace, over the TAP path (from peer4 or peer6 to the namespace's
// copied address) and the splice path (from host loopback): see paths.

import (
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

// TestForward: -t and -u into a spawned namespace, on the TAP
// path and the splice path, IPv4 and IPv6, 2 KiB and 10 MiB both ways,
// UDP echoes, and 200 concurrent connections, every byte verified.
func TestForward(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const tp, up = 18080, 19090
			ag := e.startAgent(t, "--config-net", "-t", strconv.Itoa(tp), "-u", strconv.Itoa(up), "-T", "none", "-U", "none")
			ag.must(t, 10*time.Second, "listen", fmt.Sprintf("[::]:%d", tp))
			// UDP servers bound to the namespace's addresses and loopback
			// (one bound to [::] is TestForwardUDPAnyAddr's).
			var udpAddrs []string
			for _, a := range []string{ns4, "127.0.0.1", "[" + ns6 + "]", "[::1]"} {
				udpAddrs = append(udpAddrs, fmt.Sprintf("%s:%d", a, up))
			}
			ag.must(t, 10*time.Second, append([]string{"udpecho"}, udpAddrs...)...)
			e.waitServing(t, ag.proc, addrPort("127.0.0.1", tp), 20*time.Second)
			for _, p := range paths() {
				for _, n := range []int64{2 << 10, 10 << 20} {
					dst := addrPort(p.dst, tp)
					if err := e.put(p.local, dst, n, uint64(n)); err != nil {
						t.Errorf("%s: host -> namespace %d bytes: %v", p.name, n, err)
					}
					if err := e.get(p.local, dst, n, uint64(n)+1); err != nil {
						t.Errorf("%s: namespace -> host %d bytes: %v", p.name, n, err)
					}
				}
				if err := e.udpEcho(p.local, addrPort(p.dst, up)); err != nil {
					t.Errorf("%s: UDP: %v", p.name, err)
				}
			}
			// 200 concurrent connections over all four paths.
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			paths := paths()
			for i := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p := paths[i%len(paths)]
					if err := e.put(p.local, addrPort(p.dst, tp), 64<<10, uint64(1000+i)); err != nil {
						errs <- fmt.Errorf("connection %d (%s): %w", i, p.name, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestForwardSplice1G: a 1 GiB spliced transfer arrives intact.
func TestForwardSplice1G(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB transfer in -short mode")
	}
	e := newEnv(t, nstest.RootUser, hostSetup{peers: true})
	const tp = 18081
	ag := e.startAgent(t, "--config-net", "-t", strconv.Itoa(tp), "-u", "none", "-T", "none", "-U", "none")
	ag.must(t, 10*time.Second, "listen", fmt.Sprintf("[::]:%d", tp))
	e.waitServing(t, ag.proc, addrPort("127.0.0.1", tp), 20*time.Second)
	if err := e.put(netip.Addr{}, addrPort("127.0.0.1", tp), 1<<30, 7); err != nil {
		t.Fatalf("1 GiB host -> namespace: %v", err)
	}
}

// TestForwardAuto: with the default (auto), a listener the
// namespace opens is reachable from the host within 2 s, and unreachable
// within 2 s of closing.
func TestForwardAuto(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const port = 18123
			ag := e.startAgent(t, "--config-net")
			listen := fmt.Sprintf("[::]:%d", port)
			dst := addrPort("127.0.0.1", port)
			// Let an auto scan or so go by with nothing to forward.
			time.Sleep(1500 * time.Millisecond)
			opened := time.Now()
			ag.must(t, 10*time.Second, "listen", listen)
			err := nstest.WaitFor(5*time.Second, func() error { return e.put(netip.Addr{}, dst, 100, 3) })
			if err != nil {
				t.Fatalf("auto: got no forwarding within 5s of the namespace listening: %v", err)
			}
			if d := time.Since(opened); d > 2500*time.Millisecond {
				t.Errorf("auto: forwarding took %v after the namespace listened, want about 2s at most", d)
			}
			// Also the TAP path.
			if err := e.put(netip.MustParseAddr(peer4), addrPort(ns4, port), 100, 4); err != nil {
				t.Errorf("auto over the TAP: %v", err)
			}
			closed := time.Now()
			ag.must(t, 10*time.Second, "unlisten", listen)
			err = nstest.WaitFor(5*time.Second, func() error {
				c, err := e.dial("tcp", netip.Addr{}, dst)
				if err != nil {
					return nil // refused: the host listener is gone
				}
				c.Close()
				return errors.New("host port still accepts")
			})
			if err != nil {
				t.Fatalf("auto: %v 5s after the namespace closed its listener", err)
			}
			if d := time.Since(closed); d > 2500*time.Millisecond {
				t.Errorf("auto: the host listener lived %v after the namespace's closed, want about 2s at most", d)
			}
		})
	}
}

// TestForwardPortTaken: an explicit port someone holds stops
// gopasta at start with a clear message; in a range it is only a warning.
func TestForwardPortTaken(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			ln, err := e.h.Listen("tcp4", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			r := e.run(t, "--config-net", "-t", strconv.Itoa(port), "-T", "none", "-U", "none", "-u", "none", "--", "true")
			want := fmt.Sprintf("gopasta: cannot forward TCP port %d: address already in use", port)
			if r.Code == 0 || !strings.Contains(r.Stderr, want) {
				t.Errorf("explicit port taken: got exit %d, stderr %q; want failure with %q", r.Code, r.Stderr, want)
			}
			r = e.run(t, "--config-net", "-t", fmt.Sprintf("%d-%d", port, port+1), "-T", "none", "-U", "none", "-u", "none", "--", "true")
			if r.Code != 0 || !strings.Contains(r.Stderr, "cannot forward some ports") {
				t.Errorf("port taken in a range: got exit %d, stderr %q; want 0 with a warning", r.Code, r.Stderr)
			}
		})
	}
}

// TestForwardBeyondFileLimit: port ranges that ask for more sockets than
// the descriptor limit allows (1000 here: four sockets a TCP port, two a
// UDP one) forward what fits, warn about the rest, and leave descriptors
// for the rest of gopasta (the sandbox opens files as it starts) and for
// connections, which still go through.
func TestForwardBeyondFileLimit(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			port := e.serveTCP(t, "127.0.0.1:0", "")
			cmds := []string{fmt.Sprintf("put 192.0.2.254:%d 100000 1", port), fmt.Sprintf("get 192.0.2.254:%d 100000 2", port)}
			argv := append([]string{"prlimit", "--nofile=1000:1000"},
				e.gopasta("--config-net", "-t", "30000-30999", "-u", "30000-30999", "--", "sh", "-c", shellJoin(e.peer(cmds...)))...)
			r := e.runArgv(t, argv...)
			mustSucceed(t, "gopasta with more ports than descriptors", r)
			wantDone(t, r.Stdout, cmds...)
			if want := "cannot forward some ports, retrying every second"; !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr: got %q, want a warning %q", r.Stderr, want)
			}
		})
	}
}

// TestForwardUDPSourcePort: a namespace socket's source port is kept on
// the host side of a spliced -U flow (as pasta keeps it), and over the
// TAP by a socket sending from a port gopasta forwards with -u: protocols
// that answer to where a datagram came from (a VPN's handshake, STUN,
// SIP) see the same port on both sides.
func TestForwardUDPSourcePort(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			port := e.serveUDPWith(t, "127.0.0.1:0", serveUDPWho)
			cmds := []string{
				fmt.Sprintf("udpwho 127.0.0.1:%d 40123", port),   // spliced through -U
				fmt.Sprintf("udpwho 192.0.2.254:%d 40124", port), // over the TAP, from a -u port
			}
			r := e.run(t, append([]string{"--config-net", "-U", strconv.Itoa(port), "-u", "40124", "-T", "none", "-t", "none", "--"}, e.peer(cmds...)...)...)
			mustSucceed(t, "UDP source ports kept", r)
			wantDone(t, r.Stdout, cmds...)
		})
	}
}

// TestForwardNoSplice: with --no-splice a host connection from
// loopback to a -t port takes the TAP path, so the namespace sees it come
// from the gateway; without, it is spliced and comes from the namespace
// itself.
func TestForwardNoSplice(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const p = 18211
			for _, c := range []struct {
				name   string
				flags  []string
				tap    bool // want the gateway as the source
				volume bool
			}{
				{"no-splice", []string{"--no-splice"}, true, true},
				{"splice", nil, false, false},
			} {
				args := append([]string{"--config-net", "-t", strconv.Itoa(p), "-u", strconv.Itoa(p), "-T", "none", "-U", "none"}, c.flags...)
				ag := e.startAgent(t, args...)
				ag.serve(t, p)
				for _, f := range []struct{ lo, gw string }{{"127.0.0.1", nstest.HostGW4}, {"::1", nstest.HostGW6}} {
					dst := addrPort(f.lo, p)
					got, err := e.sourceSeen(netip.Addr{}, dst)
					if err != nil {
						t.Errorf("%s: %v: %v", c.name, dst, err)
						continue
					}
					t.Logf("%s: a connection from %s: the namespace saw %s", c.name, f.lo, got)
					if (got == f.gw) != c.tap {
						t.Errorf("%s: a connection from %s: the namespace saw it from %q; want the gateway %s: %v", c.name, f.lo, got, f.gw, c.tap)
					}
					// IPv6 UDP on the TAP path to a server bound to [::]
					// is TestForwardUDPAnyAddr's.
					if f.lo == "127.0.0.1" {
						if err := e.udpEcho(netip.Addr{}, dst); err != nil {
							t.Errorf("%s: UDP %v: %v", c.name, dst, err)
						}
					}
					if !c.volume {
						continue
					}
					for _, n := range []int64{2 << 10, 10 << 20} {
						if err := e.put(netip.Addr{}, dst, n, uint64(n)); err != nil {
							t.Errorf("%s: %v put %d bytes: %v", c.name, dst, n, err)
						}
						if err := e.get(netip.Addr{}, dst, n, uint64(n)+1); err != nil {
							t.Errorf("%s: %v get %d bytes: %v", c.name, dst, n, err)
						}
					}
				}
				ag.proc.Signal(syscall.SIGTERM)
				if _, ok := ag.proc.Wait(5 * time.Second); !ok {
					t.Errorf("%s: gopasta still running 5s after SIGTERM", c.name)
				}
			}
		})
	}
}

// TestForwardHostLoToNSLo: a spliced connection from host loopback reaches
// the namespace's own address by default (so services bound to the
// namespace's loopback stay private), and with --host-lo-to-ns-lo its
// loopback, as pasta does; both for a port on the any address (served by
// its loopback twin) and one bound to 127.0.0.1 (served by the engine's
// listener and its splice hook, which once ignored the option).
func TestForwardHostLoToNSLo(t *testing.T) {
	e := newEnv(t, nstest.RootUser, hostSetup{peers: true})
	const p = 18221
	for _, c := range []struct {
		name string
		spec string
		flag bool
		want string
	}{
		{"any address", strconv.Itoa(p), false, ns4},
		{"any address, --host-lo-to-ns-lo", strconv.Itoa(p), true, "127.0.0.1"},
		{"127.0.0.1", "127.0.0.1/" + strconv.Itoa(p), false, ns4},
		{"127.0.0.1, --host-lo-to-ns-lo", "127.0.0.1/" + strconv.Itoa(p), true, "127.0.0.1"},
	} {
		args := []string{"--config-net", "-t", c.spec, "-u", "none", "-T", "none", "-U", "none"}
		if c.flag {
			args = append(args, "--host-lo-to-ns-lo")
		}
		ag := e.startAgent(t, args...)
		ag.serve(t, p)
		dst := addrPort("127.0.0.1", p)
		e.waitServing(t, ag.proc, dst, 20*time.Second)
		got, err := e.sourceSeen(netip.Addr{}, dst)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if got != c.want {
			t.Errorf("%s: the namespace saw the connection from %q, want %q", c.name, got, c.want)
		}
		ag.proc.Signal(syscall.SIGTERM)
		if _, ok := ag.proc.Wait(5 * time.Second); !ok {
			t.Errorf("%s: gopasta still running 5s after SIGTERM", c.name)
		}
	}
}

// sourceSeen asks the namespace's server ('A') which address it sees a
// connection from local to dst come from.
func (e *env) sourceSeen(local netip.Addr, dst netip.AddrPort) (string, error) {
	c, err := e.dial("tcp", local, dst)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := request(c, 'A'); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// TestForwardUDPAnyAddr: -u to a namespace server bound to
// [::] (most servers are): its replies leave from whatever source address
// the namespace's kernel picks, which must be the address gopasta
// forwarded to, on every path.
func TestForwardUDPAnyAddr(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const p = 18261
			ag := e.startAgent(t, "--config-net", "-t", "none", "-u", strconv.Itoa(p), "-T", "none", "-U", "none")
			ag.serve(t, p)
			for _, path := range paths() {
				if err := e.udpEcho(path.local, addrPort(path.dst, p)); err != nil {
					addrs, _ := ag.do(5*time.Second, "addrs")
					t.Errorf("%s: UDP echo from a server on [::]: %v (the namespace's global addresses: %s)", path.name, err, addrs)
				}
			}
		})
	}
}

// TestForwardPrivileged: a port below 1024 needs
// CAP_NET_BIND_SERVICE on the host: without it an explicit -t 80 stops
// gopasta at start with a one-line error that says so; as root it works.
func TestForwardPrivileged(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			if u.Root() {
				ag := e.startAgent(t, "--config-net", "-t", "80", "-u", "none", "-T", "none", "-U", "none")
				ag.serve(t, 80)
				for _, p := range paths()[:3] {
					if err := e.put(p.local, addrPort(p.dst, 80), 64<<10, 80); err != nil {
						t.Errorf("%s: root, -t 80: %v", p.name, err)
					}
				}
				return
			}
			r := e.run(t, "--config-net", "-t", "80", "-u", "none", "-T", "none", "-U", "none", "--", "true")
			var line string
			for _, l := range strings.Split(r.Stderr, "\n") {
				if strings.Contains(l, "port 80") {
					line = l
				}
			}
			if r.Code == 0 || !strings.HasPrefix(line, "gopasta: cannot forward TCP port 80") ||
				!(strings.Contains(line, "CAP_NET_BIND_SERVICE") || strings.Contains(line, "permission")) {
				t.Errorf("uid %d, -t 80: got exit %d, stderr %q; want failure with one line \"gopasta: cannot forward TCP port 80: ...\" naming the capability", u.UID, r.Code, r.Stderr)
			}
		})
	}
}

// TestForwardReset: a peer resetting mid-transfer, on the TAP
// and splice paths. The host client resets while the namespace streams:
// the namespace's server sees the connection fail within 2 s. The
// namespace's server resets: the host client sees a reset (not a clean
// end). Either way a new connection works afterwards.
func TestForwardReset(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const p = 18221
			ag := e.startAgent(t, "--config-net", "-t", fmt.Sprintf("%d,%d", p, p+1), "-u", "none", "-T", "none", "-U", "none")
			ag.serve(t, p)
			e.waitServing(t, ag.proc, addrPort("127.0.0.1", p), 10*time.Second)
			for i, path := range paths() {
				dst := addrPort(path.dst, p)
				// Nothing listens on p+1 in the namespace: the host
				// client, already connected to gopasta's listener, gets
				// a reset rather than a connection that hangs.
				if c, err := e.dial("tcp", path.local, addrPort(path.dst, p+1)); err == nil {
					c.SetReadDeadline(time.Now().Add(3 * time.Second))
					start := time.Now()
					_, err := c.Read(make([]byte, 1))
					c.Close()
					if got := errClass(err); got != "reset" || time.Since(start) > 2*time.Second {
						t.Errorf("%s: a forwarded port nobody serves: the host client got %q after %v; want a reset within 2s", path.name, got, time.Since(start).Round(time.Millisecond))
					}
				} else if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("%s: a forwarded port nobody serves: got %v, want a reset or refusal", path.name, err)
				}

				// Host client resets.
				c, err := e.dial("tcp", path.local, dst)
				if err != nil {
					t.Errorf("%s: %v", path.name, err)
					continue
				}
				if err := streamThenReset(c, uint64(i)); err != nil {
					c.Close()
					t.Errorf("%s: %v", path.name, err)
				}
				reset := time.Now()
				report := filepath.Join(ag.dir, fmt.Sprintf("stream-%d", i))
				var how []byte
				err = nstest.WaitFor(2*time.Second, func() (err error) {
					how, err = os.ReadFile(report)
					return err
				})
				if err != nil {
					t.Errorf("%s: host client reset: the namespace's server still streaming %v later, want it to see the reset within 2s", path.name, time.Since(reset).Round(time.Millisecond))
				} else {
					t.Logf("%s: host client reset: the namespace's server saw %q after %v", path.name, how, time.Since(reset).Round(time.Millisecond))
				}

				// Namespace server resets.
				c, err = e.dial("tcp", path.local, dst)
				if err != nil {
					t.Errorf("%s: %v", path.name, err)
					continue
				}
				got, n, took := expectReset(c, 1<<20)
				c.Close()
				if got != "reset" || took > 2*time.Second {
					t.Errorf("%s: namespace server reset after 1 MiB: the host client got %d bytes then %q after %v; want a reset within 2s", path.name, n, got, took.Round(time.Millisecond))
				}

				// Still serving.
				if err := e.put(path.local, dst, 64<<10, uint64(i)); err != nil {
					t.Errorf("%s: a new connection after the resets: %v", path.name, err)
				}
			}
		})
	}
}

// TestForwardSpliceOnly: --splice-only: no TAP in the
// namespace, only lo; -t ports are reached from host loopback (spliced) and
// bound on loopback only.
func TestForwardSpliceOnly(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			const p = 18251
			ag := e.startAgent(t, "--splice-only", "-t", strconv.Itoa(p), "-u", "none", "-T", "none", "-U", "none")
			ag.serve(t, p)
			links, err := ag.do(10*time.Second, "links")
			if err != nil {
				t.Fatal(err)
			}
			for _, lo := range []string{"127.0.0.1", "::1"} {
				dst := addrPort(lo, p)
				if err := nstest.WaitFor(5*time.Second, func() error { return e.put(netip.Addr{}, dst, 2<<10, 1) }); err != nil {
					t.Errorf("--splice-only: host %v: %v", dst, err)
					continue
				}
				if err := e.get(netip.Addr{}, dst, 10<<20, 2); err != nil {
					t.Errorf("--splice-only: host %v, 10 MiB namespace -> host: %v", dst, err)
				}
			}
			if c, err := e.dial("tcp", netip.MustParseAddr(peer4), addrPort(ns4, p)); err == nil {
				c.Close()
				t.Errorf("--splice-only: %s:%d accepts connections from %s; want host listeners on loopback only", ns4, p, peer4)
			}
			if links != "lo" {
				t.Skipf("--splice-only not wired yet: the namespace has interfaces %q, want only lo", links)
			}
		})
	}
}
