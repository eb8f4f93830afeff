package e2e

// Namespaces beside the host namespace, for peers that speak on the
// host's side of gopasta at the link or the network layer: a router that
// answers with ICMP time-exceeded, a host of the LAN that answers ARP and
// neighbour solicitations. Each is joined to the host namespace (or to
// another) by a veth pair the test sets up, and deleted when the test
// ends.

import (
	"fmt"
	"net"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// hostIP runs `ip ARGS...` as root in e's host namespace and fails the
// test if it fails.
func (e *env) hostIP(t *testing.T, args ...string) {
	t.Helper()
	ipIn(t, e.h.Name(), args...)
}

// ipIn runs `ip -n NS ARGS...` as root and fails the test if it fails.
func ipIn(t *testing.T, ns string, args ...string) {
	t.Helper()
	argv := append([]string{"ip", "-n", ns}, args...)
	if r := nstest.Run(t, nstest.RootUser, argv...); r.Code != 0 {
		t.Fatalf("%q: %s", argv, r)
	}
}

// sideNS is a network namespace beside the host namespace.
type sideNS struct {
	t    *testing.T
	name string
}

// newSideNS creates a namespace named after prefix with lo up, deleted in
// t.Cleanup (with the veth ends in it, which takes their peers along).
func newSideNS(t *testing.T, prefix string) *sideNS {
	t.Helper()
	s := &sideNS{t: t, name: nstest.UniqueName(prefix)}
	if r := nstest.Run(t, nstest.RootUser, "ip", "netns", "add", s.name); r.Code != 0 {
		t.Fatalf("ip netns add %s: %s", s.name, r)
	}
	t.Cleanup(func() {
		if r := nstest.Run(t, nstest.RootUser, "ip", "netns", "del", s.name); r.Code != 0 {
			t.Errorf("ip netns del %s: %s", s.name, r)
		}
	})
	s.ip("link", "set", "lo", "up")
	return s
}

// ip runs `ip ARGS...` in s.
func (s *sideNS) ip(args ...string) {
	s.t.Helper()
	ipIn(s.t, s.name, args...)
}

// sysctl sets key to value in s.
func (s *sideNS) sysctl(key, value string) {
	s.t.Helper()
	argv := []string{"ip", "netns", "exec", s.name, "sysctl", "-q", "-w", key + "=" + value}
	if r := nstest.Run(s.t, nstest.RootUser, argv...); r.Code != 0 {
		s.t.Fatalf("%q: %s", argv, r)
	}
}

// veth joins namespace a (interface ifA) and b (ifB) with a veth pair, both
// ends up.
func veth(t *testing.T, a, ifA, b, ifB string) {
	t.Helper()
	ipIn(t, a, "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b)
	ipIn(t, a, "link", "set", ifA, "up")
	ipIn(t, b, "link", "set", ifB, "up")
}

// do runs f on a thread in s's network namespace, as nstest.Host.Do does
// in the host's: sockets f makes stay there.
func (s *sideNS) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine.
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+s.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", s.name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// serveUDPEcho runs a UDP echo server on addr in s until the test ends.
func (s *sideNS) serveUDPEcho(network, addr string) {
	s.t.Helper()
	var pc net.PacketConn
	err := s.do(func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		s.t.Fatalf("UDP echo on %s in %s: %v", addr, s.name, err)
	}
	s.t.Cleanup(func() { pc.Close() })
	go serveUDPEcho(pc)
}
