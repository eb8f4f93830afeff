package tap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/tap"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

var _ fwd.Link = (*tap.Device)(nil)

// childEnv marks the re-executed test binary running as uid 65534 in its
// own user and network namespace (see TestUnprivileged).
const childEnv = "GOPASTA_TAP_TEST_USERNS"

var (
	tapMAC  = net.HardwareAddr{0x02, 0x67, 0x70, 0x00, 0x00, 0x01}
	peerMAC = net.HardwareAddr{0x02, 0x67, 0x70, 0x00, 0x00, 0x02}
	tapIP   = [4]byte{192, 0, 2, 1}
	peerIP  = [4]byte{192, 0, 2, 2}
)

// openTap opens a TAP in the calling thread's (fresh) namespace, skipping
// when /dev/net/tun is not usable by this user.
func openTap(tb testing.TB, cfg tap.Config) *tap.Device {
	tb.Helper()
	d, err := tap.Open(cfg)
	if errors.Is(err, tap.ErrTunUnavailable) && (!isRoot() || os.Getenv(childEnv) != "") {
		tb.Skipf("TAP not available to uid %d: %v", os.Getuid(), err)
	}
	if err != nil {
		tb.Fatalf("Open(%+v): %v", cfg, err)
	}
	tb.Cleanup(func() {
		if err := d.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return d
}

func TestOpenInvalidName(t *testing.T) {
	for _, name := range []string{
		"gopasta-tap-name-too-long",
		"0123456789abcdef",
		".",
		"..",
		"a/b",
		"a b",
		"tap:0",
	} {
		t.Run(name, func(t *testing.T) {
			d, err := tap.Open(tap.Config{Name: name})
			if err == nil {
				d.Close()
				t.Fatalf("Open(%q): got nil error, want ErrInvalidName", name)
			}
			if !errors.Is(err, tap.ErrInvalidName) {
				t.Fatalf("Open(%q): got %v, want ErrInvalidName", name, err)
			}
		})
	}
}

func TestOpenBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  tap.Config
	}{
		{"short MAC", tap.Config{MAC: net.HardwareAddr{1, 2, 3}}},
		{"vnet size without VnetHdr", tap.Config{VnetHdrSize: 12}},
		{"vnet size too small", tap.Config{VnetHdr: true, VnetHdrSize: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d, err := tap.Open(tc.cfg); err == nil {
				d.Close()
				t.Fatalf("Open(%+v): got nil error, want one", tc.cfg)
			}
		})
	}
}

// TestReadWrite drives a TAP from both sides: the kernel's ARP request for
// a neighbour must come out of ReadBatch, and an ARP reply plus a UDP
// datagram written with WriteBatch must reach a socket in the namespace.
func TestReadWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  tap.Config
		hdr  int // vnet header bytes in front of each frame
	}{
		{"plain", tap.Config{Name: "gptap0", MAC: tapMAC}, 0},
		{"vnethdr12", tap.Config{Name: "gptap1", MAC: tapMAC, VnetHdr: true, VnetHdrSize: 12}, 12},
		{"kernel-named", tap.Config{MAC: tapMAC, NAPI: true, MultiQueue: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer nstest.EnterNetns(t)()
			d := openTap(t, tc.cfg)
			if os.Getenv(childEnv) != "" {
				m, _ := os.ReadFile("/proc/self/uid_map")
				t.Logf("uid %d, uid_map %q", os.Getuid(), strings.TrimSpace(string(m)))
			}
			if tc.cfg.Name != "" && d.Name() != tc.cfg.Name {
				t.Errorf("Name: got %q, want %q", d.Name(), tc.cfg.Name)
			}
			if !strings.HasPrefix(d.Name(), "gptap") && !strings.HasPrefix(d.Name(), "tap") {
				t.Errorf("Name: got %q, want gptap* or tap*", d.Name())
			}
			if tc.hdr != 0 {
				if err := d.SetOffload(unix.TUN_F_CSUM); err != nil {
					t.Errorf("SetOffload(TUN_F_CSUM): %v", err)
				}
			}
			checkLink(t, d, tapMAC)

			run(t, "ip", "link", "set", d.Name(), "up")
			run(t, "ip", "addr", "add", "192.0.2.1/24", "dev", d.Name())

			// Kernel -> us: a datagram to an unresolved neighbour makes
			// the kernel ask for it.
			s := udpSocket(t)
			if err := unix.Sendto(s, []byte("ping"), 0, &unix.SockaddrInet4{Addr: peerIP, Port: 9}); err != nil {
				t.Fatalf("sendto 192.0.2.2:9: %v", err)
			}
			if !readARPRequest(t, d, tc.hdr) {
				t.Fatal("no ARP request for 192.0.2.2 came out of ReadBatch")
			}

			// Us -> kernel.
			port := int(nstest.LocalAddr(t, s).Port())
			frames := [][]byte{
				withHdr(tc.hdr, arpReply()),
				withHdr(tc.hdr, udpFrame(port, []byte("hello from the tap"))),
			}
			before := rxPackets(t, d)
			n, err := d.WriteBatch(frames)
			if n != len(frames) || err != nil {
				t.Fatalf("WriteBatch: got %d, %v; want %d, nil", n, err, len(frames))
			}
			got := recvTimeout(t, s, 5*time.Second)
			if want := "hello from the tap"; string(got) != want {
				t.Errorf("datagram received in namespace: got %q, want %q", got, want)
			}
			if after := rxPackets(t, d); after < before+2 {
				t.Errorf("rx_packets: got %d, want at least %d", after, before+2)
			}
		})
	}
}

// TestUnprivileged re-runs TestReadWrite as uid 65534 inside a user and
// network namespace that uid creates (what `unshare -Urn` gives a rootless
// user), so the TAP path is proven without host privileges.
func TestUnprivileged(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("already the unprivileged child")
	}
	if !isRoot() {
		t.Skip("needs root to switch to uid 65534")
	}
	for _, tool := range []string{"setpriv", "unshare", "ip"} {
		if _, err := lookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	bin := nstest.SelfBinary(t)
	out, err := runCmd(t, 60*time.Second, []string{childEnv + "=1"},
		"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"unshare", "-Urn", bin, "-test.run=^TestReadWrite$", "-test.v", "-test.count=1")
	switch {
	case strings.Contains(out, "unshare failed") || strings.Contains(out, "unshare: "):
		t.Skipf("unprivileged user namespaces unavailable:\n%s", out)
	case err != nil:
		t.Fatalf("child as uid 65534: %v\n%s", err, out)
	case strings.Contains(out, "--- SKIP"):
		t.Skipf("as uid 65534: %s", skipReason(out))
	case !strings.Contains(out, "--- PASS: TestReadWrite"):
		t.Fatalf("child as uid 65534: no PASS line\n%s", out)
	}
	t.Logf("as uid 65534 in its own user+net namespace:\n%s", out)
}

func checkLink(t *testing.T, d *tap.Device, mac net.HardwareAddr) {
	t.Helper()
	if d.Index() <= 0 {
		t.Fatalf("Index: got %d, want > 0", d.Index())
	}
	l := getLink(t, d.Index())
	if l.Attributes.Name != d.Name() {
		t.Errorf("link %d name: got %q, want %q", d.Index(), l.Attributes.Name, d.Name())
	}
	if !bytes.Equal(l.Attributes.Address, mac) {
		t.Errorf("link %s MAC: got %v, want %v", d.Name(), l.Attributes.Address, mac)
	}
}

func getLink(t testing.TB, index int) rtnetlink.LinkMessage {
	t.Helper()
	c, err := rtnetlink.Dial(&netlink.Config{})
	if err != nil {
		t.Fatalf("rtnetlink: %v", err)
	}
	defer c.Close()
	l, err := c.Link.Get(uint32(index))
	if err != nil || l.Attributes == nil {
		t.Fatalf("RTM_GETLINK %d: %v", index, err)
	}
	return l
}

func rxPackets(t testing.TB, d *tap.Device) uint64 {
	l := getLink(t, d.Index())
	if l.Attributes.Stats64 == nil {
		t.Fatalf("link %s: no IFLA_STATS64", d.Name())
	}
	return l.Attributes.Stats64.RXPackets
}

func readARPRequest(t *testing.T, d *tap.Device, hdr int) bool {
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 65536+hdr)
	}
	sizes := make([]int, len(bufs))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := nstest.WaitReadable(d.Fd(), time.Until(deadline)); err != nil {
			t.Logf("waiting for the ARP request: %v", err)
			return false
		}
		n, err := d.ReadBatch(bufs, sizes)
		if err != nil {
			t.Fatalf("ReadBatch: %v", err)
		}
		for i := range n {
			f := bufs[i][hdr:sizes[i]]
			if len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_ARP &&
				binary.BigEndian.Uint16(f[20:]) == 1 && bytes.Equal(f[38:42], peerIP[:]) {
				if !bytes.Equal(f[6:12], tapMAC) {
					t.Errorf("ARP request source MAC: got %v, want %v", net.HardwareAddr(f[6:12]), tapMAC)
				}
				return true
			}
		}
	}
	return false
}

func withHdr(hdr int, frame []byte) []byte {
	return append(make([]byte, hdr), frame...)
}

func arpReply() []byte {
	f := make([]byte, 42)
	copy(f[0:], tapMAC)
	copy(f[6:], peerMAC)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_ARP)
	binary.BigEndian.PutUint16(f[14:], 1)      // Ethernet
	binary.BigEndian.PutUint16(f[16:], 0x0800) // IPv4
	f[18], f[19] = 6, 4
	binary.BigEndian.PutUint16(f[20:], 2) // reply
	copy(f[22:], peerMAC)
	copy(f[28:], peerIP[:])
	copy(f[32:], tapMAC)
	copy(f[38:], tapIP[:])
	return f
}

func udpFrame(dport int, payload []byte) []byte {
	return nstest.UDPFrame(tapMAC, peerMAC, netip.AddrPortFrom(netip.AddrFrom4(peerIP), 40000),
		netip.AddrPortFrom(netip.AddrFrom4(tapIP), uint16(dport)), payload)
}

func udpSocket(t *testing.T) int {
	t.Helper()
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(s) })
	if err := unix.Bind(s, &unix.SockaddrInet4{Addr: tapIP}); err != nil {
		t.Fatalf("bind 192.0.2.1: %v", err)
	}
	return s
}

func recvTimeout(t *testing.T, s int, d time.Duration) []byte {
	t.Helper()
	if err := nstest.WaitReadable(s, d); err != nil {
		t.Fatalf("waiting for the datagram: %v", err)
	}
	buf := make([]byte, 2048)
	n, _, err := unix.Recvfrom(s, buf, 0)
	if err != nil {
		t.Fatalf("recvfrom: %v", err)
	}
	return buf[:n]
}

func skipReason(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "TAP not available") || strings.Contains(l, "needs CAP") {
			return strings.TrimSpace(l)
		}
	}
	return out
}
