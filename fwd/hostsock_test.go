package fwd

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/limit"
)

// callSys records the socket set-up calls of fakeSys, and fails the ones
// named in fail with their errno.
type callSys struct {
	*fakeSys
	calls []string
	fail  map[string]unix.Errno // a call's name ("bind", "bindToDevice"...): its error, once
}

var optNames = map[[2]int]string{
	{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY}:         "IPV6_V6ONLY",
	{unix.IPPROTO_IPV6, unix.IPV6_RECVERR}:        "IPV6_RECVERR",
	{unix.IPPROTO_IP, unix.IP_RECVERR}:            "IP_RECVERR",
	{unix.IPPROTO_TCP, unix.TCP_NODELAY}:          "TCP_NODELAY",
	{unix.SOL_SOCKET, unix.SO_REUSEADDR}:          "SO_REUSEADDR",
	{unix.SOL_SOCKET, unix.SO_PEEK_OFF}:           "SO_PEEK_OFF",
	{unix.IPPROTO_IP, unix.IP_FREEBIND}:           "IP_FREEBIND",
	{unix.IPPROTO_IP, unix.IP_TTL}:                "IP_TTL",
	{unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS}:   "IPV6_UNICAST_HOPS",
	{unix.IPPROTO_IP, unix.IP_MULTICAST_TTL}:      "IP_MULTICAST_TTL",
	{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS}: "IPV6_MULTICAST_HOPS",
	{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF}:   "IPV6_MULTICAST_IF",
	{unix.SOL_SOCKET, unix.SO_BROADCAST}:          "SO_BROADCAST",
}

func (s *callSys) record(name, arg string) error {
	s.calls = append(s.calls, name+" "+arg)
	if en, ok := s.fail[name]; ok {
		delete(s.fail, name)
		return en
	}
	return nil
}

func sockaddrString(sa unix.Sockaddr) string {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)).String()
	}
	return fmt.Sprintf("%T", sa)
}

func (s *callSys) socket(d, t, p int) (int, error) {
	fam := map[int]string{unix.AF_INET: "inet", unix.AF_INET6: "inet6"}[d]
	typ := map[int]string{unix.SOCK_STREAM: "stream", unix.SOCK_DGRAM: "dgram"}[t]
	if err := s.record("socket", fmt.Sprintf("%s %s %d", fam, typ, p)); err != nil {
		return -1, err
	}
	return s.fakeSys.socket(d, t, p)
}

func (s *callSys) setsockoptInt(fd, level, opt, val int) error {
	return s.record("setsockopt", fmt.Sprintf("%s=%d", optNames[[2]int{level, opt}], val))
}

func (s *callSys) bindToDevice(fd int, ifname string) error {
	return s.record("bindToDevice", ifname)
}

func (s *callSys) bind(fd int, sa unix.Sockaddr) error {
	return s.record("bind", sockaddrString(sa))
}

func (s *callSys) connect(fd int, sa unix.Sockaddr) error {
	return s.record("connect", sockaddrString(sa))
}

func (s *callSys) watch(fd int, idx int32, gen uint32, events uint32) error {
	ev := "in"
	if events&unix.EPOLLET != 0 {
		ev = "in|out|rdhup|et"
	}
	return s.record("watch", ev)
}

// TestHostSocket: the host socket of each kind of flow, set up call by
// call: its options, the outbound address and interface (not toward
// loopback), the kept port and its fallback, and every failure closing
// the socket and the flow with the drop counted.
func TestHostSocket(t *testing.T) {
	out := Options{
		Outbound4: netip.MustParseAddr("192.0.2.1"), OutboundIf4: "eth4",
		Outbound6: netip.MustParseAddr("2001:db8::1"), OutboundIf6: "eth6",
	}
	// --freebind: UDP flows bind the outbound address with IP_FREEBIND
	// (pasta's flow sockets do, TCP and ping sockets not).
	freebind := out
	freebind.Freebind = true
	ext6 := netip.MustParseAddr("2001:db8::7")
	syn := func(src, dst netip.Addr) []byte {
		return tcpSegment(netip.AddrPortFrom(src, 40000), netip.AddrPortFrom(dst, 80), 1, 0, header.TCPFlagSYN, nil)
	}
	for _, tc := range []struct {
		name  string
		opts  Options
		frame []byte
		fail  map[string]unix.Errno
		want  []string
		err   unix.Errno // the drop's cause, for DropHostSocket; 0: the flow opens
	}{
		{"udp4", Options{}, udpFrame(ns4, ext, 1000, 53, nil), nil, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind 0.0.0.0:1000", "connect 192.0.2.7:53", "watch in", "setsockopt IP_TTL=64"}, 0},
		{"udp4 outbound", out, udpFrame(ns4, ext, 1000, 53, nil), nil, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "bindToDevice eth4", "setsockopt SO_REUSEADDR=1",
			"bind 192.0.2.1:1000", "connect 192.0.2.7:53", "watch in", "setsockopt IP_TTL=64"}, 0},
		{"udp4 outbound to loopback", out, udpFrame(ns4, gw4, 1000, 53, nil), nil, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind 0.0.0.0:1000", "connect 127.0.0.1:53", "watch in", "setsockopt IP_TTL=64"}, 0},
		{"udp6 outbound", out, udpFrame(ns6, ext6, 1000, 53, nil), nil, []string{
			"socket inet6 dgram 0", "setsockopt IPV6_V6ONLY=1", "setsockopt IPV6_RECVERR=1", "bindToDevice eth6",
			"setsockopt SO_REUSEADDR=1", "bind [2001:db8::1]:1000", "connect [2001:db8::7]:53", "watch in", "setsockopt IPV6_UNICAST_HOPS=64"}, 0},
		{"udp6 outbound to loopback", out, udpFrame(ns6, gw6, 1000, 53, nil), nil, []string{
			"socket inet6 dgram 0", "setsockopt IPV6_V6ONLY=1", "setsockopt IPV6_RECVERR=1",
			"setsockopt SO_REUSEADDR=1", "bind [::]:1000", "connect [::1]:53", "watch in", "setsockopt IPV6_UNICAST_HOPS=64"}, 0},
		{"udp4 outbound freebind", freebind, udpFrame(ns4, ext, 1000, 53, nil), nil, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "bindToDevice eth4", "setsockopt SO_REUSEADDR=1",
			"setsockopt IP_FREEBIND=1", "bind 192.0.2.1:1000", "connect 192.0.2.7:53", "watch in", "setsockopt IP_TTL=64"}, 0},
		{"udp6 outbound freebind", freebind, udpFrame(ns6, ext6, 1000, 53, nil), nil, []string{
			"socket inet6 dgram 0", "setsockopt IPV6_V6ONLY=1", "setsockopt IPV6_RECVERR=1", "bindToDevice eth6",
			"setsockopt SO_REUSEADDR=1", "setsockopt IP_FREEBIND=1", "bind [2001:db8::1]:1000", "connect [2001:db8::7]:53", "watch in", "setsockopt IPV6_UNICAST_HOPS=64"}, 0},
		{"udp4 freebind, no outbound address", Options{Freebind: true}, udpFrame(ns4, ext, 1000, 53, nil), nil, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind 0.0.0.0:1000", "connect 192.0.2.7:53", "watch in", "setsockopt IP_TTL=64"}, 0},
		{"udp4 freebind to loopback", freebind, udpFrame(ns4, gw4, 1000, 53, nil), nil, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind 0.0.0.0:1000", "connect 127.0.0.1:53", "watch in", "setsockopt IP_TTL=64"}, 0},
		{"tcp4 outbound freebind", freebind, syn(ns4, ext), nil, []string{
			"socket inet stream 0", "setsockopt SO_PEEK_OFF=0", "setsockopt TCP_NODELAY=1", "bindToDevice eth4",
			"bind 192.0.2.1:0", "connect 192.0.2.7:80", "watch in|out|rdhup|et"}, 0},
		{"icmp4 outbound freebind", freebind, echoFrame(ns4, ext, 7, 1, nil), nil, []string{
			"socket inet dgram 1", "setsockopt IP_RECVERR=1", "bindToDevice eth4",
			"bind 192.0.2.1:7", "connect 192.0.2.7:0", "watch in"}, 0},
		{"udp4 port taken", out, udpFrame(ns4, ext, 1000, 53, nil), map[string]unix.Errno{"bind": unix.EADDRINUSE}, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "bindToDevice eth4", "setsockopt SO_REUSEADDR=1",
			"bind 192.0.2.1:1000", "bind 192.0.2.1:0", "connect 192.0.2.7:53", "watch in", "setsockopt IP_TTL=64"}, 0},
		{"icmp4", out, echoFrame(ns4, ext, 7, 1, nil), nil, []string{
			"socket inet dgram 1", "setsockopt IP_RECVERR=1", "bindToDevice eth4",
			"bind 192.0.2.1:7", "connect 192.0.2.7:0", "watch in"}, 0},
		{"icmp6", Options{}, echoFrame(ns6, ext6, 7, 1, nil), nil, []string{
			"socket inet6 dgram 58", "setsockopt IPV6_V6ONLY=1", "setsockopt IPV6_RECVERR=1",
			"bind [::]:7", "connect [2001:db8::7]:0", "watch in"}, 0},
		{"tcp4", Options{}, syn(ns4, ext), nil, []string{
			"socket inet stream 0", "setsockopt SO_PEEK_OFF=0", "setsockopt TCP_NODELAY=1",
			"connect 192.0.2.7:80", "watch in|out|rdhup|et"}, 0},
		{"tcp4 outbound", out, syn(ns4, ext), nil, []string{
			"socket inet stream 0", "setsockopt SO_PEEK_OFF=0", "setsockopt TCP_NODELAY=1", "bindToDevice eth4",
			"bind 192.0.2.1:0", "connect 192.0.2.7:80", "watch in|out|rdhup|et"}, 0},
		{"tcp6 outbound to loopback", out, syn(ns6, gw6), nil, []string{
			"socket inet6 stream 0", "setsockopt IPV6_V6ONLY=1", "setsockopt SO_PEEK_OFF=0", "setsockopt TCP_NODELAY=1",
			"connect [::1]:80", "watch in|out|rdhup|et"}, 0},
		{"tcp connecting", Options{}, syn(ns4, ext), map[string]unix.Errno{"connect": unix.EINPROGRESS}, []string{
			"socket inet stream 0", "setsockopt SO_PEEK_OFF=0", "setsockopt TCP_NODELAY=1",
			"connect 192.0.2.7:80", "watch in|out|rdhup|et"}, 0},

		{"out of descriptors", Options{}, udpFrame(ns4, ext, 1000, 53, nil), map[string]unix.Errno{"socket": unix.EMFILE}, []string{
			"socket inet dgram 0"}, unix.EMFILE},
		{"no such interface", out, syn(ns4, ext), map[string]unix.Errno{"bindToDevice": unix.ENODEV}, []string{
			"socket inet stream 0", "setsockopt SO_PEEK_OFF=0", "setsockopt TCP_NODELAY=1", "bindToDevice eth4"}, unix.ENODEV},
		{"no IP_RECVERR", Options{}, echoFrame(ns4, ext, 7, 1, nil), map[string]unix.Errno{"setsockopt": unix.ENOPROTOOPT}, []string{
			"socket inet dgram 1", "setsockopt IP_RECVERR=1"}, unix.ENOPROTOOPT},
		{"outbound address gone", out, syn(ns4, ext), map[string]unix.Errno{"bind": unix.EADDRNOTAVAIL}, []string{
			"socket inet stream 0", "setsockopt SO_PEEK_OFF=0", "setsockopt TCP_NODELAY=1", "bindToDevice eth4",
			"bind 192.0.2.1:0"}, unix.EADDRNOTAVAIL},
		{"unreachable", Options{}, udpFrame(ns4, ext, 1000, 53, nil), map[string]unix.Errno{"connect": unix.ENETUNREACH}, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind 0.0.0.0:1000", "connect 192.0.2.7:53"}, unix.ENETUNREACH},
		{"watch fails", Options{}, udpFrame(ns4, ext, 1000, 53, nil), map[string]unix.Errno{"watch": unix.ENOMEM}, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind 0.0.0.0:1000", "connect 192.0.2.7:53", "watch in"}, unix.ENOMEM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := cycleCalls(t, tc.opts, tc.frame, tc.fail, tc.want)
			st := d.e.Stats()
			if tc.err == 0 {
				if d.e.FlowCount() != 1 || st.Drops[DropHostSocket] != 0 || len(d.sys.open) != 1 {
					t.Errorf("got %d flows, %d host-socket drops, %d open sockets; want 1, 0, 1",
						d.e.FlowCount(), st.Drops[DropHostSocket], len(d.sys.open))
				}
				return
			}
			if d.e.FlowCount() != 0 || st.Drops[DropHostSocket] != 1 || len(d.sys.open) != 0 {
				t.Errorf("got %d flows, %d host-socket drops, %d open sockets; want 0, 1, 0",
					d.e.FlowCount(), st.Drops[DropHostSocket], len(d.sys.open))
			}
		})
	}
}

// TestHostSocketError: hostSocket returns the failing call's errno as it
// is, so that errors.Is finds it (descriptorsExhausted, the ping warning).
func TestHostSocketError(t *testing.T) {
	for _, en := range []unix.Errno{unix.EMFILE, unix.ENFILE, unix.EACCES, unix.ENODEV} {
		d := newDriven(t, Options{OutboundIf4: "eth4"})
		d.e.sys = &callSys{fakeSys: d.sys, fail: map[string]unix.Errno{"socket": en, "bindToDevice": en}}
		var p packet
		if !d.e.classify(udpFrame(ns4, ext, 1000, 53, nil), &p) {
			t.Fatal("classify refused the frame")
		}
		for range 2 { // the socket fails, then binding it to the interface
			idx := d.e.newFlow(&p, protoUDP)
			d.e.flow(idx).setHostAddr(ext)
			fd, err := d.e.hostSocket(idx, hostSock{typ: unix.SOCK_DGRAM, port: 1000})
			if fd != -1 || !errors.Is(err, en) {
				t.Errorf("got %d, %v; want -1, %v", fd, err, en)
			}
			d.e.closeFlow(idx)
			d.e.reap()
		}
		if len(d.sys.open) != 0 {
			t.Errorf("%v: %d sockets left open, want 0", en, len(d.sys.open))
		}
	}
}

// TestTCPOpenFailure: a SYN whose host socket fails is refused with a
// reset, as by a kernel with nothing listening, and counted as a refusal
// when a limit made it fail. Out of descriptors with a datagram flow to
// evict, the shortage is for a moment: no answer then, and the
// namespace's stack sends the SYN again, which finds the descriptor free.
func TestTCPOpenFailure(t *testing.T) {
	for _, tc := range []struct {
		call     string
		err      unix.Errno
		udpFirst bool // a UDP flow exists, which can be evicted
		reset    bool
		refused  uint64
	}{
		{"socket", unix.EMFILE, false, true, 1},
		{"socket", unix.ENFILE, false, true, 1},
		{"socket", unix.EMFILE, true, false, 0},
		{"socket", unix.ENOBUFS, false, true, 1},
		{"socket", unix.EACCES, false, true, 0},
		{"bindToDevice", unix.ENODEV, false, true, 0},
		{"connect", unix.ENETUNREACH, false, true, 0},
	} {
		name := tc.call + " " + tc.err.Error()
		if tc.udpFirst {
			name += " with a datagram flow"
		}
		t.Run(name, func(t *testing.T) {
			l := &capLink{fakeLink: newFakeLink(t)}
			refusals := &limit.Refusals{}
			e, err := New(l, testParams(), Options{OutboundIf4: "eth4", Refusals: refusals})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() { e.Close() })
			cs := &callSys{fakeSys: newFakeSys()}
			e.sys = cs
			e.updateClock()
			if tc.udpFirst {
				e.handleFrames([][]byte{udpFrame(ns4, ext, 1000, 53, []byte("q"))})
				e.flush()
			}
			cs.fail = map[string]unix.Errno{tc.call: tc.err}
			src, dst := netip.AddrPortFrom(ns4, 40000), netip.AddrPortFrom(ext, 80)
			e.handleFrames([][]byte{tcpSegment(src, dst, 1, 0, header.TCPFlagSYN, nil)})
			e.flush()
			e.reap()
			resets := 0
			for _, b := range l.out {
				if p, th := tcpOf(t, b); p.dst == ns4 && th.Flags() == header.TCPFlagRST|header.TCPFlagACK && th.Ack() == 2 {
					resets++
				}
			}
			if want := map[bool]int{false: 0, true: 1}[tc.reset]; resets != want || e.Stats().FlowsTCP != 0 {
				t.Errorf("got %d resets and %d TCP flows, want %d and 0", resets, e.Stats().FlowsTCP, want)
			}
			if got := refusals.Totals()[limit.TCP]; got != tc.refused {
				t.Errorf("refused TCP connections: got %d, want %d", got, tc.refused)
			}
			if tc.udpFirst && e.Stats().Evicted != 1 {
				t.Errorf("evicted: got %d, want the UDP flow", e.Stats().Evicted)
			}
		})
	}
}

// TestHostSocketGroups: UDP toward a multicast group or a broadcast
// address gets a host socket as any other datagram does (passt 324233b),
// IPv6 groups by the template interface (link scope needs one), and a
// broadcast address SO_BROADCAST once connect(2) refuses it without.
func TestHostSocketGroups(t *testing.T) {
	a := netip.MustParseAddr
	mif := Options{MulticastIf6: 7}
	for _, tc := range []struct {
		name  string
		opts  Options
		frame []byte
		fail  map[string]unix.Errno
		want  []string
		err   unix.Errno
	}{
		{"ssdp", Options{}, udpFrame(ns4, a("239.255.255.250"), 41900, 1900, nil), nil, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind 0.0.0.0:41900", "connect 239.255.255.250:1900", "watch in", "setsockopt IP_MULTICAST_TTL=64"}, 0},
		{"mdns6 link scope", mif, udpFrame(ns6, a("ff02::fb"), 5353, 5353, nil), nil, []string{
			"socket inet6 dgram 0", "setsockopt IPV6_V6ONLY=1", "setsockopt IPV6_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind [::]:5353", "setsockopt IPV6_MULTICAST_IF=7", "connect [ff02::fb]:5353", "watch in", "setsockopt IPV6_MULTICAST_HOPS=64"}, 0},
		{"ssdp6 site scope", mif, udpFrame(ns6, a("ff05::c"), 41900, 1900, nil), nil, []string{
			"socket inet6 dgram 0", "setsockopt IPV6_V6ONLY=1", "setsockopt IPV6_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind [::]:41900", "setsockopt IPV6_MULTICAST_IF=7", "connect [ff05::c]:1900", "watch in", "setsockopt IPV6_MULTICAST_HOPS=64"}, 0},
		{"link scope without an interface", Options{}, udpFrame(ns6, a("ff02::fb"), 5353, 5353, nil), map[string]unix.Errno{"connect": unix.EINVAL}, []string{
			"socket inet6 dgram 0", "setsockopt IPV6_V6ONLY=1", "setsockopt IPV6_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind [::]:5353", "connect [ff02::fb]:5353"}, unix.EINVAL},
		{"limited broadcast", Options{}, udpFrame(ns4, a("255.255.255.255"), 41009, 9, nil), map[string]unix.Errno{"connect": unix.EACCES}, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind 0.0.0.0:41009", "connect 255.255.255.255:9", "setsockopt SO_BROADCAST=1", "connect 255.255.255.255:9",
			"watch in", "setsockopt IP_TTL=64"}, 0},
		{"subnet broadcast", Options{}, udpFrame(ns4, a("10.0.2.255"), 41009, 9, nil), map[string]unix.Errno{"connect": unix.EACCES}, []string{
			"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
			"bind 0.0.0.0:41009", "connect 10.0.2.255:9", "setsockopt SO_BROADCAST=1", "connect 10.0.2.255:9",
			"watch in", "setsockopt IP_TTL=64"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := cycleCalls(t, tc.opts, tc.frame, tc.fail, tc.want)
			st := d.e.Stats()
			want := 1
			if tc.err != 0 {
				want = 0
			}
			if d.e.FlowCount() != want || st.Drops[DropDestination] != 0 || len(d.sys.open) != want {
				t.Errorf("got %d flows, %d destination drops, %d open sockets; want %d, 0, %d",
					d.e.FlowCount(), st.Drops[DropDestination], len(d.sys.open), want, want)
			}
		})
	}
}

// noBroadcast is callSys whose sockets refuse SO_BROADCAST.
type noBroadcast struct{ *callSys }

func (s noBroadcast) setsockoptInt(fd, level, opt, val int) error {
	err := s.callSys.setsockoptInt(fd, level, opt, val)
	if level == unix.SOL_SOCKET && opt == unix.SO_BROADCAST {
		return unix.EPERM
	}
	return err
}

// TestHostSocketBroadcastRefused: a socket that will not take
// SO_BROADCAST leaves the broadcast datagram's flow unopened, its socket
// closed and the drop counted.
func TestHostSocketBroadcastRefused(t *testing.T) {
	d := newDriven(t, Options{})
	sys := noBroadcast{&callSys{fakeSys: d.sys, fail: map[string]unix.Errno{"connect": unix.EACCES}}}
	d.e.sys = sys
	d.cycle(udpFrame(ns4, netip.MustParseAddr("10.0.2.255"), 41009, 9, nil))
	want := []string{"socket inet dgram 0", "setsockopt IP_RECVERR=1", "setsockopt SO_REUSEADDR=1",
		"bind 0.0.0.0:41009", "connect 10.0.2.255:9", "setsockopt SO_BROADCAST=1"}
	if !slices.Equal(sys.calls, want) {
		t.Errorf("got calls\n\t%s\nwant\n\t%s", strings.Join(sys.calls, "\n\t"), strings.Join(want, "\n\t"))
	}
	if d.e.FlowCount() != 0 || d.e.Stats().Drops[DropHostSocket] != 1 || len(d.sys.open) != 0 {
		t.Errorf("got %d flows, %d host-socket drops, %d open sockets; want 0, 1, 0",
			d.e.FlowCount(), d.e.Stats().Drops[DropHostSocket], len(d.sys.open))
	}
}

// cycleCalls runs one cycle of frame through an engine whose system calls
// fail as fail says (callSys), and checks the calls it made against want.
func cycleCalls(t *testing.T, opts Options, frame []byte, fail map[string]unix.Errno, want []string) *driven {
	t.Helper()
	d := newDriven(t, opts)
	sys := &callSys{fakeSys: d.sys, fail: fail}
	d.e.sys = sys
	d.cycle(frame)
	if !slices.Equal(sys.calls, want) {
		t.Errorf("got calls\n\t%s\nwant\n\t%s", strings.Join(sys.calls, "\n\t"), strings.Join(want, "\n\t"))
	}
	return d
}
