package splice

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/sock"
)

// transfer sends up and down concurrently (either may be nil) through a
// spliced connection and checks both arrive intact.
func transfer(t testing.TB, client, server *net.TCPConn, up, down []byte) {
	t.Helper()
	type result struct {
		n   int64
		sum [32]byte
		err error
	}
	var wg sync.WaitGroup
	var upRes, downRes result
	var upErr, downErr error
	wg.Add(4)
	go func() { defer wg.Done(); upErr = sendAndClose(client, up) }()
	go func() { defer wg.Done(); downErr = sendAndClose(server, down) }()
	go func() { defer wg.Done(); upRes.n, upRes.sum, upRes.err = readAllHash(server) }()
	go func() { defer wg.Done(); downRes.n, downRes.sum, downRes.err = readAllHash(client) }()
	wg.Wait()
	for _, c := range []struct {
		name    string
		sendErr error
		res     result
		sent    []byte
	}{{"client->server", upErr, upRes, up}, {"server->client", downErr, downRes, down}} {
		if c.sendErr != nil {
			t.Errorf("%s: send: %v", c.name, c.sendErr)
		}
		if c.res.err != nil {
			t.Errorf("%s: receive: %v", c.name, c.res.err)
		}
		if c.res.n != int64(len(c.sent)) || c.res.sum != sha256.Sum256(c.sent) {
			t.Errorf("%s: got %d bytes (sha256 %x), want %d bytes (sha256 %x)",
				c.name, c.res.n, c.res.sum[:8], len(c.sent), sha256.Sum256(c.sent))
		}
	}
}

func TestTCPTransfer(t *testing.T) {
	r := newRig(t, Options{})
	for _, tc := range []struct {
		name     string
		up, down int
	}{
		{"2KiB up", 2 << 10, 0},
		{"2KiB down", 0, 2 << 10},
		{"2KiB both", 2 << 10, 2 << 10},
		{"10MiB up", 10 << 20, 0},
		{"10MiB down", 0, 10 << 20},
		{"10MiB both", 10 << 20, 10 << 20},
		{"empty", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := r.connect(t)
			transfer(t, client, server, randomBytes(t, tc.up), randomBytes(t, tc.down))
		})
	}
	waitFor(t, "all connections retired", testTimeout, func() bool { return r.f.Stats().TCPActive == 0 })
	if st := r.f.Stats(); st.TCPResets != 0 {
		t.Errorf("got %d resets, want 0", st.TCPResets)
	}
}

// The client half-closes first; the server answers afterwards and the
// client must still get every byte.
func TestTCPHalfClose(t *testing.T) {
	r := newRig(t, Options{})
	client, server := r.connect(t)
	req, resp := randomBytes(t, 4096), randomBytes(t, 3<<20)
	if err := sendAndClose(client, req); err != nil {
		t.Fatalf("client send: %v", err)
	}
	n, sum, err := readAllHash(server)
	if err != nil || n != int64(len(req)) || sum != sha256.Sum256(req) {
		t.Fatalf("server got %d bytes, err %v; want %d intact bytes then EOF", n, err, len(req))
	}
	// The client's write side is closed, its read side must still work.
	go func() { _ = sendAndClose(server, resp) }()
	n, sum, err = readAllHash(client)
	if err != nil || n != int64(len(resp)) || sum != sha256.Sum256(resp) {
		t.Fatalf("client got %d bytes, err %v; want %d intact bytes", n, err, len(resp))
	}
	waitFor(t, "connection retired", testTimeout, func() bool { return r.f.Stats().TCPActive == 0 })
}

func TestTCPPeerReset(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resetSide string // which peer aborts
	}{
		{"server resets", "server"},
		{"client resets", "client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Options{})
			before := countFds(t)
			client, server := r.connect(t)
			victim, survivor := server, client
			if tc.resetSide == "client" {
				victim, survivor = client, server
			}
			// The survivor streams; once bytes flow, the victim aborts.
			chunk := randomBytes(t, 64<<10)
			errc := make(chan error, 1)
			go func() {
				for {
					if _, err := survivor.Write(chunk); err != nil {
						errc <- err
						return
					}
				}
			}()
			if _, err := io.ReadFull(victim, make([]byte, 256<<10)); err != nil {
				t.Fatalf("victim read: %v", err)
			}
			victim.SetLinger(0)
			victim.Close()
			start := time.Now()
			select {
			case err := <-errc:
				if !isReset(err) {
					t.Errorf("survivor write error: got %v, want ECONNRESET or EPIPE", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("survivor still writing 5 s after the peer reset")
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("reset reached the survivor after %v, want < 2 s", d)
			}
			// A read now sees the reset (or EOF if the RST raced the data).
			survivor.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := io.Copy(io.Discard, survivor)
			if err != nil && !isReset(err) {
				t.Errorf("survivor read: got %v, want reset or EOF", err)
			}
			survivor.Close()
			waitFor(t, "connection retired", 5*time.Second, func() bool { return r.f.Stats().TCPActive == 0 })
			if got := r.f.Stats().TCPResets; got != 1 {
				t.Errorf("got %d resets, want 1", got)
			}
			// Clean pipes stay pooled for the next connection; anything
			// else still open is a leak.
			waitFor(t, "fds back to baseline", 5*time.Second, func() bool {
				_, _, idle := r.f.pool.counts()
				return countFds(t)-2*idle <= before
			})
		})
	}
}

func TestTCPConcurrent(t *testing.T) {
	const conns = 200
	r := newRig(t, Options{})
	type pair struct{ c, s *net.TCPConn }
	pairs := make([]pair, conns)
	for i := range pairs {
		pairs[i].c, pairs[i].s = r.connect(t)
	}
	// The forwarder registers connections on its own thread: wait
	// (bounded) for all of them rather than sampling once.
	waitFor(t, "all connections registered", testTimeout, func() bool { return r.f.Stats().TCPActive == conns })
	var wg sync.WaitGroup
	for i := range pairs {
		wg.Add(1)
		go func(p pair, size int) {
			defer wg.Done()
			transfer(t, p.c, p.s, randomBytes(t, size), randomBytes(t, size/2))
		}(pairs[i], 16<<10+i*512)
	}
	wg.Wait()
	waitFor(t, "all connections retired", testTimeout, func() bool { return r.f.Stats().TCPActive == 0 })
	st := r.f.Stats()
	if st.TCPTotal != conns || st.TCPResets != 0 {
		t.Errorf("got total %d resets %d, want %d and 0", st.TCPTotal, st.TCPResets, conns)
	}
}

// TestTCP1GiB streams 1 GiB one way through one connection (about 1-2 s
// on loopback).
func TestTCP1GiB(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB transfer skipped in -short mode")
	}
	const total = 1 << 30
	r := newRig(t, Options{})
	client, server := r.connect(t)
	block := randomBytes(t, 4<<20)
	want := sha256.New()
	for i := 0; i < total/len(block); i++ {
		want.Write(block)
	}
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < total/len(block); i++ {
			if _, err := client.Write(block); err != nil {
				errc <- err
				return
			}
		}
		errc <- client.CloseWrite()
	}()
	n, sum, err := readAllHash(server)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if n != total || [32]byte(want.Sum(nil)) != sum {
		t.Fatalf("got %d bytes (sha256 %x), want %d (sha256 %x)", n, sum[:8], total, want.Sum(nil)[:8])
	}
	d := time.Since(start)
	t.Logf("1 GiB in %v (%.1f Gbit/s)", d, float64(total)*8/d.Seconds()/1e9)
}

func TestPipePoolReuse(t *testing.T) {
	r := newRig(t, Options{})
	for i := 0; i < 3; i++ {
		client, server := r.connect(t)
		transfer(t, client, server, randomBytes(t, 100<<10), randomBytes(t, 10<<10))
		waitFor(t, "connection retired", testTimeout, func() bool { return r.f.Stats().TCPActive == 0 })
	}
	st := r.f.Stats()
	if st.PipesCreated != 2 || st.PipesReused != 4 {
		t.Errorf("got %d pipes created, %d reused; want 2 and 4", st.PipesCreated, st.PipesReused)
	}
	if st.PipeSize < 64<<10 {
		t.Errorf("got pipe size %d, want at least 64 KiB", st.PipeSize)
	}
}

// A pipe with bytes left over (its connection was reset mid-stream) must
// not go back into the pool.
func TestPipePoolRejectsDirty(t *testing.T) {
	pp := newPipePool(DefaultPipeSize, 4)
	defer pp.close()
	p, err := pp.get()
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if _, err := unix.Write(p.w, []byte("stale")); err != nil {
		t.Fatalf("write: %v", err)
	}
	p.n = 5
	pp.put(p)
	if _, _, idle := pp.counts(); idle != 0 {
		t.Errorf("got %d idle pipes after returning a dirty pipe, want 0", idle)
	}
	q, err := pp.get()
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	pp.put(q)
	if _, _, idle := pp.counts(); idle != 1 {
		t.Errorf("got %d idle pipes after returning a clean pipe, want 1", idle)
	}
}

func TestTCPConnectRefused(t *testing.T) {
	r := newRig(t, Options{})
	closed := listen(t)
	dst := addrPort(t, closed.Addr())
	closed.Close()
	c, a := r.accepted(t)
	defer c.Close()
	if err := forwardTCP(r.f, a, dst, dialTCP); err != nil {
		t.Fatalf("forwardTCP: got %v, want nil (the connect fails later)", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !isReset(err) {
		t.Errorf("client read after refused connect: got %v, want ECONNRESET", err)
	}
}

func TestTCPLimit(t *testing.T) {
	r := newRig(t, Options{MaxTCP: 1})
	client, server := r.connect(t)
	c, a := r.accepted(t)
	defer c.Close()
	err := forwardTCP(r.f, a, addrPort(t, r.back.Addr()), dialTCP)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != 1 {
		t.Fatalf("second connection: got %v, want *LimitError with limit 1", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("refused client read: got %v, want ECONNRESET", err)
	}
	// The refused dial reached the back listener; drain it.
	if s, err := r.back.Accept(); err == nil {
		s.Close()
	}
	// The first connection is unaffected.
	transfer(t, client, server, randomBytes(t, 1000), randomBytes(t, 1000))
}

func TestTCPIdleTimeout(t *testing.T) {
	r := newRig(t, Options{IdleTimeout: time.Second})
	client, _ := r.connect(t)
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err := client.Read(make([]byte, 1))
	if err != io.EOF {
		t.Errorf("idle client read: got %v, want EOF", err)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Errorf("idle connection closed after %v, want 1-3 s", d)
	}
}

func TestAddErrors(t *testing.T) {
	r := newRig(t, Options{})
	udp, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	devnull, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var se *SocketError
	if err := r.f.AddUDP(udp, tcp); !errors.As(err, &se) || !errors.Is(err, unix.EPROTOTYPE) {
		t.Errorf("AddUDP(udp, tcp): got %v, want SocketError wrapping EPROTOTYPE", err)
	}
	if err := r.f.AddTCP(devnull, devnull); !errors.As(err, &se) {
		t.Errorf("AddTCP(same fd twice): got %v, want SocketError", err)
	}
	other, _ := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err := r.f.AddTCP(-1, other); !errors.As(err, &se) {
		t.Errorf("AddTCP(-1, fd): got %v, want SocketError", err)
	}
	r.f.Close()
	a, _ := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	b, _ := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err := r.f.AddTCP(a, b); !errors.Is(err, ErrClosed) {
		t.Errorf("AddTCP after Close: got %v, want ErrClosed", err)
	}
	if _, err := NewForwarder(Options{PipeSize: -1}); err == nil {
		t.Errorf("NewForwarder(PipeSize -1): got nil error, want one")
	}
}

// TestDrained: a short splice from a socket means the socket is empty only
// when the pipe still had a free slot, counted with the kernel's page size
// (64 KiB pages on some arm64 kernels make a 1 MiB pipe 16 slots).
func TestDrained(t *testing.T) {
	const size = 1 << 20
	for _, tc := range []struct {
		name                       string
		n, asked, inPipe, pageSize int
		want                       bool
	}{
		{"all asked", size, size, 0, 4096, false},
		{"one small message", 1, size, 0, 4096, true},
		{"small, pipe nearly full of single bytes", 1, size - 255, 255, 4096, false},
		{"small, slots to spare", 100, size - 100, 100, 4096, true},
		{"as many bytes as free slots", 156, size - 100, 100, 4096, false},
		{"64 KiB pages: 16 slots", 16, size, 0, 65536, false},
		{"64 KiB pages: one slot free", 15, size, 0, 65536, true},
		{"64 KiB pages: full of small reads", 10, size - 10, 10, 65536, false},
	} {
		if got := drained(tc.n, tc.asked, tc.inPipe, size, tc.pageSize); got != tc.want {
			t.Errorf("%s: drained(n %d, asked %d, in pipe %d, page %d) = %v, want %v",
				tc.name, tc.n, tc.asked, tc.inPipe, tc.pageSize, got, tc.want)
		}
	}
}

// TestTCPRenoInBulk: the sink of a direction that moved sock.RenoAfter
// bytes has reno for congestion control; the sink of one that moved less
// keeps the host's default.
func TestTCPRenoInBulk(t *testing.T) {
	def := nstest.CongestionNotReno(t)
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skip(err)
	}
	r := newRig(t, Options{})
	client, server := r.connect(t)
	// The last byte each way goes on its own, after the loop has counted
	// what came before it: read, it shows the loop past the count.
	up, down := randomBytes(t, sock.RenoAfter), randomBytes(t, 2<<10)
	for _, x := range []struct {
		from, to *net.TCPConn
		data     []byte
	}{{client, server, up}, {client, server, []byte{1}}, {server, client, down}, {server, client, []byte{2}}} {
		go x.from.Write(x.data)
		got := make([]byte, len(x.data))
		if _, err := io.ReadFull(x.to, got); err != nil || !bytes.Equal(got, x.data) {
			t.Fatalf("%d bytes through the splice: %v", len(x.data), err)
		}
	}
	// Each sink is gopasta's socket whose peer is the reading end.
	for _, x := range []struct {
		name string
		peer *net.TCPConn
		want string
	}{
		{"toward the server, after the bulk", server, "reno"},
		{"toward the client, after 2 KiB", client, def},
	} {
		if got := congestionOf(t, x.peer.RemoteAddr(), x.peer.LocalAddr()); got != x.want {
			t.Errorf("%s: got congestion control %q, want %q", x.name, got, x.want)
		}
	}
}

// congestionOf is the congestion control of the established TCP socket
// bound to local and connected to remote, as ss(8) reports it.
func congestionOf(t *testing.T, local, remote net.Addr) string {
	t.Helper()
	out, err := exec.Command("ss", "-tinH", "state", "established", "src", local.String(), "dst", remote.String()).Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("ss for %v -> %v: got %q, want one socket", local, remote, out)
	}
	return strings.Fields(lines[1])[0]
}
