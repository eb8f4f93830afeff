package e2e

// The engine end to end: traffic from a namespace gopasta serves to peers
// in the host namespace, which run in this test process on sockets opened
// inside it, while the namespace side is the peer re-executed by gopasta.
// This file: UDP, ICMP echo, and the capture (-p); engine_tcp_test.go and
// engine_dns_test.go have the rest.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestEngineUDP: datagrams of several sizes from the namespace
// to echo servers on the host's own address (IPv4 and IPv6; directly, and
// through --map-guest-addr) and on host loopback reached through the
// gateway, each checked byte for byte.
func TestEngineUDP(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{ping: true})
			// One port for every listener keeps the argv readable; each
			// address is bound separately (no wildcard), so a datagram
			// reaching the wrong address would go unanswered.
			port := e.serveUDP(t, "192.0.2.1:0")
			p := strconv.Itoa(port)
			for _, a := range []string{"127.0.0.1:" + p, "[::1]:" + p, "[2001:db8::1]:" + p} {
				e.serveUDP(t, a)
			}
			cmds := []string{
				"udp 192.0.2.1:" + p,      // the host's own address
				"udp 192.0.2.254:" + p,    // gateway -> host 127.0.0.1
				"udp [2001:db8::1]:" + p,  // the host's own IPv6 address
				"udp [2001:db8::fe]:" + p, // gateway -> host ::1
			}
			// The namespace gets addresses of its own, so that the host's
			// are not shadowed by its copies.
			args := []string{"--config-net", "-a", "192.0.2.2", "-a", "2001:db8::2/64", "--"}
			r := e.run(t, append(args, e.peer(cmds...)...)...)
			mustSucceed(t, "UDP echo through gopasta", r)
			wantDone(t, r.Stdout, cmds...)

			// With the host's addresses copied, --map-guest-addr is how
			// the namespace reaches the host's own address.
			cmd := "udp 192.0.2.9:" + p
			r = e.run(t, append([]string{"--config-net", "--map-guest-addr", "192.0.2.9", "--"}, e.peer(cmd)...)...)
			mustSucceed(t, "UDP echo through --map-guest-addr", r)
			wantDone(t, r.Stdout, cmd)
		})
	}
}

// TestEngineUDPLargerThanMTU: at MTU 1500 a host's answers larger than
// the MTU (a DNS answer over 1472 bytes, say, up to the largest datagram
// IPv4 and IPv6 carry) reach the namespace whole, as with pasta: the TAP
// hands its stack frames larger than the MTU, which it takes.
func TestEngineUDPLargerThanMTU(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			port := e.serveUDPWith(t, "127.0.0.1:0", serveUDPSizes)
			e.serveUDPWith(t, fmt.Sprintf("[::1]:%d", port), serveUDPSizes)
			cmds := []string{
				fmt.Sprintf("udpbig 192.0.2.254:%d 1400 1473 3000 65507", port),
				fmt.Sprintf("udpbig [2001:db8::fe]:%d 1400 1453 3000 65527", port),
			}
			r := e.run(t, append([]string{"--config-net", "-m", "1500", "--"}, e.peer(cmds...)...)...)
			mustSucceed(t, "UDP answers larger than the MTU", r)
			wantDone(t, r.Stdout, cmds...)
		})
	}
}

// TestEnginePing: ICMP and ICMPv6 echo to the gateway, answered
// through ping sockets on the host (by its loopback).
func TestEnginePing(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{ping: true})
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

// TestEnginePcap: -p captures the frames of a UDP exchange both
// ways, in a file standard tools read.
func TestEnginePcap(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{ping: true})
			port := e.serveUDP(t, "127.0.0.1:0")
			file := nstest.TempDir(t) + "/capture.pcap"
			cmd := "udp 192.0.2.254:" + strconv.Itoa(port)
			r := e.run(t, append([]string{"--config-net", "-p", file, "--"}, e.peer(cmd)...)...)
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
