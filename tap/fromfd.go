package tap

// A TAP queue opened by someone else and handed over (pasta's --fd).

import (
	"errors"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FromFD adopts fd, a TAP queue the caller opened: TUNSETIFF was done,
// the interface exists. It must be a TAP (Ethernet frames, not TUN's bare
// IP packets) without the packet information header (IFF_NO_PI), as
// gopasta's own; IFF_VNET_HDR may be set (VnetHdr says so). The
// descriptor is made non-blocking, which its other holders see too.
//
// Call it on a thread in the target network namespace: a TAP elsewhere is
// refused (where the kernel can tell, InNetNS), and the index is looked up
// by name there.
func FromFD(fd int) (*Device, error) {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		switch {
		case errors.Is(err, unix.EBADF):
			return nil, errors.New("not an open descriptor")
		case errors.Is(err, unix.EBADFD):
			return nil, errors.New("a /dev/net/tun descriptor with no device attached (no TUNSETIFF)")
		}
		return nil, fmt.Errorf("not a TAP device (TUNGETIFF: %v)", err)
	}
	flags := ifr.Uint16()
	if flags&unix.IFF_TAP == 0 {
		return nil, fmt.Errorf("%s is a TUN device, not a TAP: its packets have no Ethernet header", ifr.Name())
	}
	noPI, err := hasNoPI(fd, flags)
	if err != nil {
		return nil, fmt.Errorf("TAP %s: %w", ifr.Name(), err)
	}
	if !noPI {
		return nil, fmt.Errorf("TAP %s was opened without IFF_NO_PI: every frame would carry a packet information header", ifr.Name())
	}
	flags |= unix.IFF_NO_PI
	d := &Device{fd: fd, name: ifr.Name(), flags: flags}
	if in, known := d.InNetNS(); known && !in {
		return nil, fmt.Errorf("TAP %s is in another network namespace, not the target's", d.name)
	}
	if d.index, err = ifindex(d.name); err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("TAP %s: O_NONBLOCK: %w", d.name, err)
	}
	return d, nil
}

// hasNoPI tells whether the TAP queue fd was set up with IFF_NO_PI.
// TUNGETIFF's flags cannot say by themselves: the kernel also sets
// IFF_NOFILTER, the same bit, in its answer when the queue has no socket
// filter. So when the bit is set and no filter is attached (TUNGETFILTER
// gives an empty program), an accept-all filter is attached for the moment of a second
// TUNGETIFF, and detached.
func hasNoPI(fd int, flags uint16) (bool, error) {
	if flags&unix.IFF_NO_PI == 0 {
		return false, nil // a filter is attached, and no IFF_NO_PI
	}
	var got unix.SockFprog
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNGETFILTER, uintptr(unsafe.Pointer(&got))); errno == 0 && got.Len > 0 {
		return true, nil // a filter: the bit is IFF_NO_PI's
	}
	accept := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff}}
	prog := unix.SockFprog{Len: 1, Filter: &accept[0]}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNATTACHFILTER, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return false, fmt.Errorf("TUNATTACHFILTER (to read its IFF_NO_PI): %w", errno)
	}
	ifr, err := unix.NewIfreq("")
	if err == nil {
		err = unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr)
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNDETACHFILTER, uintptr(unsafe.Pointer(&prog)))
	switch {
	case err != nil:
		return false, fmt.Errorf("TUNGETIFF: %w", err)
	case errno != 0:
		return false, fmt.Errorf("TUNDETACHFILTER: %w", errno)
	}
	return ifr.Uint16()&unix.IFF_NO_PI != 0, nil
}

// VnetHdr says whether frames carry a virtio-net header (IFF_VNET_HDR).
func (d *Device) VnetHdr() bool { return d.flags&unix.IFF_VNET_HDR != 0 }

// SetVnetHdrSize sets the virtio-net header's size (TUNSETVNETHDRSZ) on a
// TAP with VnetHdr.
func (d *Device) SetVnetHdrSize(n int) error {
	if !d.VnetHdr() {
		return fmt.Errorf("tap: %s: no virtio-net header to size", d.name)
	}
	if err := unix.IoctlSetPointerInt(d.fd, unix.TUNSETVNETHDRSZ, n); err != nil {
		return fmt.Errorf("tap: %s: TUNSETVNETHDRSZ %d: %w", d.name, n, err)
	}
	return nil
}

// SetMAC sets the interface's MAC address.
func (d *Device) SetMAC(mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("tap: MAC %v is not a 6-byte Ethernet address", mac)
	}
	return d.setMAC(mac)
}

// InNetNS reports whether the TAP's interface lives in the network
// namespace of the calling thread (TUNGETDEVNETNS, Linux 5.2, compared
// with /proc/thread-self/ns/net). known is false when the kernel cannot
// tell (older, or not allowed to hand out the namespace).
func (d *Device) InNetNS() (in, known bool) {
	nsfd, err := unix.IoctlRetInt(d.fd, unix.TUNGETDEVNETNS)
	if err != nil {
		return false, false
	}
	defer unix.Close(nsfd)
	var dev, here unix.Stat_t
	if unix.Fstat(nsfd, &dev) != nil || unix.Stat("/proc/thread-self/ns/net", &here) != nil {
		return false, false
	}
	return dev.Dev == here.Dev && dev.Ino == here.Ino, true
}
