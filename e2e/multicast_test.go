package e2e

// Multicast and broadcast datagrams from the namespace leave through host
// sockets onto the host's network.

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// groupRecv collects what a host-side receiver gets: payload -> the
// sources it came from.
type groupRecv struct {
	mu  sync.Mutex
	got map[string][]netip.AddrPort
}

func (g *groupRecv) serve(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		g.mu.Lock()
		g.got[string(buf[:n])] = append(g.got[string(buf[:n])], from.(*net.UDPAddr).AddrPort())
		g.mu.Unlock()
	}
}

func (g *groupRecv) sources(payload string) []netip.AddrPort {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]netip.AddrPort(nil), g.got[payload]...)
}

// TestMulticastBroadcast: UDP from the namespace to multicast groups
// (SSDP's 239.255.255.250:1900 and ff05::c, mDNS's 224.0.0.251 and
// link-scope ff02::fb) and to broadcast addresses (255.255.255.255 and
// the subnet's) leaves through host sockets (passt 324233b), from the
// namespace's source port: receivers on the host's interface get them.
func TestMulticastBroadcast(t *testing.T) {
	type dgram struct {
		dst     string // as the namespace sends it (a zone for link scope)
		srcPort int
		recv    string // the receiver's key in the host namespace
	}
	dgrams := []dgram{
		{"239.255.255.250:1900", 41900, "ssdp4"},
		{"224.0.0.251:5353", 5353, "mdns4"},
		{"[ff05::c]:1900", 41901, "ssdp6"},
		{"[ff02::fb%" + nstest.HostIfName + "]:5353", 5353, "mdns6"},
		{"255.255.255.255:9", 41009, "bcast"},
		{"192.0.2.255:9", 41010, "bcast"},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			recv := map[string]*groupRecv{}
			listen := func(key, network, group string, port int) {
				g := &groupRecv{got: map[string][]netip.AddrPort{}}
				var pc net.PacketConn
				err := e.h.Do(func() error {
					if group == "" {
						var err error
						pc, err = net.ListenPacket(network, fmt.Sprintf(":%d", port))
						return err
					}
					ifi, err := net.InterfaceByName(nstest.HostIfName)
					if err != nil {
						return err
					}
					pc, err = net.ListenMulticastUDP(network, ifi, &net.UDPAddr{IP: net.ParseIP(group), Port: port})
					return err
				})
				if err != nil {
					t.Fatalf("%s receiver in the host namespace: %v", key, err)
				}
				t.Cleanup(func() { pc.Close() })
				go g.serve(pc)
				recv[key] = g
			}
			listen("ssdp4", "udp4", "239.255.255.250", 1900)
			listen("mdns4", "udp4", "224.0.0.251", 5353)
			listen("ssdp6", "udp6", "ff05::c", 1900)
			listen("mdns6", "udp6", "ff02::fb", 5353)
			listen("bcast", "udp4", "", 9)

			var cmds []string
			for _, d := range dgrams {
				cmds = append(cmds, fmt.Sprintf("dgram %s %d 3 to-%s", d.dst, d.srcPort, d.dst))
			}
			// No forwarded ports: -U auto would bind the namespace's
			// loopback ports the receivers hold, the datagrams' sources.
			args := []string{"--config-net", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--"}
			r := e.run(t, append(args, e.peer(cmds...)...)...)
			mustSucceed(t, "multicast and broadcast datagrams from the namespace", r)
			for _, d := range dgrams {
				payload := "to-" + d.dst
				var got []netip.AddrPort
				nstest.WaitFor(3*time.Second, func() error {
					if got = recv[d.recv].sources(payload); len(got) == 0 {
						return fmt.Errorf("nothing yet")
					}
					return nil
				})
				if len(got) == 0 {
					t.Errorf("%s: the host's receiver got nothing, want the namespace's datagrams", d.dst)
					continue
				}
				for _, src := range got {
					if int(src.Port()) != d.srcPort {
						t.Errorf("%s: got a datagram from port %d, want the namespace's %d", d.dst, src.Port(), d.srcPort)
					}
				}
			}
		})
	}
}

// sendDatagrams is the peer's dgram command: count datagrams of payload to
// dst (an IPv6 zone names the interface of a link-scope group) from local
// port src, 100 ms apart, on a socket that may send to a broadcast
// address.
func sendDatagrams(dst string, src, count int, payload string) error {
	ua, err := net.ResolveUDPAddr("udp", dst)
	if err != nil {
		return err
	}
	network := "udp4"
	if ua.IP.To4() == nil {
		network = "udp6"
	}
	c, err := net.ListenUDP(network, &net.UDPAddr{Port: src})
	if err != nil {
		return err
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
	})
	if serr != nil {
		return serr
	}
	for i := range count {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := c.WriteToUDP([]byte(payload), ua); err != nil {
			// The namespace's routes may still be settling.
			if i < count-1 && strings.Contains(err.Error(), "unreachable") {
				continue
			}
			return err
		}
	}
	return nil
}
