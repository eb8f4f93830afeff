package e2e

// The test peer: both ends of every exchange the tests check. On the host
// side it runs in the test process, on sockets opened inside the host
// namespace (env_test.go). On the namespace side it is this test binary,
// re-executed by gopasta (or nsenter) with peerFlag first:
//
//	SELF -e2e-peer run CMD...   runs each CMD (one argument each, fields
//	                            separated by spaces), printing "CMD ok
//	                            [RESULT]" per command; the first that fails
//	                            ends the run with exit status 1
//	SELF -e2e-peer tapexec NETNS IFNAME ARGV...
//	                            opens TAP IFNAME in network namespace NETNS,
//	                            as a caller of --fd does, and executes ARGV
//	                            (in its own namespace) with "FD" in it
//	                            replaced by the TAP's descriptor
//	SELF -e2e-peer agent DIR    writes DIR/ready, then runs the commands the
//	                            test writes to DIR/cmd-1, cmd-2, ... and
//	                            answers each in DIR/res-N ("ok RESULT" or
//	                            "err REASON"), until "exit", until DIR goes
//	                            away, or after two idle minutes
//
// The commands are peer.command's. Every TCP exchange speaks one protocol
// (serveConn), every byte of content comes from one generator (stream), and
// every UDP check is one echo exchange (udpEcho).

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gopasta/gopasta/internal/dnstest"
	"github.com/gopasta/gopasta/internal/nstest"
)

// peerFlag as the test binary's first argument makes it the peer.
const peerFlag = "-e2e-peer"

// peerArgv is the command line that runs cmds with the peer binary self.
func peerArgv(self string, cmds ...string) []string {
	return append([]string{self, peerFlag, "run"}, cmds...)
}

// agentArgv is the command line of an agent working in dir.
func agentArgv(self, dir string) []string {
	return []string{self, peerFlag, "agent", dir}
}

func peerMain(args []string) int {
	var err error
	switch {
	case len(args) >= 1 && args[0] == "run":
		err = runCommands(args[1:])
	case len(args) == 2 && args[0] == "agent":
		err = runAgent(args[1])
	case len(args) >= 4 && args[0] == "tapexec":
		err = tapExec(args[1], args[2], args[3:]) // returns only on failure
	default:
		err = fmt.Errorf("usage: %s run CMD... | %s agent DIR | %s tapexec NETNS IFNAME ARGV...; got %q", peerFlag, peerFlag, peerFlag, args)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e peer: %v\n", err)
		return 1
	}
	return 0
}

// stream is the content of every transfer: ChaCha8 keyed by a per-transfer
// seed, so both ends produce it independently and neither holds the data.
func stream(seed uint64) io.Reader {
	var key [32]byte
	binary.BigEndian.PutUint64(key[:], seed)
	return rand.NewChaCha8(key)
}

// zeros is the content of the unchecked (timing) transfers.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// xferTimeout bounds one transfer of n bytes: generous enough for the VM
// guest under TCG.
func xferTimeout(n int64) time.Duration {
	return 60*time.Second + time.Duration(n>>20)*100*time.Millisecond
}

// serveTCP serves serveConn on l until l closes. An accept that fails for
// another reason (EMFILE while a test starves the process of descriptors)
// is retried, as gopasta does.
func serveTCP(l net.Listener, dir string) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		go serveConn(c, dir)
	}
}

// serveConn is the server side of the transfer protocol. The client's
// first byte says what it wants, followed by big-endian 8-byte arguments:
//
//	'P'           bytes until EOF; answered with the SHA-256 (hex) of what
//	              arrived
//	'G' N SEED    answered with the first N bytes of stream(SEED)
//	'U' N         N bytes, answered with one byte once all arrived (timing)
//	'D' N         answered with N zero bytes (timing)
//	'E'           echoes everything until EOF
//	'A'           answered with the client's address as the server sees it
//	'S' ID        streams until the connection fails, then writes how
//	              ("read reset", "write epipe", ...) to DIR/stream-ID
//	'R' N         sends N bytes of stream(1), then closes with a reset
//
// The server closes the connection after answering.
func serveConn(c net.Conn, dir string) {
	defer c.Close()
	r := bufio.NewReader(c)
	cmd, err := r.ReadByte()
	if err != nil {
		return
	}
	var args [2]uint64
	nargs := map[byte]int{'G': 2, 'U': 1, 'D': 1, 'S': 1, 'R': 1}[cmd]
	for i := range nargs {
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return
		}
		args[i] = binary.BigEndian.Uint64(b[:])
	}
	switch cmd {
	case 'P':
		h := sha256.New()
		if _, err := io.Copy(h, r); err != nil {
			return
		}
		io.WriteString(c, hex.EncodeToString(h.Sum(nil)))
	case 'G':
		io.CopyN(c, stream(args[1]), int64(args[0]))
	case 'U':
		if n, _ := io.CopyN(io.Discard, r, int64(args[0])); n == int64(args[0]) {
			c.Write([]byte{1})
		}
	case 'D':
		io.CopyN(c, zeros{}, int64(args[0]))
	case 'E':
		io.Copy(c, r)
	case 'A':
		io.WriteString(c, c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String())
	case 'S':
		how := make(chan string, 2)
		go func() {
			_, err := io.Copy(io.Discard, r)
			how <- "read " + errClass(err)
		}()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					how <- "write " + errClass(err)
					return
				}
			}
		}()
		report := <-how
		if dir != "" {
			writeFileAtomic(dir, fmt.Sprintf("stream-%d", args[0]), report)
		}
	case 'R':
		io.CopyN(c, stream(1), int64(args[0]))
		c.(*net.TCPConn).SetLinger(0)
	}
}

// request writes a protocol request: cmd and its arguments.
func request(c net.Conn, cmd byte, args ...uint64) error {
	b := []byte{cmd}
	for _, a := range args {
		b = binary.BigEndian.AppendUint64(b, a)
	}
	_, err := c.Write(b)
	return err
}

// put sends n bytes of stream(seed) on c ('P') and checks the SHA-256 the
// server computed of what it received.
func put(c net.Conn, n int64, seed uint64) error {
	c.SetDeadline(time.Now().Add(xferTimeout(n)))
	if err := request(c, 'P'); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(c, h), stream(seed), n); err != nil {
		return fmt.Errorf("put %d bytes: sending: %w", n, err)
	}
	return putEnd(c, h, "put", n)
}

// putEnd ends an upload ('P') of n bytes whose hash is h: end of file to
// the server, and its SHA-256 of what it received checked against h.
func putEnd(c net.Conn, h hash.Hash, what string, n int64) error {
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("%s %d bytes: reading the server's hash: %w", what, n, err)
	}
	if want := hex.EncodeToString(h.Sum(nil)); string(got) != want {
		return fmt.Errorf("%s %d bytes: the server received data with SHA-256 %q, want %q", what, n, got, want)
	}
	return nil
}

// get asks c's server for n bytes of stream(seed) ('G') and checks them
// byte for byte, and that exactly n arrive.
func get(c net.Conn, n int64, seed uint64) error {
	c.SetDeadline(time.Now().Add(xferTimeout(n)))
	if err := request(c, 'G', uint64(n), seed); err != nil {
		return err
	}
	want := stream(seed)
	got := make([]byte, 256<<10)
	exp := make([]byte, len(got))
	var total int64
	for {
		k, err := c.Read(got)
		if k > 0 {
			io.ReadFull(want, exp[:k])
			if i := firstDiff(got[:k], exp[:k]); i >= 0 {
				return fmt.Errorf("get %d bytes: byte %d: got %#x, want %#x", n, total+int64(i), got[i], exp[i])
			}
			total += int64(k)
			if total > n {
				return fmt.Errorf("get %d bytes: got more", n)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("get %d bytes: after %d: %w", n, total, err)
		}
	}
	if total != n {
		return fmt.Errorf("get %d bytes: got %d", n, total)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	if string(a) == string(b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// errClass names how a connection ended: "eof" (io.Copy's nil too),
// "reset", "epipe", or the error.
func errClass(err error) string {
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return "eof"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EPIPE):
		return "epipe"
	}
	return err.Error()
}

// resetConn closes c with a reset (SO_LINGER 0).
func resetConn(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }

// streamThenReset asks c's server for an endless stream ('S' id), reads 256
// KiB of it and resets the connection.
func streamThenReset(c net.Conn, id uint64) error {
	if err := request(c, 'S', id); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 256<<10)); err != nil {
		return fmt.Errorf("reading the stream: %w", err)
	}
	resetConn(c)
	return nil
}

// expectReset asks c's server to send n bytes and reset ('R'), and says how
// the stream ended (errClass), after how many bytes and how long.
func expectReset(c net.Conn, n uint64) (how string, got int64, took time.Duration) {
	start := time.Now()
	if err := request(c, 'R', n); err != nil {
		return errClass(err), 0, time.Since(start)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	got, err := io.Copy(io.Discard, c)
	return errClass(err), got, time.Since(start)
}

// udpSizes are the datagram sizes of an echo exchange, in order; longer
// exchanges cycle through them.
var udpSizes = []int{1, 100, 1000, 1400, 1472, 8000, 9000, 30000}

// udpEcho sends count datagrams on the connected socket c, of udpSizes in
// turn, datagram i holding the start of stream(i), and wants each echoed
// unchanged. A datagram may be lost (while a neighbour entry resolves, or
// under load): up to 5 tries, a second apart; a late echo of an earlier
// datagram is skipped, anything else that comes back is an error.
func udpEcho(c net.Conn, count int) error {
	buf := make([]byte, 65536)
	sent := map[string]bool{}
	for i := range count {
		msg := make([]byte, udpSizes[i%len(udpSizes)])
		io.ReadFull(stream(uint64(i)), msg)
		sent[string(msg)] = true
		ok := false
		var lastErr error
		for try := 0; try < 5 && !ok; try++ {
			if _, err := c.Write(msg); err != nil {
				lastErr = err // an ICMP error for an earlier one: try again
				continue
			}
			c.SetReadDeadline(time.Now().Add(time.Second))
			for !ok {
				n, err := c.Read(buf)
				if err != nil {
					lastErr = err // lost: send again
					break
				}
				switch {
				case string(buf[:n]) == string(msg):
					ok = true
				case !sent[string(buf[:n])]:
					return fmt.Errorf("datagram %d (%d bytes): got %d bytes back that were never sent", i, len(msg), n)
				}
			}
		}
		if !ok {
			return fmt.Errorf("datagram %d (%d bytes): no echo after 5 tries: %w", i, len(msg), lastErr)
		}
	}
	return nil
}

// serveUDPEcho echoes every datagram on pc until pc closes.
func serveUDPEcho(pc net.PacketConn) {
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		pc.WriteTo(buf[:n], from)
	}
}

// dialRetry dials from the namespace, retrying while its interface and
// routes settle (unreachable network or host) for up to 10 s.
func dialRetry(network, addr string) (net.Conn, error) {
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		var c net.Conn
		if c, err = net.DialTimeout(network, addr, 10*time.Second); err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.ENETUNREACH) && !errors.Is(err, syscall.EHOSTUNREACH) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, err
}

// runCommands is the peer's run mode.
func runCommands(cmds []string) error {
	if len(cmds) == 0 {
		return errors.New("run: no command")
	}
	p := &peer{}
	for _, cmd := range cmds {
		res, err := p.command(strings.Fields(cmd))
		if err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
		fmt.Println(strings.TrimRight(cmd+" ok "+res, " "))
	}
	return nil
}

// runAgent is the peer's agent mode.
func runAgent(dir string) error {
	p := &peer{dir: dir}
	if err := writeFileAtomic(dir, "ready", "ok"); err != nil {
		return err
	}
	for i := 1; ; i++ {
		name := filepath.Join(dir, fmt.Sprintf("cmd-%d", i))
		var b []byte
		for idle := time.Now(); ; time.Sleep(10 * time.Millisecond) {
			var err error
			if b, err = os.ReadFile(name); err == nil {
				break
			}
			if _, err := os.Stat(dir); err != nil || time.Since(idle) > 2*time.Minute {
				return nil
			}
		}
		f := strings.Fields(string(b))
		if len(f) == 1 && f[0] == "exit" {
			return nil
		}
		res, err := p.command(f)
		if err != nil {
			res = "err " + err.Error()
		} else {
			res = "ok " + res
		}
		if err := writeFileAtomic(dir, fmt.Sprintf("res-%d", i), res); err != nil {
			return err
		}
	}
}

// writeFileAtomic writes dir/name so that a reader polling for the name
// never sees it half written.
func writeFileAtomic(dir, name, content string) error {
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o666); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// peer is the namespace side's state: in agent mode, servers outlive the
// command that started them.
type peer struct {
	dir       string // where 'S' streams report; "" for nowhere
	listeners map[string]net.Listener
	mu        sync.Mutex  // guards held: bg commands run at the same time
	held      []io.Closer // what sink and stall keep open until release
}

// hold keeps c open until the release command.
func (p *peer) hold(c io.Closer) {
	p.mu.Lock()
	p.held = append(p.held, c)
	p.mu.Unlock()
}

// command runs one peer command and returns its result:
//
//	put ADDR N SEED          a checked upload ('P'); the result is how long it took
//	get ADDR N SEED          a checked download ('G'); likewise
//	udp ADDR [COUNT]         a UDP echo exchange (udpEcho) of COUNT datagrams,
//	                         by default one of each of udpSizes
//	dns SERVER NAME WANT...  A and AAAA over UDP and A over TCP, each answered
//	                         with one address among WANT
//	churn ADDR N             N short echo connections ('E'), one after the other,
//	                         each over on both sides before the next
//	flood ADDR COUNT SIZE    COUNT datagrams of SIZE bytes as fast as the socket
//	                         takes them (ENOBUFS ignored), nothing expected back
//	bench ADDR N up|down     one timed, unchecked transfer of N bytes ('U' or
//	                         'D'); the result is the seconds it took
//	listen ADDR              serves serveConn on ADDR until unlisten
//	unlisten ADDR            closes that listener
//	udpecho ADDR...          UDP echo servers on each ADDR
//	udpbursts ADDR N         N bursts ending in an empty datagram (udpBursts)
//	udpsink ADDR             a burst sink (serveUDPSink) on ADDR
//	waitput ADDR MS          retries a small put for up to MS ms; the result is
//	                         how many ms it took
//	waitrefused ADDR MS      waits up to MS ms for connections to be refused;
//	                         likewise
//	streamreset ADDR ID      streamThenReset
//	expectreset ADDR N       expectReset; the result is how it ended and after
//	                         how many ms
//	addrs                    the namespace's global addresses
//	links                    the namespace's interface names, comma-separated
//	bg ID CMD...             runs CMD in the background (agent mode only) and
//	                         writes its answer to DIR/bg-ID like a res-N file,
//	                         so several commands can run at once
//	hostile MS SEED PORTS    writes crafted and malformed frames to the TAP
//	                         through AF_PACKET for MS ms (hostileFrames);
//	                         PORTS (comma-separated) are TCP ports whose live
//	                         connections get out-of-window segments too; the
//	                         result counts what was sent
//	badmac                   writes frames gopasta must drop (foreignMACFrames)
//	                         from another source MAC address than the TAP's
//	sink ADDR                a TCP server on ADDR that accepts and never reads
//	stall ADDR               connects to ADDR and writes until the writes stop
//	                         taking bytes for a second; the connection stays
//	                         open until release; the result is the bytes taken
//	release                  closes what sink and stall hold
//	ping ADDR                two echo requests with busybox ping; one answer
//	                         is enough
//	hold ADDR N              opens N echo connections (holdConns), kept open
//	                         until release; the result is "held H refused R
//	                         failed F"
//	slowput ADDR N SEED MS   put, spread over MS milliseconds (slowPut)
//	ttlprobe ADDR TTL        UDP probes with TTL or hop limit TTL (ttlProbe);
//	                         the result is "reply" or "icmp TYPE CODE FROM"
//	dgram ADDR SRC N DATA    N datagrams of DATA to ADDR (a group or a
//	                         broadcast address too) from port SRC, nothing
//	                         expected back (sendDatagrams)
//	neigh ADDR MAC MS [flush]  resolves ADDR (its entry flushed first, if
//	                         asked) and waits up to MS ms for its
//	                         neighbour entry to show MAC (neighWait)
//	udpports ADDR FIRST N    one datagram from one socket to each of ports
//	                         FIRST to FIRST+N-1 of ADDR (an address), in
//	                         order; nothing needs to answer
func (p *peer) command(f []string) (string, error) {
	if len(f) == 0 {
		return "", errors.New("empty command")
	}
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	num := func(i int) int64 {
		n, _ := strconv.ParseInt(arg(i), 10, 64)
		return n
	}
	switch f[0] {
	case "put", "get":
		c, err := dialRetry("tcp", arg(1))
		if err != nil {
			return "", err
		}
		defer c.Close()
		start := time.Now()
		if f[0] == "put" {
			err = put(c, num(2), uint64(num(3)))
		} else {
			err = get(c, num(2), uint64(num(3)))
		}
		return time.Since(start).Round(time.Millisecond).String(), err
	case "udp":
		count := len(udpSizes)
		if len(f) > 2 {
			count = int(num(2))
		}
		c, err := dialRetry("udp", arg(1))
		if err != nil {
			return "", err
		}
		defer c.Close()
		return "", udpEcho(c, count)
	case "udpspray":
		// udpspray ADDR COUNT: one datagram from each of COUNT new
		// sockets, so COUNT new flows, answered or not.
		for i := range int(num(2)) {
			c, err := net.Dial("udp", arg(1))
			if err != nil {
				return "", fmt.Errorf("socket %d: %w", i, err)
			}
			_, err = c.Write([]byte("spray"))
			c.Close()
			if err != nil && !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.ECONNREFUSED) {
				return "", fmt.Errorf("datagram %d: %w", i, err)
			}
		}
		return "", nil
	case "udpports":
		return "", udpPorts(netip.MustParseAddr(arg(1)), int(num(2)), int(num(3)))
	case "udpbig":
		// udpbig ADDR SIZE...: one datagram asks the server (serveUDPSizes)
		// for datagrams of SIZE bytes each, which must all arrive whole.
		c, err := dialRetry("udp", arg(1))
		if err != nil {
			return "", err
		}
		defer c.Close()
		return "", udpSizesCheck(c, f[2:])
	case "udpwho":
		// udpwho ADDR PORT: from local port PORT, ask the server
		// (serveUDPWho) which source port it saw; it must be PORT.
		la := &net.UDPAddr{Port: int(num(2))}
		var c net.Conn
		var err error
		for try := 0; try < 50; try++ {
			if c, err = net.DialUDP("udp", la, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(arg(1)))); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return "", err
		}
		defer c.Close()
		buf := make([]byte, 64)
		for try := 0; try < 5; try++ {
			c.Write([]byte("who"))
			c.SetReadDeadline(time.Now().Add(time.Second))
			n, err := c.Read(buf)
			if err != nil {
				continue
			}
			if got := string(buf[:n]); got != arg(2) {
				return "", fmt.Errorf("udpwho: the server saw source port %s, want %s", got, arg(2))
			}
			return "", nil
		}
		return "", errors.New("udpwho: no answer")
	case "dns":
		if len(f) < 4 {
			return "", fmt.Errorf("want dns SERVER NAME WANT..., got %q", f)
		}
		return dnsCheck(f[1], f[2], f[3:])
	case "churn":
		return "", churn(arg(1), int(num(2)))
	case "flood":
		return flood(arg(1), int(num(2)), int(num(3)))
	case "bench":
		return bench(arg(1), num(2), arg(3))
	case "listen":
		l, err := net.Listen("tcp", arg(1))
		if err != nil {
			return "", err
		}
		if p.listeners == nil {
			p.listeners = map[string]net.Listener{}
		}
		p.listeners[arg(1)] = l
		go serveTCP(l, p.dir)
		return "", nil
	case "unlisten":
		l, ok := p.listeners[arg(1)]
		if !ok {
			return "", fmt.Errorf("not listening on %s", arg(1))
		}
		delete(p.listeners, arg(1))
		return "", l.Close()
	case "udpbursts":
		return "", udpBursts(func() (net.Conn, error) { return dialRetry("udp", arg(1)) }, int(num(2)))
	case "udpsink":
		pc, err := net.ListenPacket("udp", arg(1))
		if err != nil {
			return "", err
		}
		go serveUDPSink(pc)
		return "", nil
	case "udpecho":
		for _, a := range f[1:] {
			pc, err := net.ListenPacket("udp", a)
			if err != nil {
				return "", err
			}
			go serveUDPEcho(pc)
		}
		return "", nil
	case "waitput":
		start := time.Now()
		err := nstest.WaitFor(time.Duration(num(2))*time.Millisecond, func() error {
			c, err := net.DialTimeout("tcp", arg(1), time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			return put(c, 100, 5)
		})
		return strconv.FormatInt(time.Since(start).Milliseconds(), 10), err
	case "waitrefused":
		start := time.Now()
		err := nstest.WaitFor(time.Duration(num(2))*time.Millisecond, func() error {
			c, err := net.DialTimeout("tcp", arg(1), time.Second)
			if err != nil {
				return nil
			}
			c.Close()
			return errors.New("still accepting connections")
		})
		return strconv.FormatInt(time.Since(start).Milliseconds(), 10), err
	case "streamreset":
		c, err := net.DialTimeout("tcp", arg(1), 3*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return "", streamThenReset(c, uint64(num(2)))
	case "expectreset":
		c, err := net.DialTimeout("tcp", arg(1), 3*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		how, _, took := expectReset(c, uint64(num(2)))
		return fmt.Sprintf("%s %d", how, took.Milliseconds()), nil
	case "bg":
		if p.dir == "" || len(f) < 3 {
			return "", fmt.Errorf("want bg ID CMD... in agent mode, got %q", f)
		}
		go func() {
			res, err := p.command(f[2:])
			if err != nil {
				res = "err " + err.Error()
			} else {
				res = "ok " + res
			}
			writeFileAtomic(p.dir, "bg-"+f[1], res)
		}()
		return "", nil
	case "ping":
		return "", pingCheck(arg(1))
	case "ttlprobe":
		return ttlProbe(arg(1), int(num(2)))
	case "dgram":
		return "", sendDatagrams(arg(1), int(num(2)), int(num(3)), arg(4))
	case "neigh":
		return neighCmd(f)
	case "hostile":
		return hostileFrames(time.Duration(num(1))*time.Millisecond, uint64(num(2)), arg(3))
	case "badmac":
		return foreignMACFrames()
	case "sink":
		l, err := net.Listen("tcp", arg(1))
		if err != nil {
			return "", err
		}
		p.hold(l)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				p.hold(c)
			}
		}()
		return "", nil
	case "stall":
		c, err := dialRetry("tcp", arg(1))
		if err != nil {
			return "", err
		}
		p.hold(c)
		n, err := stallWrite(c)
		return strconv.FormatInt(n, 10), err
	case "hold":
		cs, n := holdConns(func() (net.Conn, error) {
			return net.DialTimeout("tcp", arg(1), connectTimeout)
		}, int(num(2)))
		for _, c := range cs {
			p.hold(c)
		}
		return n.String(), nil
	case "slowput":
		c, err := dialRetry("tcp", arg(1))
		if err != nil {
			return "", err
		}
		defer c.Close()
		return "", slowPut(c, num(2), uint64(num(3)), time.Duration(num(4))*time.Millisecond)
	case "release":
		p.mu.Lock()
		held := p.held
		p.held = nil
		p.mu.Unlock()
		for _, c := range held {
			c.Close()
		}
		return strconv.Itoa(len(held)), nil
	case "addrs":
		as, err := net.InterfaceAddrs()
		if err != nil {
			return "", err
		}
		var out []string
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
				out = append(out, n.String())
			}
		}
		return strings.Join(out, " "), nil
	case "links":
		ifs, err := net.Interfaces()
		if err != nil {
			return "", err
		}
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		return strings.Join(names, ","), nil
	}
	if c, ok := moreCommands[f[0]]; ok {
		return c(f)
	}
	return "", fmt.Errorf("unknown command %q", f[0])
}

// moreCommands are peer commands of one test file each, registered by its
// init and documented there: name, then the command with its arguments.
var moreCommands = map[string]func(f []string) (string, error){}

// dnsCheck queries server for name (A and AAAA over UDP, A over TCP) and
// wants each answered with one address among want.
func dnsCheck(server, name string, want []string) (string, error) {
	var wantAddrs []netip.Addr
	for _, a := range want {
		ad, err := netip.ParseAddr(a)
		if err != nil {
			return "", err
		}
		wantAddrs = append(wantAddrs, ad)
	}
	var got []string
	for _, q := range []struct {
		network string
		qtype   uint16
	}{{"udp", dnstest.TypeA}, {"udp", dnstest.TypeAAAA}, {"tcp", dnstest.TypeA}} {
		resp, err := dnsQuery(q.network, server, name, q.qtype)
		if err != nil {
			return "", fmt.Errorf("%s query type %d: %w", q.network, q.qtype, err)
		}
		if len(resp.Addrs) != 1 || !slices.Contains(wantAddrs, resp.Addrs[0]) {
			return "", fmt.Errorf("%s query type %d: got rcode %d addresses %v, want one of %v",
				q.network, q.qtype, resp.RCode, resp.Addrs, wantAddrs)
		}
		got = append(got, fmt.Sprintf("%s/%d=%v", q.network, q.qtype, resp.Addrs[0]))
	}
	return strings.Join(got, " "), nil
}

// dnsQuery asks server one question, up to 3 times over UDP.
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

// churn makes n short echo connections to addr, one after the other.
func churn(addr string, n int) error {
	const msg = "churn!"
	buf := make([]byte, 64)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("E" + msg)); err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		c.(*net.TCPConn).CloseWrite()
		k, err := io.ReadFull(c, buf[:len(msg)])
		if err != nil || string(buf[:k]) != msg {
			return fmt.Errorf("connection %d: got %q (%v), want the echo %q", i, buf[:k], err, msg)
		}
		// The server closes after the echo: wait for its FIN so every
		// connection is over on both sides before the next.
		if k, err := c.Read(buf); err != io.EOF {
			return fmt.Errorf("connection %d: got %d more bytes (%v), want EOF", i, k, err)
		}
		c.Close()
	}
	return nil
}

// flood sends count datagrams of size bytes to addr as fast as the socket
// takes them.
func flood(addr string, count, size int) (string, error) {
	c, err := dialRetry("udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	msg := make([]byte, size)
	start := time.Now()
	for i := range count {
		if _, err := c.Write(msg); err != nil && !errors.Is(err, syscall.ENOBUFS) {
			return "", fmt.Errorf("datagram %d: %w", i, err)
		}
	}
	took := time.Since(start)
	// Let gopasta drain the TAP before the namespace goes away.
	time.Sleep(500 * time.Millisecond)
	return took.Round(time.Millisecond).String(), nil
}

// bench times one unchecked transfer of n bytes to ("up") or from ("down")
// addr and returns the seconds it took.
func bench(addr string, n int64, dir string) (string, error) {
	c, err := dialRetry("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	start := time.Now()
	switch dir {
	case "up":
		if err := request(c, 'U', uint64(n)); err != nil {
			return "", err
		}
		if _, err := io.CopyN(c, zeros{}, n); err != nil {
			return "", err
		}
		var ack [1]byte
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			return "", fmt.Errorf("waiting for the ack: %w", err)
		}
	case "down":
		if err := request(c, 'D', uint64(n)); err != nil {
			return "", err
		}
		if got, err := io.CopyN(io.Discard, c, n); err != nil {
			return "", fmt.Errorf("after %d bytes: %w", got, err)
		}
	default:
		return "", fmt.Errorf("direction %q: want up or down", dir)
	}
	return fmt.Sprintf("%.6f", time.Since(start).Seconds()), nil
}

// udpSizesCheck sends the sizes wanted (decimal, space-separated) on c and
// wants a datagram of each size back, in any order, within 5 s.
func udpSizesCheck(c net.Conn, sizes []string) error {
	want := map[int]bool{}
	for _, s := range sizes {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("udpbig: size %q: %w", s, err)
		}
		want[n] = true
	}
	if _, err := c.Write([]byte(strings.Join(sizes, " "))); err != nil {
		return err
	}
	buf := make([]byte, 65536)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(want) > 0 {
		n, err := c.Read(buf)
		if err != nil {
			return fmt.Errorf("udpbig: still waiting for sizes %v: %w", slices.Sorted(maps.Keys(want)), err)
		}
		delete(want, n)
	}
	return nil
}

// serveUDPSizes answers each datagram, a list of sizes, with a datagram
// of each size.
func serveUDPSizes(pc net.PacketConn) {
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		for _, s := range strings.Fields(string(buf[:n])) {
			if k, err := strconv.Atoi(s); err == nil && k >= 0 && k <= 65527 {
				pc.WriteTo(make([]byte, k), from)
			}
		}
	}
}

// serveUDPWho answers each datagram with the source port it came from.
func serveUDPWho(pc net.PacketConn) {
	buf := make([]byte, 64)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		pc.WriteTo([]byte(strconv.Itoa(from.(*net.UDPAddr).Port)), from)
	}
}

// connectTimeout bounds a connection attempt of holdConns and its echo. A
// refusal at a limit is a reset, at once; a connection that waited in a
// listener's queue while every descriptor was taken, and is served once
// one is free, may take seconds, as it would with a kernel's full queue.
const connectTimeout = 10 * time.Second

// holdCount is what holdConns made of its attempts, and the first error
// that was not a refusal.
type holdCount struct {
	held, refused, failed int
	firstFailure          error
}

func (n holdCount) String() string {
	s := fmt.Sprintf("held %d refused %d failed %d", n.held, n.refused, n.failed)
	if n.firstFailure != nil {
		s += " (first: " + n.firstFailure.Error() + ")"
	}
	return s
}

// holdConns opens n connections with dial, one after the other, each
// proven with a one-byte echo ('E'): those that echo are held (returned
// open, the server still echoing); a connection reset, refused or ended
// before its echo was refused; one that timed out or failed otherwise
// failed.
func holdConns(dial func() (net.Conn, error), n int) ([]net.Conn, holdCount) {
	var held []net.Conn
	var cnt holdCount
	buf := make([]byte, 1)
	for range n {
		c, err := dial()
		if err == nil {
			c.SetDeadline(time.Now().Add(connectTimeout))
			if _, err = c.Write([]byte("Ex")); err == nil {
				_, err = io.ReadFull(c, buf)
			}
		}
		switch {
		case err == nil:
			c.SetDeadline(time.Time{})
			held = append(held, c)
			cnt.held++
			continue
		case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
			errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			cnt.refused++
		default:
			cnt.failed++
			if cnt.firstFailure == nil {
				cnt.firstFailure = err
			}
		}
		if c != nil {
			c.Close()
		}
	}
	return held, cnt
}

// slowPut is put spread over about d: the data goes in 64 KiB writes
// paced evenly, so that the connection stays open and busy that long.
func slowPut(c net.Conn, n int64, seed uint64, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d + xferTimeout(n)))
	if err := request(c, 'P'); err != nil {
		return err
	}
	const chunk = 64 << 10
	h := sha256.New()
	src := io.TeeReader(stream(seed), h)
	steps := max(n/chunk, 1)
	start := time.Now()
	buf := make([]byte, chunk)
	for i, left := int64(0), n; left > 0; i++ {
		k := min(left, chunk)
		if _, err := io.ReadFull(src, buf[:k]); err != nil {
			return err
		}
		if _, err := c.Write(buf[:k]); err != nil {
			return fmt.Errorf("slow put of %d bytes: sending after %d: %w", n, n-left, err)
		}
		left -= k
		time.Sleep(time.Until(start.Add(d * time.Duration(i+1) / time.Duration(steps))))
	}
	return putEnd(c, h, "slow put of", n)
}

// udpPorts sends one datagram to each of n ports of addr from first on,
// from one socket. Refusals (ICMP port unreachable, reported on later
// sends) are expected.
func udpPorts(addr netip.Addr, first, n int) error {
	c, err := net.ListenUDP("udp", nil)
	if err != nil {
		return err
	}
	defer c.Close()
	for p := first; p < first+n; p++ {
		_, err := c.WriteToUDPAddrPort([]byte("port"), netip.AddrPortFrom(addr, uint16(p)))
		if err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("datagram to port %d: %w", p, err)
		}
	}
	return nil
}
