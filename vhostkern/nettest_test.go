//go:build linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm)

package vhostkern

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// Plumbing for the kernel tests: a TAP opened directly (not through package
// tap, to keep these tests self-contained), its configuration by ioctl, and
// hand-built UDP frames.

const (
	tapAddr  = "10.99.0.1" // the namespace's side, on the TAP
	peerAddr = "10.99.0.2" // the "outside" our Device plays
	tapMTU   = 9000
)

var peerMAC = [6]byte{0x02, 0x76, 0x68, 0x6b, 0x00, 0x02}

// testTap is a configured TAP in the current network namespace.
type testTap struct {
	fd   int
	name string
	mac  [6]byte
}

func openTestTap(t *testing.T) *testTap {
	t.Helper()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/net/tun: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	name := fmt.Sprintf("vhk%d.%d", os.Getpid()%100000, tapSeq.Add(1))
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		t.Fatalf("TUNSETIFF %s: %v", name, err)
	}
	tp := &testTap{fd: fd, name: ifr.Name()}
	// No IPv6: its router solicitations and MLD reports would be noise.
	os.WriteFile("/proc/sys/net/ipv6/conf/"+tp.name+"/disable_ipv6", []byte("1"), 0)

	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(s)
	step := func(what string, err error) {
		if err != nil {
			t.Fatalf("%s on %s: %v", what, tp.name, err)
		}
	}
	ifr, _ = unix.NewIfreq(tp.name)
	ifr.SetUint32(tapMTU)
	step("SIOCSIFMTU", unix.IoctlIfreq(s, unix.SIOCSIFMTU, ifr))
	ifr, _ = unix.NewIfreq(tp.name)
	step("set address", ifr.SetInet4Addr(netip.MustParseAddr(tapAddr).AsSlice()))
	step("SIOCSIFADDR", unix.IoctlIfreq(s, unix.SIOCSIFADDR, ifr))
	ifr, _ = unix.NewIfreq(tp.name)
	step("set netmask", ifr.SetInet4Addr([]byte{255, 255, 255, 0}))
	step("SIOCSIFNETMASK", unix.IoctlIfreq(s, unix.SIOCSIFNETMASK, ifr))
	ifr, _ = unix.NewIfreq(tp.name)
	step("SIOCGIFFLAGS", unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr))
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	step("SIOCSIFFLAGS", unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr))

	var raw [40]byte // struct ifreq with ifr_hwaddr
	copy(raw[:], tp.name)
	step("SIOCGIFHWADDR", rawIoctl(s, unix.SIOCGIFHWADDR, unsafe.Pointer(&raw)))
	copy(tp.mac[:], raw[18:24])

	// A permanent neighbour entry for the peer (struct arpreq), so the
	// kernel sends to it without ARP.
	var arp [68]byte
	binary.NativeEndian.PutUint16(arp[0:], unix.AF_INET)
	copy(arp[4:8], netip.MustParseAddr(peerAddr).AsSlice())
	binary.NativeEndian.PutUint16(arp[16:], unix.ARPHRD_ETHER)
	copy(arp[18:24], peerMAC[:])
	binary.NativeEndian.PutUint32(arp[32:], 0x02|0x04) // ATF_COM|ATF_PERM
	copy(arp[52:], tp.name)
	step("SIOCSARP", rawIoctl(s, unix.SIOCSARP, unsafe.Pointer(&arp)))
	return tp
}

func rawIoctl(fd int, req uint, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// udpSocket is a kernel UDP socket on the TAP's address.
func udpSocket(t *testing.T, port int) int {
	t.Helper()
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(s) })
	unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	sa := &unix.SockaddrInet4{Port: port, Addr: netip.MustParseAddr(tapAddr).As4()}
	if err := unix.Bind(s, sa); err != nil {
		t.Fatalf("bind %s:%d: %v", tapAddr, port, err)
	}
	return s
}

// udpFrame builds Ethernet+IPv4+UDP from the peer to the TAP's address.
func udpFrame(dstMAC [6]byte, srcPort, dstPort int, payload []byte) []byte {
	return nstest.UDPFrame(dstMAC[:], peerMAC[:], netip.AddrPortFrom(netip.MustParseAddr(peerAddr), uint16(srcPort)),
		netip.AddrPortFrom(netip.MustParseAddr(tapAddr), uint16(dstPort)), payload)
}

// udpPayload returns the payload of a frame from the TAP's address to the
// peer's dstPort, or nil for any other frame.
func udpPayload(f []byte, dstPort int) []byte {
	if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[14]>>4 != 4 {
		return nil
	}
	ihl := int(f[14]&0xf) * 4
	if f[23] != unix.IPPROTO_UDP || len(f) < 14+ihl+8 {
		return nil
	}
	udp := f[14+ihl:]
	if int(binary.BigEndian.Uint16(udp[2:])) != dstPort {
		return nil
	}
	n := int(binary.BigEndian.Uint16(udp[4:]))
	if n < 8 || n > len(udp) {
		return nil
	}
	return udp[8:n]
}

func payloadFor(seq, size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(seq + i*13)
	}
	binary.BigEndian.PutUint32(p, uint32(seq))
	return p
}
