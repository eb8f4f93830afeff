package splice

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/sock"
)

// newNSThread is a thread in a fresh network namespace: the test's
// stand-in for gopasta's namespace thread.
func newNSThread(t *testing.T) *nstest.NetnsThread {
	t.Helper()
	nstest.RequireRoot(t)
	ns := nstest.NewNetnsThread(t)
	if err := ns.Fresh(); err != nil {
		t.Skipf("no network namespace of the test's own: %v", err)
	}
	return ns
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
	if hostSt.Ino == ns.Ino() {
		t.Fatalf("namespace thread is in the test's namespace (inode %d)", ns.Ino())
	}

	// The service inside the namespace.
	var inner net.Listener
	var err error
	ns.Do(func() { inner, err = net.Listen("tcp", "127.0.0.1:0") })
	if err != nil {
		t.Fatalf("listen in namespace: %v", err)
	}
	defer inner.Close()
	innerAddr := addrPort(t, inner.Addr())

	r := newRig(t, Options{})
	// Port forwarding's dial: socket creation on the namespace thread.
	nsDial := func(dst netip.AddrPort) (fd int, err error) {
		ns.Do(func() { fd, err = dialTCP(dst) })
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
	ns.Do(func() {
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
