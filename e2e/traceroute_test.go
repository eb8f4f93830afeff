package e2e

// The TTL of UDP datagrams from the namespace is passed on, and the ICMP
// time-exceeded errors of the routers beyond the host come back: traceroute
// from the namespace finds them.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// The routed network beside the host namespace (routedNet): a router one
// hop away and a target behind it.
const (
	routerUp4  = "203.0.113.2"  // the router, on the host's side
	target4    = "203.0.113.10" // the target, behind the router
	routerUp6  = "2001:db8:a::2"
	target6    = "2001:db8:b::2"
	targetPort = 7 // the target's UDP echo
)

// routedNet builds, beside e's host namespace, a router namespace and a
// target namespace behind it, and routes their prefixes from the host:
//
//	host rt0 203.0.113.1/30, 2001:db8:a::1/64
//	  -- router up0 203.0.113.2/30, 2001:db8:a::2/64 (forwarding)
//	     router dn0 203.0.113.9/30, 2001:db8:b::1/64
//	  -- target tg0 203.0.113.10/30, 2001:db8:b::2/64, UDP echo on port 7
func routedNet(t *testing.T, e *env) {
	t.Helper()
	r, tg := newSideNS(t, "router"), newSideNS(t, "target")
	h := e.h.Name()
	veth(t, h, "rt0", r.name, "up0")
	veth(t, r.name, "dn0", tg.name, "tg0")
	e.hostIP(t, "addr", "add", "203.0.113.1/30", "dev", "rt0")
	e.hostIP(t, "addr", "add", "2001:db8:a::1/64", "dev", "rt0", "nodad")
	r.ip("addr", "add", routerUp4+"/30", "dev", "up0")
	r.ip("addr", "add", routerUp6+"/64", "dev", "up0", "nodad")
	r.ip("addr", "add", "203.0.113.9/30", "dev", "dn0")
	r.ip("addr", "add", "2001:db8:b::1/64", "dev", "dn0", "nodad")
	tg.ip("addr", "add", target4+"/30", "dev", "tg0")
	tg.ip("addr", "add", target6+"/64", "dev", "tg0", "nodad")
	r.sysctl("net.ipv4.ip_forward", "1")
	r.sysctl("net.ipv6.conf.all.forwarding", "1")
	e.hostIP(t, "route", "add", "203.0.113.8/30", "via", routerUp4)
	e.hostIP(t, "-6", "route", "add", "2001:db8:b::/64", "via", routerUp6)
	tg.ip("route", "add", "default", "via", "203.0.113.9")
	tg.ip("-6", "route", "add", "default", "via", "2001:db8:b::1")
	tg.serveUDPEcho("udp4", fmt.Sprintf("%s:%d", target4, targetPort))
	tg.serveUDPEcho("udp6", fmt.Sprintf("[%s]:%d", target6, targetPort))
}

// TestTraceroute: UDP probes from the namespace leave the host with the
// namespace's TTL or hop limit (passt a7775e9), so a probe with 1 expires
// at the router beyond the host, whose ICMP time-exceeded reaches the
// namespace's socket (IP_RECVERR) from the router's address, and one with
// 2 reaches the target; busybox traceroute finds both hops. With a fixed
// TTL every probe reaches the target.
func TestTraceroute(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			routedNet(t, e)
			t4 := fmt.Sprintf("%s:%d", target4, targetPort)
			t6 := fmt.Sprintf("[%s]:%d", target6, targetPort)
			probes := map[string]string{
				"ttlprobe " + t4 + " 1": "icmp 11 0 " + routerUp4, // time exceeded in transit
				"ttlprobe " + t4 + " 2": "reply",
				"ttlprobe " + t6 + " 1": "icmp 3 0 " + routerUp6, // ICMPv6 time exceeded
				"ttlprobe " + t6 + " 2": "reply",
			}
			var cmds []string
			for c := range probes {
				cmds = append(cmds, c)
			}
			script := shellJoin(e.peer(cmds...)) +
				" && echo @@traceroute && busybox traceroute -n -q 1 -w 2 -m 3 " + target4 +
				" && echo @@traceroute6 && busybox traceroute6 -n -q 1 -w 2 -m 3 " + target6
			r := e.run(t, "--config-net", "--", "sh", "-c", script)
			mustSucceed(t, "UDP probes with small TTLs from the namespace", r)
			for _, l := range strings.Split(r.Stdout, "\n") {
				for c, want := range probes {
					if res, ok := strings.CutPrefix(l, c+" ok "); ok && res != want {
						t.Errorf("%s: got %q, want %q", c, res, want)
					}
				}
			}
			wantDone(t, r.Stdout, cmds...)
			_, tr, _ := strings.Cut(r.Stdout, "@@traceroute\n")
			tr4, tr6, _ := strings.Cut(tr, "@@traceroute6\n")
			for _, c := range []struct{ out, hop1, hop2 string }{{tr4, routerUp4, target4}, {tr6, routerUp6, target6}} {
				if !hopLine(c.out, 1, c.hop1) || !hopLine(c.out, 2, c.hop2) {
					t.Errorf("busybox traceroute: got\n%s\nwant hop 1 %s and hop 2 %s", c.out, c.hop1, c.hop2)
				}
			}
		})
	}
}

// hopLine reports whether traceroute's output has hop n at addr.
func hopLine(out string, n int, addr string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == fmt.Sprint(n) && f[1] == addr {
			return true
		}
	}
	return false
}

// ttlProbe is the peer's ttlprobe command: UDP datagrams to addr with TTL
// (or hop limit) ttl, from a socket that queues ICMP errors (IP_RECVERR),
// sent up to 5 times a second apart until something comes back. The result
// is "reply" for an answer from addr, or "icmp TYPE CODE FROM" for an ICMP
// error about the probe.
func ttlProbe(addr string, ttl int) (string, error) {
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", err
	}
	v6 := dst.Addr().Is6()
	dom, level, ttlOpt, errOpt := unix.AF_INET, unix.IPPROTO_IP, unix.IP_TTL, unix.IP_RECVERR
	if v6 {
		dom, level, ttlOpt, errOpt = unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, unix.IPV6_RECVERR
	}
	fd, err := unix.Socket(dom, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, level, ttlOpt, ttl); err != nil {
		return "", fmt.Errorf("TTL %d: %w", ttl, err)
	}
	if err := unix.SetsockoptInt(fd, level, errOpt, 1); err != nil {
		return "", err
	}
	var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: dst.Addr().As16(), Port: int(dst.Port())}
	if !v6 {
		sa = &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}
	}
	// The namespace's routes may still be settling.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = unix.Connect(fd, sa); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		return "", err
	}
	buf, oob := make([]byte, 1500), make([]byte, 512)
	for range 5 {
		// A send may fail with the error an earlier probe caused; the
		// queue holds it all the same.
		unix.Write(fd, []byte("probe"))
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 1000); n == 0 {
			continue
		}
		if _, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT); err == nil {
			return recvErrString(oob[:oobn])
		}
		if _, err := unix.Read(fd, buf); err == nil {
			return "reply", nil
		}
	}
	return "", errors.New("no answer to 5 probes")
}

// recvErrString describes the ICMP error of an IP_RECVERR or IPV6_RECVERR
// control message: "icmp TYPE CODE OFFENDER".
func recvErrString(oob []byte) (string, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return "", err
	}
	for _, m := range msgs {
		if !(m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_RECVERR) &&
			!(m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR) {
			continue
		}
		const eeSize = int(unsafe.Sizeof(unix.SockExtendedErr{}))
		if len(m.Data) < eeSize+2 {
			return "", fmt.Errorf("short extended error: %d bytes", len(m.Data))
		}
		ee := (*unix.SockExtendedErr)(unsafe.Pointer(&m.Data[0]))
		if ee.Origin != unix.SO_EE_ORIGIN_ICMP && ee.Origin != unix.SO_EE_ORIGIN_ICMP6 {
			return "", fmt.Errorf("a local error (origin %d, errno %d), want an ICMP one", ee.Origin, ee.Errno)
		}
		off := m.Data[eeSize:]
		var from netip.Addr
		switch binary.NativeEndian.Uint16(off) {
		case unix.AF_INET:
			if len(off) >= 8 {
				from = netip.AddrFrom4([4]byte(off[4:8]))
			}
		case unix.AF_INET6:
			if len(off) >= 24 {
				from = netip.AddrFrom16([16]byte(off[8:24]))
			}
		}
		return fmt.Sprintf("icmp %d %d %s", ee.Type, ee.Code, from), nil
	}
	return "", errors.New("no IP_RECVERR control message")
}
