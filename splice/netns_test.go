package splice

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/sock"
)

// nsThread is a goroutine locked to an OS thread that unshared a fresh
// network namespace: the test's stand-in for gopasta's namespace thread.
type nsThread struct {
	work chan func()
	ino  uint64 // inode of the namespace, to prove it differs
}

func newNSThread(t *testing.T) *nsThread {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to unshare a network namespace (run as root to cover namespace crossing)")
	}
	ns := &nsThread{work: make(chan func())}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread dies with the goroutine instead of
		// going back to the scheduler in the wrong namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			started <- err
			return
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			started <- err
			return
		}
		ns.ino = st.Ino
		started <- loUp()
		for fn := range ns.work {
			fn()
		}
	}()
	if err := <-started; err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("unshare(CLONE_NEWNET) not permitted here: %v", err)
		}
		t.Fatalf("namespace thread: %v", err)
	}
	t.Cleanup(func() { close(ns.work) })
	return ns
}

func (ns *nsThread) do(fn func()) {
	done := make(chan struct{})
	ns.work <- func() { fn(); close(done) }
	<-done
}

func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// TestAcrossNamespaces: a client on the test's 127.0.0.1 reaches a server
// listening on 127.0.0.1 inside another network namespace, through a
// socket the namespace thread created: the -t loopback splice case.
func TestAcrossNamespaces(t *testing.T) {
	ns := newNSThread(t)
	var hostSt unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &hostSt); err != nil {
		t.Fatal(err)
	}
	if hostSt.Ino == ns.ino {
		t.Fatalf("namespace thread is in the test's namespace (inode %d)", ns.ino)
	}

	// The service inside the namespace.
	var inner net.Listener
	var err error
	ns.do(func() { inner, err = net.Listen("tcp", "127.0.0.1:0") })
	if err != nil {
		t.Fatalf("listen in namespace: %v", err)
	}
	defer inner.Close()
	innerAddr := addrPort(t, inner.Addr())

	r := newRig(t, Options{})
	// Port forwarding's dial: socket creation on the namespace thread.
	nsDial := func(dst netip.AddrPort) (fd int, err error) {
		ns.do(func() { fd, err = dialTCP(dst) })
		return fd, err
	}
	c, a := r.accepted(t)
	if err := forwardTCP(r.f, a, innerAddr, nsDial); err != nil {
		t.Fatalf("forwardTCP into namespace: %v", err)
	}
	s, err := inner.Accept()
	if err != nil {
		t.Fatalf("accept in namespace: %v", err)
	}
	client, server := c.(*net.TCPConn), s.(*net.TCPConn)
	defer client.Close()
	defer server.Close()
	transfer(t, client, server, randomBytes(t, 1<<20), randomBytes(t, 2<<20))

	// The same address from the test's own namespace must not reach the
	// service: the bytes really crossed namespaces.
	if probe, err := net.Dial("tcp", inner.Addr().String()); err == nil {
		probe.Close()
		t.Logf("note: something in the test namespace also listens on %v", inner.Addr())
	}

	// UDP the other way round (-U): a namespace client, a host server.
	hostSrv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer hostSrv.Close()
	var nsClient *net.UDPConn
	var nsSide int
	ns.do(func() {
		if nsClient, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			return
		}
		nsSide, err = sock.Reply(netip.MustParseAddrPort("127.0.0.1:0"), "", addrPort(t, nsClient.LocalAddr()))
	})
	if err != nil {
		t.Fatalf("namespace UDP sockets: %v", err)
	}
	defer nsClient.Close()
	sa, err := unix.Getsockname(nsSide)
	if err != nil {
		t.Fatal(err)
	}
	hostSide, err := sock.Dial(true, addrPort(t, hostSrv.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.f.AddUDP(nsSide, hostSide); err != nil {
		t.Fatalf("AddUDP: %v", err)
	}
	msg := randomBytes(t, 3000)
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port}
	if _, err := nsClient.WriteToUDP(msg, to); err != nil {
		t.Fatalf("namespace send: %v", err)
	}
	buf := make([]byte, 5000)
	hostSrv.SetDeadline(deadlineIn())
	n, from, err := hostSrv.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != string(msg) {
		t.Fatalf("host server got %d bytes, err %v; want %d intact", n, err, len(msg))
	}
	if _, err := hostSrv.WriteToUDP(msg[:100], from); err != nil {
		t.Fatal(err)
	}
	nsClient.SetDeadline(deadlineIn())
	n, _, err = nsClient.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != string(msg[:100]) {
		t.Fatalf("namespace client got %d bytes, err %v; want 100 intact", n, err)
	}
}
