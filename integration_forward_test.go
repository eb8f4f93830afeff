package main

// End-to-end tests of port forwarding (-t, -u, auto, the splice path), as
// root and as uid 65534. The namespace side is this test binary,
// re-executed by gopasta with fwdHelperArg first; the host side are
// sockets this process creates inside the per-test host namespace
// (nstest.Host.Do). Host peers use a second host address (198.51.100.1,
// 2001:db8:1::1 on peer0) for the TAP path: the host's own 192.0.2.1 is the
// namespace's address too (--config-net copies it), so the namespace sees
// it as the gateway instead.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

	"github.com/gopasta/gopasta/internal/nstest"
)

const fwdHelperArg = "-gopasta-fwd-helper"

// Second host addresses for TAP-path peers.
const (
	fwdPeer4 = "198.51.100.1"
	fwdPeer6 = "2001:db8:1::1"
	fwdNS4   = nstest.HostAddr4 // the namespace's address (copied)
	fwdNS6   = nstest.HostAddr6
)

func init() {
	if len(os.Args) < 3 || os.Args[1] != fwdHelperArg {
		return
	}
	if err := fwdHelper(os.Args[2], os.Args[3:]); err != nil {
		fmt.Fprintf(os.Stderr, "fwd helper %s: %v\n", os.Args[2], err)
		os.Exit(1)
	}
	os.Exit(0)
}

// fwdHelper modes:
//
//	serve TCPPORT UDPPORT   transfer server on [::]:TCPPORT, UDP echo on the
//	                        namespace's addresses and loopback; runs until killed
//	auto DIR PORT           opens a listener on PORT when DIR/open appears,
//	                        closes it on DIR/close, exits on DIR/exit
func fwdHelper(mode string, args []string) error {
	switch mode {
	case "serve":
		tp, _ := strconv.Atoi(args[0])
		up, _ := strconv.Atoi(args[1])
		return fwdServe(tp, up)
	case "auto":
		port, _ := strconv.Atoi(args[1])
		return fwdAuto(args[0], port)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// The transfer protocol: 'P' then bytes until EOF, answered with the
// SHA-256 hex of what arrived; or 'G' and an 8-byte length n, answered with
// the first n bytes of stream seed (8 more bytes) and EOF.
func fwdServe(tcpPort, udpPort int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf("[::]:%d", tcpPort))
	if err != nil {
		return err
	}
	if udpPort > 0 {
		for _, a := range []string{fwdNS4, "127.0.0.1", "[" + fwdNS6 + "]", "[::1]"} {
			pc, err := net.ListenPacket("udp", fmt.Sprintf("%s:%d", a, udpPort))
			if err != nil {
				return err
			}
			go func() {
				buf := make([]byte, 65536)
				for {
					n, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					pc.WriteTo(buf[:n], from)
				}
			}()
		}
	}
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go fwdServeConn(c)
	}
}

func fwdServeConn(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	cmd, err := r.ReadByte()
	if err != nil {
		return
	}
	switch cmd {
	case 'P':
		h := sha256.New()
		io.Copy(h, r)
		io.WriteString(c, hex.EncodeToString(h.Sum(nil)))
	case 'G':
		var hdr [16]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int64(binary.BigEndian.Uint64(hdr[:8]))
		io.CopyN(c, fwdStream(binary.BigEndian.Uint64(hdr[8:])), n)
	}
}

func fwdAuto(dir string, port int) error {
	wait := func(name string) error {
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return nil
			}
		}
		return fmt.Errorf("no %s file within 60s", name)
	}
	if err := wait("open"); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("[::]:%d", port))
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go fwdServeConn(c)
		}
	}()
	if err := wait("close"); err != nil {
		return err
	}
	ln.Close()
	return wait("exit")
}

// fwdStream is the deterministic content of a transfer.
func fwdStream(seed uint64) io.Reader {
	var key [32]byte
	binary.BigEndian.PutUint64(key[:], seed)
	return rand.NewChaCha8(key)
}

func fwdHash(n int64, seed uint64) string {
	h := sha256.New()
	io.CopyN(h, fwdStream(seed), n)
	return hex.EncodeToString(h.Sum(nil))
}

// fwdEnv is a host namespace with the second addresses, and gopasta
// running a command.
type fwdEnv struct {
	h      *nstest.Host
	bin    string
	helper string
	u      nstest.User
	proc   *nstest.Proc
}

func newFwdEnv(t *testing.T, u nstest.User) *fwdEnv {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTun(t, u)
	nstest.RequireUserNS(t, u)
	e := &fwdEnv{bin: nstest.Binary(t), helper: nstest.SelfBinary(t), u: u}
	e.h = nstest.HostNS(t)
	for _, a := range [][]string{{fwdPeer4 + "/24"}, {fwdPeer6 + "/64", "nodad"}} {
		args := append([]string{"-n", e.h.Name(), "addr", "add", a[0], "dev", nstest.PeerIfName}, a[1:]...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %q: %v: %s", args, err, out)
		}
	}
	return e
}

// start runs gopasta with args in the background.
func (e *fwdEnv) start(t *testing.T, args ...string) *nstest.Proc {
	t.Helper()
	e.proc = e.h.Start(e.u, append([]string{e.bin}, args...)...)
	return e.proc
}

// dial connects from local (invalid: the kernel's choice) to dst inside the
// host namespace.
func (e *fwdEnv) dial(network string, local netip.Addr, dst netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := e.h.Do(func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second}
		if local.IsValid() {
			if strings.HasPrefix(network, "udp") {
				d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
			} else {
				d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
			}
		}
		c, err = d.Dial(network, dst.String())
		return err
	})
	return c, err
}

// waitServing polls until a transfer through dst works (the namespace's
// server is up), bounded by timeout.
func (e *fwdEnv) waitServing(t *testing.T, dst netip.AddrPort, timeout time.Duration) {
	t.Helper()
	err := nstest.WaitFor(timeout, func() error {
		if e.proc != nil {
			select {
			case <-e.proc.Done():
				o, er := e.proc.Output()
				return nstest.Stop(fmt.Errorf("gopasta exited early:\n%s\n%s", o, er))
			default:
			}
		}
		return e.put(netip.Addr{}, dst, 1, 1)
	})
	if err != nil {
		t.Fatalf("forwarded port %v: got no working transfer within %v, want one: %v", dst, timeout, err)
	}
}

// put sends n bytes of stream seed from local to dst and checks the hash
// the server computed.
func (e *fwdEnv) put(local netip.Addr, dst netip.AddrPort, n int64, seed uint64) error {
	c, err := e.dial("tcp", local, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	return fwd2Put(c, n, seed)
}

// get asks dst for n bytes of stream seed and verifies them.
func (e *fwdEnv) get(local netip.Addr, dst netip.AddrPort, n int64, seed uint64) error {
	c, err := e.dial("tcp", local, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	return fwd2Get(c, n, seed)
}

// udpEcho sends a few datagrams to dst and checks each comes back.
func (e *fwdEnv) udpEcho(local netip.Addr, dst netip.AddrPort) error {
	c, err := e.dial("udp", local, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	return fwd2UDPEcho(c)
}

// fwdPaths are the ways a host peer reaches a forwarded port.
type fwdPath struct {
	name  string
	local netip.Addr // source address; invalid = the kernel's (loopback)
	dst   string
}

func fwdPathsTo() []fwdPath {
	return []fwdPath{
		{"tap4", netip.MustParseAddr(fwdPeer4), fwdNS4},
		{"tap6", netip.MustParseAddr(fwdPeer6), fwdNS6},
		{"splice4", netip.Addr{}, "127.0.0.1"},
		{"splice6", netip.Addr{}, "::1"},
	}
}

func fwdAP(addr string, port int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(port))
}

// TestIntegrationForward: -t and -u into a spawned namespace, on the TAP
// path and the splice path, IPv4 and IPv6, 2 KiB and 10 MiB both ways,
// UDP echoes, and 200 concurrent connections, every byte verified.
func TestIntegrationForward(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newFwdEnv(t, u)
			const tp, up = 18080, 19090
			e.start(t, "--config-net", "-t", strconv.Itoa(tp), "-u", strconv.Itoa(up), "-T", "none", "-U", "none",
				"--", e.helper, fwdHelperArg, "serve", strconv.Itoa(tp), strconv.Itoa(up))
			e.waitServing(t, fwdAP("127.0.0.1", tp), 20*time.Second)
			for _, p := range fwdPathsTo() {
				for _, n := range []int64{2 << 10, 10 << 20} {
					dst := fwdAP(p.dst, tp)
					if err := e.put(p.local, dst, n, uint64(n)); err != nil {
						t.Errorf("%s: host -> namespace %d bytes: %v", p.name, n, err)
					}
					if err := e.get(p.local, dst, n, uint64(n)+1); err != nil {
						t.Errorf("%s: namespace -> host %d bytes: %v", p.name, n, err)
					}
				}
				if err := e.udpEcho(p.local, fwdAP(p.dst, up)); err != nil {
					t.Errorf("%s: UDP: %v", p.name, err)
				}
			}
			// 200 concurrent connections over all four paths.
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			paths := fwdPathsTo()
			for i := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p := paths[i%len(paths)]
					if err := e.put(p.local, fwdAP(p.dst, tp), 64<<10, uint64(1000+i)); err != nil {
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

// TestIntegrationForwardSplice1G: a 1 GiB spliced transfer arrives intact.
func TestIntegrationForwardSplice1G(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB transfer in -short mode")
	}
	e := newFwdEnv(t, nstest.RootUser)
	const tp = 18081
	e.start(t, "--config-net", "-t", strconv.Itoa(tp), "-u", "none", "-T", "none", "-U", "none",
		"--", e.helper, fwdHelperArg, "serve", strconv.Itoa(tp), "0")
	e.waitServing(t, fwdAP("127.0.0.1", tp), 20*time.Second)
	if err := e.put(netip.Addr{}, fwdAP("127.0.0.1", tp), 1<<30, 7); err != nil {
		t.Fatalf("1 GiB host -> namespace: %v", err)
	}
}

// TestIntegrationForwardAuto: with the default (auto), a listener the
// namespace opens is reachable from the host within 2 s, and unreachable
// within 2 s of closing.
func TestIntegrationForwardAuto(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newFwdEnv(t, u)
			dir := nstest.TempDir(t)
			const port = 18123
			e.start(t, "--config-net", "--", e.helper, fwdHelperArg, "auto", dir, strconv.Itoa(port))
			touch := func(name string) {
				if err := os.WriteFile(filepath.Join(dir, name), nil, 0o666); err != nil {
					t.Fatal(err)
				}
			}
			defer touch("exit")
			dst := fwdAP("127.0.0.1", port)
			// gopasta is up once its own auto scan forwards nothing yet;
			// give it a moment to start, then open.
			time.Sleep(1500 * time.Millisecond)
			touch("open")
			opened := time.Now()
			err := nstest.WaitFor(5*time.Second, func() error { return e.put(netip.Addr{}, dst, 100, 3) })
			if err != nil {
				t.Fatalf("auto: got no forwarding within 5s of the namespace listening: %v", err)
			}
			if d := time.Since(opened); d > 2500*time.Millisecond {
				t.Errorf("auto: forwarding took %v after the namespace listened, want about 2s at most", d)
			}
			// Also the TAP path.
			if err := e.put(netip.MustParseAddr(fwdPeer4), fwdAP(fwdNS4, port), 100, 4); err != nil {
				t.Errorf("auto over the TAP: %v", err)
			}
			touch("close")
			closed := time.Now()
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

// TestIntegrationForwardPortTaken: an explicit port someone holds stops
// gopasta at start with a clear message; in a range it is only a warning.
func TestIntegrationForwardPortTaken(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newFwdEnv(t, u)
			ln, err := e.h.Listen("tcp4", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r := e.h.RunContext(ctx, e.u, e.bin, "--config-net", "-t", strconv.Itoa(port), "-T", "none", "-U", "none", "-u", "none", "--", "true")
			want := fmt.Sprintf("gopasta: cannot forward TCP port %d: address already in use", port)
			if r.Code == 0 || !strings.Contains(r.Stderr, want) {
				t.Errorf("explicit port taken: got exit %d, stderr %q; want failure with %q", r.Code, r.Stderr, want)
			}
			r = e.h.RunContext(ctx, e.u, e.bin, "--config-net", "-t", fmt.Sprintf("%d-%d", port, port+1), "-T", "none", "-U", "none", "-u", "none", "--", "true")
			if r.Code != 0 || !strings.Contains(r.Stderr, "cannot forward some ports") {
				t.Errorf("port taken in a range: got exit %d, stderr %q; want 0 with a warning", r.Code, r.Stderr)
			}
			checkNoPanic(t, r)
		})
	}
}

// TestIntegrationForwardPodman: podman's exact argument list against a
// netns file: host 127.0.0.1:8080 reaches the namespace's port 80, and
// gopasta quits once the netns file is removed.
func TestIntegrationForwardPodman(t *testing.T) {
	e := newFwdEnv(t, nstest.RootUser)
	cname := nstest.UniqueName("fwdc")
	if out, err := exec.Command("ip", "netns", "add", cname).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			exec.Command("ip", "netns", "del", cname).Run()
		}
	})
	// The container's server (as root in its netns: port 80).
	srv := exec.Command("ip", "netns", "exec", cname, e.helper, fwdHelperArg, "serve", "80", "0")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	nstest.KillOnCleanup(t, srv.Process.Pid)
	go srv.Wait()
	pidFile := filepath.Join(nstest.TempDir(t), "pasta.pid")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := e.h.RunContext(ctx, nstest.RootUser, e.bin, "--config-net", "-t", "8080-8080:80-80",
		"--dns-forward", "169.254.1.1", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--quiet",
		"--map-guest-addr", "169.254.1.2", "--pid", pidFile, "--netns", "/run/netns/"+cname)
	if r.Code != 0 {
		t.Fatalf("podman arguments: got exit %d, want 0 (background)\n%s", r.Code, r)
	}
	pid, err := nstest.ReadPIDFile(pidFile)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	nstest.KillOnCleanup(t, pid)
	e.waitServing(t, fwdAP("127.0.0.1", 8080), 10*time.Second)
	if err := e.get(netip.Addr{}, fwdAP("127.0.0.1", 8080), 1<<20, 9); err != nil {
		t.Errorf("podman: 1 MiB namespace -> host: %v", err)
	}
	srv.Process.Kill()
	if out, err := exec.Command("ip", "netns", "del", cname).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	removed = true
	if d, err := nstest.WaitGone(pid, 10*time.Second); err != nil {
		t.Errorf("gopasta (pid %d): %v after the netns file was removed", pid, err)
	} else {
		t.Logf("gopasta quit %v after the netns file was removed", d)
	}
}
