package main

// The namespace side of the engine tests: the test binary re-executed
// inside the namespace gopasta serves (`SELF engineHelperArg MODE ARGS`).
// init runs before the testing package looks at the arguments, so the
// helper never starts the tests. Each mode prints one line per check that
// passed and exits 1 with the reason on the first that did not.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gopasta/gopasta/internal/dnstest"
)

// engineHelperArg as the first argument selects helper mode.
const engineHelperArg = "-gopasta-engine-helper"

// udpSizes are the datagram sizes the UDP checks send to each target.
var udpSizes = []int{1, 1000, 8000}

func init() {
	if len(os.Args) < 3 || os.Args[1] != engineHelperArg {
		return
	}
	if err := engineHelper(os.Args[2], os.Args[3:]); err != nil {
		fmt.Fprintf(os.Stderr, "engine helper %s: %v\n", os.Args[2], err)
		os.Exit(1)
	}
	os.Exit(0)
}

func engineHelper(mode string, args []string) error {
	switch mode {
	case "udp":
		return helperUDP(args)
	case "dns":
		return helperDNS(args)
	case "tcp":
		return helperTCP(args)
	case "churn":
		return helperChurn(args)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// helperUDP sends datagrams of udpSizes to each target (an echo server)
// and checks each comes back unchanged.
func helperUDP(targets []string) error {
	for _, tg := range targets {
		c, err := net.Dial("udp", tg)
		if err != nil {
			return err
		}
		buf := make([]byte, 65536)
		for _, size := range udpSizes {
			msg := make([]byte, size)
			rand.Read(msg)
			ok := false
			// A datagram may be lost while the neighbour entry
			// resolves; three tries at one second each.
			for try := 0; try < 3 && !ok; try++ {
				if _, err := c.Write(msg); err != nil {
					return fmt.Errorf("%s: sending %d bytes: %w", tg, size, err)
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				n, err := c.Read(buf)
				if err != nil {
					continue
				}
				if !bytes.Equal(buf[:n], msg) {
					return fmt.Errorf("%s: got %d bytes back, not the %d sent", tg, n, size)
				}
				ok = true
			}
			if !ok {
				return fmt.Errorf("%s: got no echo of %d bytes after 3 tries", tg, size)
			}
		}
		c.Close()
		fmt.Printf("udp %s ok\n", tg)
	}
	return nil
}

// helperDNS: SERVER NAME WANT... queries SERVER for NAME (A and AAAA over
// UDP, A over TCP) and checks the answers are among WANT.
func helperDNS(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("want SERVER NAME WANT..., got %q", args)
	}
	server, name := args[0], args[1]
	var want []netip.Addr
	for _, a := range args[2:] {
		want = append(want, netip.MustParseAddr(a))
	}
	for _, q := range []struct {
		network string
		qtype   uint16
	}{{"udp", dnstest.TypeA}, {"udp", dnstest.TypeAAAA}, {"tcp", dnstest.TypeA}} {
		resp, err := dnsQuery(q.network, server, name, q.qtype)
		if err != nil {
			return fmt.Errorf("%s query type %d to %s: %w", q.network, q.qtype, server, err)
		}
		if len(resp.Addrs) != 1 || !slices.Contains(want, resp.Addrs[0]) {
			return fmt.Errorf("%s query type %d to %s: got rcode %d addresses %v, want one of %v",
				q.network, q.qtype, server, resp.RCode, resp.Addrs, want)
		}
		fmt.Printf("dns %s %d %s ok %v\n", q.network, q.qtype, server, resp.Addrs[0])
	}
	return nil
}

func dnsQuery(network, server, name string, qtype uint16) (dnstest.Response, error) {
	c, err := net.DialTimeout(network, server, 5*time.Second)
	if err != nil {
		return dnstest.Response{}, err
	}
	defer c.Close()
	id := uint16(time.Now().UnixNano())
	q := dnstest.NewQuery(id, name, qtype)
	buf := make([]byte, 4096)
	for try := 0; try < 3; try++ {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		var n int
		if network == "tcp" {
			if _, err = c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
				return dnstest.Response{}, err
			}
			if _, err = io.ReadFull(c, buf[:2]); err == nil {
				n = int(binary.BigEndian.Uint16(buf))
				_, err = io.ReadFull(c, buf[:n])
			}
		} else {
			if _, err = c.Write(q); err != nil {
				return dnstest.Response{}, err
			}
			n, err = c.Read(buf)
		}
		if err != nil {
			if network == "tcp" {
				return dnstest.Response{}, err
			}
			continue
		}
		r, err := dnstest.ParseResponse(buf[:n])
		if err != nil {
			return r, err
		}
		if r.ID != id {
			return r, fmt.Errorf("got response id %#x, want %#x", r.ID, id)
		}
		return r, nil
	}
	return dnstest.Response{}, fmt.Errorf("no answer after 3 tries: %w", err)
}

// helperTCP: SIZES ADDR... uploads and downloads a stream of each size
// (comma-separated list) to and from the transfer server at each address,
// and checks both ends saw exactly the stream.
func helperTCP(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("want SIZES ADDR..., got %q", args)
	}
	var sizes []int64
	for _, s := range strings.Split(args[0], ",") {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		sizes = append(sizes, n)
	}
	for i, addr := range args[1:] {
		for j, n := range sizes {
			seed := uint64(i*100 + j)
			start := time.Now()
			h, err := tcpPut(addr, n, seed)
			if err != nil {
				return fmt.Errorf("upload of %d bytes to %s: %w", n, addr, err)
			}
			fmt.Printf("tcp put %s %d ok %s %v\n", addr, n, h, time.Since(start).Round(time.Millisecond))
			start = time.Now()
			if h, err = tcpGet(addr, n, seed+50); err != nil {
				return fmt.Errorf("download of %d bytes from %s: %w", n, addr, err)
			}
			fmt.Printf("tcp get %s %d ok %s %v\n", addr, n, h, time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}

// xferDeadline bounds one transfer: 1 GiB at a pessimistic 100 Mbit/s.
const xferDeadline = 90 * time.Second

func dialTCP(addr string) (*net.TCPConn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(xferDeadline))
	return c.(*net.TCPConn), nil
}

// tcpPut sends stream seed and returns the hash the server computed of
// what it received, after checking it against our own.
func tcpPut(addr string, n int64, seed uint64) (string, error) {
	c, err := dialTCP(addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "PUT %d %d\n", n, seed); err != nil {
		return "", err
	}
	if _, err := io.CopyN(c, streamOf(seed), n); err != nil {
		return "", fmt.Errorf("sending: %w", err)
	}
	if err := c.CloseWrite(); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the server's verdict: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "OK" {
		return "", fmt.Errorf("server: %s", strings.TrimSpace(line))
	}
	if want := streamHash(n, seed); f[2] != want || f[1] != strconv.FormatInt(n, 10) {
		return "", fmt.Errorf("server received %s bytes with SHA-256 %s, want %d bytes with %s", f[1], f[2], n, want)
	}
	return f[2], nil
}

// tcpGet asks for stream seed and checks what arrives.
func tcpGet(addr string, n int64, seed uint64) (string, error) {
	c, err := dialTCP(addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET %d %d\n", n, seed); err != nil {
		return "", err
	}
	_, h, err := verifyStream(c, n, seed)
	return h, err
}

// helperChurn: ADDR N STARTFILE ENDFILE waits for STARTFILE, makes N short
// echo connections to ADDR one after the other, says "churn done", and
// waits for ENDFILE, so the test can look at gopasta in between.
func helperChurn(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("want ADDR N STARTFILE ENDFILE, got %q", args)
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	if err := waitFile(args[2]); err != nil {
		return err
	}
	msg := []byte("ECHO\nchurn!")
	buf := make([]byte, 64)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", args[0], 5*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(msg); err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		c.(*net.TCPConn).CloseWrite()
		k, err := io.ReadFull(c, buf[:len("churn!")])
		if err != nil || string(buf[:k]) != "churn!" {
			return fmt.Errorf("connection %d: got %q (%v), want the echo \"churn!\"", i, buf[:k], err)
		}
		// The server closes after the echo: wait for its FIN so every
		// connection is over on both sides before the next.
		if k, err := c.Read(buf); err != io.EOF {
			return fmt.Errorf("connection %d: got %d more bytes (%v), want EOF", i, k, err)
		}
		c.Close()
	}
	fmt.Println("churn done")
	return waitFile(args[3])
}

func waitFile(path string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not appear within 60s", path)
}
