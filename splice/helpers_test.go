package splice

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/sock"
)

const testTimeout = 30 * time.Second

// rig is a Forwarder with a front listener (what a client reaches) and a
// back listener (the service in the "other namespace").
type rig struct {
	f     *Forwarder
	front net.Listener
	back  net.Listener
	done  chan error
}

func newRig(t testing.TB, opts Options) *rig {
	t.Helper()
	f, err := NewForwarder(opts)
	if err != nil {
		t.Fatalf("NewForwarder: %v", err)
	}
	r := &rig{f: f, done: make(chan error, 1)}
	r.front = listen(t)
	r.back = listen(t)
	go func() { r.done <- f.Run(context.Background()) }()
	t.Cleanup(func() {
		f.Close()
		select {
		case err := <-r.done:
			// ErrClosed: Close won the race against Run starting.
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(testTimeout):
			t.Errorf("Run did not return after Close")
		}
	})
	return r
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// dupFd takes the socket out of a net.Conn: a dup the test hands to the
// Forwarder, while the original is closed.
func dupFd(t testing.TB, c syscall.Conn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatalf("SyscallConn: %v", err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		t.Fatalf("Control: %v", err)
	}
	if derr != nil {
		t.Fatalf("dup: %v", derr)
	}
	return fd
}

func addrPort(t testing.TB, a net.Addr) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatalf("parse %v: %v", a, err)
	}
	return ap
}

// accepted dials the front listener and returns the client's connection
// and the accepted socket's descriptor, for the test to hand over.
func (r *rig) accepted(t testing.TB) (net.Conn, int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", r.front.Addr().String(), testTimeout)
	if err != nil {
		t.Fatalf("dial front: %v", err)
	}
	acc, err := r.front.Accept()
	if err != nil {
		t.Fatalf("accept front: %v", err)
	}
	a := dupFd(t, acc.(*net.TCPConn))
	acc.Close()
	return c, a
}

// connect returns a client connection to the front listener that the
// Forwarder splices to a server connection accepted on the back listener.
func (r *rig) connect(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	c, a := r.accepted(t)
	if err := forwardTCP(r.f, a, addrPort(t, r.back.Addr()), dialTCP); err != nil {
		t.Fatalf("forwardTCP: %v", err)
	}
	s, err := r.back.Accept()
	if err != nil {
		t.Fatalf("accept back: %v", err)
	}
	client, server = c.(*net.TCPConn), s.(*net.TCPConn)
	deadline := time.Now().Add(testTimeout)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("rand: %v", err)
	}
	return b
}

// sendAndClose writes data then half-closes.
func sendAndClose(c *net.TCPConn, data []byte) error {
	if _, err := c.Write(data); err != nil {
		return err
	}
	return c.CloseWrite()
}

// readAllHash reads to EOF and returns the byte count and SHA-256.
func readAllHash(c io.Reader) (int64, [32]byte, error) {
	h := sha256.New()
	n, err := io.Copy(h, c)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return n, sum, err
}

func countFds(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("read /proc/self/fd: %v", err)
	}
	return len(ents)
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isReset(err error) bool {
	return errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE)
}

func netipMust(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func deadlineIn() time.Time { return time.Now().Add(testTimeout) }

// dialTCP opens a socket connecting to dst in the calling thread's
// namespace.
func dialTCP(dst netip.AddrPort) (int, error) { return sock.Dial(false, dst) }

// forwardTCP dials dst with dial and splices accepted (owned, reset on
// error) to the new socket, as the port forwarding code does.
func forwardTCP(f *Forwarder, accepted int, dst netip.AddrPort, dial func(netip.AddrPort) (int, error)) error {
	fd, err := dial(dst)
	if err != nil {
		sock.Abort(accepted)
		return err
	}
	return f.AddTCP(accepted, fd)
}
