package main

// End-to-end tests of the engine: traffic from a namespace gopasta serves to
// peers in the per-test host namespace. The host-side peers (echo servers, a
// DNS resolver, a TCP transfer server) run in this test process, on sockets
// created inside the host namespace (nstest.Host.Listen). The namespace
// side is this same test binary, copied where every identity can run it
// (nstest.SelfBinary) and re-executed by gopasta with engineHelperArg
// first: see integration_engine_helper_test.go.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// engineTimeout bounds one gopasta run in these tests.
const engineTimeout = 60 * time.Second

// engineEnv is a host namespace prepared for engine tests: ping sockets
// allowed for every group, the gopasta binary and the namespace helper.
type engineEnv struct {
	h      *nstest.Host
	bin    string
	helper string
	u      nstest.User
	// env, when set, is extra environment for gopasta (run through env(1)).
	env []string
}

func newEngineEnv(t *testing.T, u nstest.User, o nstest.HostOptions) *engineEnv {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTun(t, u)
	nstest.RequireUserNS(t, u)
	e := &engineEnv{bin: nstest.Binary(t), helper: nstest.SelfBinary(t), u: u}
	e.h = nstest.HostNSWith(t, o)
	e.h.AllowPing()
	return e
}

// run runs gopasta with args inside the host namespace and waits for it.
func (e *engineEnv) run(t *testing.T, args ...string) nstest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
	defer cancel()
	argv := []string{e.bin}
	if len(e.env) > 0 {
		argv = append(append([]string{"env"}, e.env...), e.bin)
	}
	r := e.h.RunContext(ctx, e.u, append(argv, args...)...)
	if r.TimedOut {
		t.Fatalf("gopasta %q: got no exit within %v, want it to finish\n%s", args, engineTimeout, r)
	}
	checkNoPanic(t, r)
	return r
}

// helperCmd is the argv that runs the namespace helper with args.
func (e *engineEnv) helperCmd(args ...string) []string {
	return append([]string{e.helper, engineHelperArg}, args...)
}

// mustSucceed fails unless r exited 0.
func mustSucceed(t *testing.T, what string, r nstest.Result) {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("%s: got exit %d, want 0\n%s", what, r.Code, r)
	}
}

// udpEcho serves an echo on pc until the test ends.
func udpEcho(pc net.PacketConn) {
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
}

// listenUDP opens a UDP echo on addr in the host namespace.
func listenUDP(t *testing.T, h *nstest.Host, addr string) int {
	t.Helper()
	network := "udp4"
	if strings.HasPrefix(addr, "[") {
		network = "udp6"
	}
	pc, err := h.ListenPacket(network, addr)
	if err != nil {
		t.Fatalf("UDP echo on %s in the host namespace: %v", addr, err)
	}
	udpEcho(pc)
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// TestIntegrationEngineUDP: datagrams of several sizes from the namespace
// to echo servers on the host's own address (IPv4 and IPv6; directly, and
// through --map-guest-addr) and on host loopback reached through the
// gateway, each checked byte for byte.
func TestIntegrationEngineUDP(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEngineEnv(t, u, nstest.HostOptions{})
			// One port for every listener keeps the argv readable; each
			// address is bound separately (no wildcard), so a datagram
			// reaching the wrong address would go unanswered.
			port := listenUDP(t, e.h, "192.0.2.1:0")
			p := strconv.Itoa(port)
			for _, a := range []string{"127.0.0.1:" + p, "[::1]:" + p, "[2001:db8::1]:" + p} {
				listenUDP(t, e.h, a)
			}
			targets := []string{
				"192.0.2.1:" + p,      // the host's own address
				"192.0.2.254:" + p,    // gateway -> host 127.0.0.1
				"[2001:db8::1]:" + p,  // the host's own IPv6 address
				"[2001:db8::fe]:" + p, // gateway -> host ::1
			}
			// The namespace gets addresses of its own, so that the host's
			// are not shadowed by its copies.
			args := []string{"--config-net", "-a", "192.0.2.2", "-a", "2001:db8::2/64", "--"}
			r := e.run(t, append(args, e.helperCmd(append([]string{"udp"}, targets...)...)...)...)
			mustSucceed(t, "UDP echo through gopasta", r)
			for _, tg := range targets {
				if !strings.Contains(r.Stdout, "udp "+tg+" ok") {
					t.Errorf("helper output: got %q, want a line %q", r.Stdout, "udp "+tg+" ok")
				}
			}

			// With the host's addresses copied, --map-guest-addr is how
			// the namespace reaches the host's own address.
			targets = []string{"192.0.2.9:" + p}
			r = e.run(t, append([]string{"--config-net", "--map-guest-addr", "192.0.2.9", "--"}, e.helperCmd(append([]string{"udp"}, targets...)...)...)...)
			mustSucceed(t, "UDP echo through --map-guest-addr", r)
			if !strings.Contains(r.Stdout, "udp "+targets[0]+" ok") {
				t.Errorf("helper output: got %q, want a line %q", r.Stdout, "udp "+targets[0]+" ok")
			}
		})
	}
}

// TestIntegrationEnginePing: ICMP and ICMPv6 echo to the gateway, answered
// through ping sockets on the host (by its loopback).
func TestIntegrationEnginePing(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEngineEnv(t, u, nstest.HostOptions{})
			r := e.run(t, "--config-net", "--", "sh", "-c",
				"busybox ping -A -c 3 -W 3 192.0.2.254 && busybox ping -A -c 3 -W 3 2001:db8::fe")
			mustSucceed(t, "ping the gateways through gopasta", r)
			if n := strings.Count(r.Stdout, "3 packets received"); n != 2 {
				t.Errorf("ping output: got %d summaries with \"3 packets received\", want 2:\n%s", n, r.Stdout)
			}
		})
	}
}

// pcapFrame is one record of a capture.
type pcapFrame []byte

// readPcap parses a classic pcap file: the global header (which must say
// Ethernet) and its records.
func readPcap(b []byte) ([]pcapFrame, error) {
	if len(b) < 24 {
		return nil, fmt.Errorf("capture: got %d bytes, want at least a 24-byte header", len(b))
	}
	var le bool
	switch {
	case bytes.Equal(b[:4], []byte{0xd4, 0xc3, 0xb2, 0xa1}), bytes.Equal(b[:4], []byte{0x4d, 0x3c, 0xb2, 0xa1}):
		le = true
	case bytes.Equal(b[:4], []byte{0xa1, 0xb2, 0xc3, 0xd4}), bytes.Equal(b[:4], []byte{0xa1, 0xb2, 0x3c, 0x4d}):
	default:
		return nil, fmt.Errorf("capture magic: got %x, want a pcap magic number", b[:4])
	}
	u32 := func(x []byte) uint32 {
		if le {
			return uint32(x[0]) | uint32(x[1])<<8 | uint32(x[2])<<16 | uint32(x[3])<<24
		}
		return uint32(x[3]) | uint32(x[2])<<8 | uint32(x[1])<<16 | uint32(x[0])<<24
	}
	if lt := u32(b[20:]); lt != 1 {
		return nil, fmt.Errorf("capture link type: got %d, want 1 (Ethernet)", lt)
	}
	var frames []pcapFrame
	for off := 24; off < len(b); {
		if off+16 > len(b) {
			return frames, fmt.Errorf("capture: record header at %d truncated", off)
		}
		incl, orig := int(u32(b[off+8:])), int(u32(b[off+12:]))
		off += 16
		if incl > orig || off+incl > len(b) {
			return frames, fmt.Errorf("capture: record at %d: included %d, original %d, %d bytes left", off, incl, orig, len(b)-off)
		}
		frames = append(frames, pcapFrame(b[off:off+incl]))
		off += incl
	}
	return frames, nil
}

// udpOf returns the ports and payload of an Ethernet+IPv4/IPv6+UDP frame.
func udpOf(f pcapFrame) (sport, dport int, payload []byte, ok bool) {
	if len(f) < 14 {
		return 0, 0, nil, false
	}
	var l4 []byte
	switch {
	case f[12] == 0x08 && f[13] == 0x00 && len(f) >= 34 && f[23] == 17:
		l4 = f[14+int(f[14]&0xf)*4:]
	case f[12] == 0x86 && f[13] == 0xdd && len(f) >= 54 && f[20] == 17:
		l4 = f[54:]
	default:
		return 0, 0, nil, false
	}
	if len(l4) < 8 {
		return 0, 0, nil, false
	}
	return int(l4[0])<<8 | int(l4[1]), int(l4[2])<<8 | int(l4[3]), l4[8:], true
}

// TestIntegrationEnginePcap: -p captures the frames of a UDP exchange both
// ways, in a file standard tools read.
func TestIntegrationEnginePcap(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEngineEnv(t, u, nstest.HostOptions{})
			port := listenUDP(t, e.h, "127.0.0.1:0")
			file := nstest.TempDir(t) + "/capture.pcap"
			target := "192.0.2.254:" + strconv.Itoa(port)
			r := e.run(t, append([]string{"--config-net", "-p", file, "--"}, e.helperCmd("udp", target)...)...)
			mustSucceed(t, "UDP echo with -p", r)
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("reading the capture: %v", err)
			}
			frames, err := readPcap(b)
			if err != nil {
				t.Fatal(err)
			}
			var out, in [][]byte
			for _, f := range frames {
				sp, dp, pl, ok := udpOf(f)
				switch {
				case ok && dp == port:
					out = append(out, pl)
				case ok && sp == port:
					in = append(in, pl)
				}
			}
			if len(out) != len(udpSizes) || len(in) != len(udpSizes) {
				t.Fatalf("captured UDP datagrams (%d frames): got %d to port %d and %d back, want %d each way",
					len(frames), len(out), port, len(in), len(udpSizes))
			}
			for i := range out {
				if !bytes.Equal(out[i], in[i]) {
					t.Errorf("captured datagram %d: got reply %x..., want the request %x... echoed", i, head(in[i]), head(out[i]))
				}
			}
			checkTshark(t, file, port, 2*len(udpSizes))
		})
	}
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

// checkTshark reads the capture with tshark, when installed, and counts the
// frames of the exchange.
func checkTshark(t *testing.T, file string, port, want int) {
	t.Helper()
	tshark, err := findTool("tshark")
	if err != nil {
		t.Logf("tshark not installed: capture checked by the test's own parser only")
		return
	}
	// tshark writes its profile under HOME; give it a throwaway one.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := nstest.Command(ctx, nstest.Current(), "env", "HOME="+nstest.TempDir(t), tshark, "-r", file, "-Y", fmt.Sprintf("udp.port == %d", port))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tshark -r %s: %v\n%s", file, err, out)
	}
	lines := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(l, "UDP") || strings.Contains(l, strconv.Itoa(port)) {
			lines++
		}
	}
	if lines != want {
		t.Errorf("tshark: got %d frames on port %d, want %d:\n%s", lines, port, want, out)
	}
}

func findTool(name string) (string, error) {
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin", "/sbin"} {
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// The stream every TCP transfer carries: ChaCha8 keyed by a per-transfer
// seed, so both ends can produce it independently and compare.
func streamOf(seed uint64) io.Reader {
	var key [32]byte
	copy(key[:], strconv.FormatUint(seed, 16))
	return rand.NewChaCha8(key)
}

// streamHash is the SHA-256 of the first n bytes of stream seed.
func streamHash(n int64, seed uint64) string {
	h := sha256.New()
	if _, err := io.CopyN(h, streamOf(seed), n); err != nil {
		panic(err) // ChaCha8 never fails
	}
	return hex.EncodeToString(h.Sum(nil))
}

// verifyStream reads r to EOF and compares it with stream seed, byte for
// byte; it returns how much arrived and its SHA-256.
func verifyStream(r io.Reader, n int64, seed uint64) (int64, string, error) {
	h := sha256.New()
	want := streamOf(seed)
	got := make([]byte, 256<<10)
	exp := make([]byte, len(got))
	var total int64
	for {
		k, err := r.Read(got)
		if k > 0 {
			if _, werr := io.ReadFull(want, exp[:k]); werr != nil {
				return total, "", werr
			}
			if !bytes.Equal(got[:k], exp[:k]) {
				for i := range k {
					if got[i] != exp[i] {
						return total + int64(i), "", fmt.Errorf("stream differs at byte %d: got %#x, want %#x", total+int64(i), got[i], exp[i])
					}
				}
			}
			h.Write(got[:k])
			total += int64(k)
			if total > n {
				return total, "", fmt.Errorf("stream: got more than the %d bytes announced", n)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return total, "", fmt.Errorf("after %d bytes: %w", total, err)
		}
	}
	if total != n {
		return total, "", fmt.Errorf("stream: got %d bytes, want %d", total, n)
	}
	return total, hex.EncodeToString(h.Sum(nil)), nil
}
