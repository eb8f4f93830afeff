package portfwd

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/sock"
)

// TestSpliceHookLateUDP: datagrams the engine hands over as late (a
// spliced UDP peer's that reached the shared listener after its own socket
// existed) leave on the flow the peer's hand-over made, from the same
// port, after its early ones; late ones of a peer never handed over go
// nowhere.
func TestSpliceHookLateUDP(t *testing.T) {
	eng := newRecordingEngine(t)
	pf, err := Start(context.Background(), Config{
		Ports: tcpOnly(t), Engine: eng, InNS: func(f func() error) error { return f() }, IPv4: true,
		Listening: func(bool) (tcp, udp fwdrule.PortSet, err error) { return },
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(pf.Close)
	if eng.hook == nil {
		t.Fatal("Start installed no splice hook")
	}
	lo := netip.MustParseAddr("127.0.0.1")
	srv, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	peer := client.LocalAddr().(*net.UDPAddr).AddrPort()
	a, err := sock.Reply(netip.AddrPortFrom(lo, 0), "", peer)
	if err != nil {
		t.Fatal(err)
	}
	local := netip.MustParseAddrPort("127.0.0.1:5353") // the listener's address: only a name here
	to := srv.LocalAddr().(*net.UDPAddr).AddrPort()
	conns := []fwd.SpliceConn{
		{Fd: a, UDP: true, Peer: peer, Local: local, ToAddr: lo, ToPort: to.Port(), Data: [][]byte{[]byte("early")}},
		{Fd: -1, UDP: true, Late: true, Peer: netip.MustParseAddrPort("127.0.0.1:1"), Local: local, ToAddr: lo, ToPort: to.Port(), Data: [][]byte{[]byte("stranger")}},
		{Fd: -1, UDP: true, Late: true, Peer: peer, Local: local, ToAddr: lo, ToPort: to.Port(), Data: [][]byte{[]byte("late")}},
	}
	for i := range conns {
		if !eng.hook(&conns[i]) {
			t.Fatalf("hook refused hand-over %d", i)
		}
	}
	nstest.ReadFlow(t, srv, "early", "late")
	buf := make([]byte, 64)
	srv.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _, err := srv.ReadFromUDPAddrPort(buf); err == nil {
		t.Errorf("got %q after the flow's datagrams, want nothing", buf[:n])
	}
}

// TestSpliceTarget: where a spliced host connection goes in the
// namespace: the rule's target, else the namespace's address, else (with
// --host-lo-to-ns-lo or --splice-only) the loopback address the host peer
// connected to, of the same family.
func TestSpliceTarget(t *testing.T) {
	ns4, ns6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	lo6 := netip.MustParseAddr("127.0.0.6")
	for _, tc := range []struct {
		name          string
		cfg           Config
		v6            bool
		toAddr, local netip.Addr
		want          string
	}{
		{"the namespace's address", Config{NSAddr4: ns4, NSAddr6: ns6}, false, netip.Addr{}, lo6, "192.0.2.1:80"},
		{"the namespace's IPv6 address", Config{NSAddr4: ns4, NSAddr6: ns6}, true, netip.Addr{}, netip.IPv6Loopback(), "[2001:db8::1]:80"},
		{"the rule's target", Config{NSAddr4: ns4, HostLoToNSLo: true}, false, netip.MustParseAddr("10.0.0.9"), lo6, "10.0.0.9:80"},
		{"--host-lo-to-ns-lo keeps 127.0.0.6", Config{NSAddr4: ns4, HostLoToNSLo: true}, false, netip.Addr{}, lo6, "127.0.0.6:80"},
		{"--host-lo-to-ns-lo, ::1", Config{NSAddr6: ns6, HostLoToNSLo: true}, true, netip.Addr{}, netip.IPv6Loopback(), "[::1]:80"},
		{"--host-lo-to-ns-lo, address unknown", Config{HostLoToNSLo: true}, false, netip.Addr{}, netip.Addr{}, "127.0.0.1:80"},
		{"--host-lo-to-ns-lo, another family", Config{HostLoToNSLo: true}, true, netip.Addr{}, lo6, "[::1]:80"},
		{"--splice-only keeps 127.0.0.6", Config{SpliceOnly: true}, false, netip.Addr{}, lo6, "127.0.0.6:80"},
		{"no address yet", Config{}, false, netip.Addr{}, lo6, "127.0.0.6:80"},
	} {
		pf := &Forwarder{cfg: tc.cfg}
		if got := pf.spliceTarget(tc.v6, tc.toAddr, 80, tc.local).String(); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}
