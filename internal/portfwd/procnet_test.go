package portfwd

import (
	"net"
	"testing"
)

// TestProcNet: the tables opened once show sockets created after the open,
// at every read (auto scanning's fallback works from descriptors alone).
func TestProcNet(t *testing.T) {
	p := openProcNet("/proc/self/net")
	defer p.close()
	if p.files[0] == nil {
		t.Skip("no /proc/self/net/tcp")
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	u, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	uport := uint16(u.LocalAddr().(*net.UDPAddr).Port)
	tcp, udp := p.read()
	if !tcp.Has(port) || !udp.Has(uport) {
		t.Errorf("after listening: TCP %d %v, UDP %d %v; want both", port, tcp.Has(port), uport, udp.Has(uport))
	}
	l.Close()
	u.Close()
	tcp, udp = p.read()
	if tcp.Has(port) || udp.Has(uport) {
		t.Errorf("after closing: TCP %d %v, UDP %d %v; want neither", port, tcp.Has(port), uport, udp.Has(uport))
	}
}
