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
	eng := &recordingEngine{}
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
