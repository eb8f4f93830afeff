// Package tap opens the TAP device gopasta uses as the namespace's network
// interface and moves Ethernet frames through it in batches.
//
// The device lives in the network namespace of the thread that calls Open;
// callers run Open on their namespace thread and may then use the Device
// from any goroutine: the file descriptor keeps its namespace.
package tap

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

const tunPath = "/dev/net/tun"

// Config says which TAP device to create.
type Config struct {
	// Name of the interface; empty lets the kernel pick (tap0, tap1, ...).
	// A name containing %d is a template the kernel fills in.
	Name string
	// MAC of the interface; nil keeps the kernel's random one.
	MAC net.HardwareAddr
	// VnetHdr prefixes every frame with a virtio-net header
	// (IFF_VNET_HDR, Linux 2.6.27), which carries GSO and checksum
	// offload information both ways.
	VnetHdr bool
	// VnetHdrSize sets the header size (TUNSETVNETHDRSZ, Linux 2.6.35);
	// 0 keeps the kernel default of 10 (struct virtio_net_hdr). 12 is the
	// VIRTIO_F_VERSION_1 / mergeable-buffers layout vhost-net uses.
	VnetHdrSize int
	// NAPI makes the kernel receive our writes through NAPI
	// (IFF_NAPI, Linux 4.15), which batches them.
	NAPI bool
	// MultiQueue allows more queues (file descriptors) on the same
	// interface later (IFF_MULTI_QUEUE, Linux 3.8).
	MultiQueue bool
}

// Device is an open TAP queue. Its descriptor is non-blocking and
// close-on-exec; the caller polls Fd itself (the engine runs its own epoll),
// so the descriptor is deliberately kept away from Go's netpoller.
type Device struct {
	fd    int
	name  string
	index int
	flags uint16
}

// Open creates (or attaches to) the TAP interface cfg.Name in the calling
// thread's network namespace.
func Open(cfg Config) (*Device, error) {
	if err := checkName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.MAC != nil && len(cfg.MAC) != 6 {
		return nil, fmt.Errorf("tap: MAC %v is not a 6-byte Ethernet address", cfg.MAC)
	}
	if cfg.VnetHdrSize != 0 && (!cfg.VnetHdr || cfg.VnetHdrSize < 10) {
		return nil, fmt.Errorf("tap: vnet header size %d needs VnetHdr and at least 10 bytes", cfg.VnetHdrSize)
	}

	fd, err := unix.Open(tunPath, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, openError(err)
	}
	d := &Device{fd: fd}
	if err := d.setup(cfg); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return d, nil
}

func (d *Device) setup(cfg Config) error {
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if cfg.VnetHdr {
		flags |= unix.IFF_VNET_HDR
	}
	if cfg.NAPI {
		flags |= unix.IFF_NAPI
	}
	if cfg.MultiQueue {
		flags |= unix.IFF_MULTI_QUEUE
	}
	ifr, err := unix.NewIfreq(cfg.Name)
	if err != nil {
		return &NameError{Name: cfg.Name, Reason: err.Error()}
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(d.fd, unix.TUNSETIFF, ifr); err != nil {
		return setiffError(cfg.Name, err)
	}
	d.name = ifr.Name()
	d.flags = flags

	if cfg.VnetHdrSize != 0 {
		if err := unix.IoctlSetPointerInt(d.fd, unix.TUNSETVNETHDRSZ, cfg.VnetHdrSize); err != nil {
			return fmt.Errorf("tap: %s: TUNSETVNETHDRSZ %d: %w", d.name, cfg.VnetHdrSize, err)
		}
	}
	if cfg.MAC != nil {
		if err := d.setMAC(cfg.MAC); err != nil {
			return err
		}
	}
	idx, err := ifindex(d.name)
	if err != nil {
		return err
	}
	d.index = idx
	return nil
}

// setMAC uses the TAP's own SIOCSIFHWADDR (Linux 2.6.22), which saves a
// netlink socket and works wherever TUNSETIFF did.
func (d *Device) setMAC(mac net.HardwareAddr) error {
	// struct ifreq: name[16], then struct sockaddr {family u16; data[14]}.
	var ifr [40]byte
	copy(ifr[:unix.IFNAMSIZ-1], d.name)
	*(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = unix.ARPHRD_ETHER
	copy(ifr[unix.IFNAMSIZ+2:], mac)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(d.fd), unix.SIOCSIFHWADDR, uintptr(unsafe.Pointer(&ifr[0])))
	if errno != 0 {
		return fmt.Errorf("tap: %s: set MAC %v: %w", d.name, mac, errno)
	}
	return nil
}

// ifindex asks the kernel for name's index through a throwaway socket,
// which lives in the calling thread's namespace like the TAP itself.
func ifindex(name string) (int, error) {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("tap: %s: socket for SIOCGIFINDEX: %w", name, err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("tap: %s: SIOCGIFINDEX: %w", name, err)
	}
	return int(ifr.Uint32()), nil
}

// SetOffload enables the offloads (unix.TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6,
// TUN_F_USO4/6 from Linux 6.2, ...) the kernel may hand us. Only
// meaningful with VnetHdr, where the header says what each frame needs.
func (d *Device) SetOffload(flags int) error {
	if d.flags&unix.IFF_VNET_HDR == 0 {
		return fmt.Errorf("tap: %s: offloads need VnetHdr", d.name)
	}
	if err := unix.IoctlSetInt(d.fd, unix.TUNSETOFFLOAD, flags); err != nil {
		return fmt.Errorf("tap: %s: TUNSETOFFLOAD %#x: %w", d.name, flags, err)
	}
	return nil
}

// Name is the interface name the kernel gave the device.
func (d *Device) Name() string { return d.name }

// Index is the interface index in the device's network namespace.
func (d *Device) Index() int { return d.index }

// Fd is the non-blocking TAP descriptor; it polls readable when frames wait.
func (d *Device) Fd() int { return d.fd }

// Close closes the queue; the kernel removes the interface with its last
// queue (the device is never made persistent).
func (d *Device) Close() error {
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	if err != nil {
		return fmt.Errorf("tap: close %s: %w", d.name, err)
	}
	return nil
}

// checkName applies the kernel's dev_valid_name rules up front.
func checkName(name string) error {
	switch {
	case len(name) >= unix.IFNAMSIZ:
		return &NameError{Name: name, Reason: fmt.Sprintf("longer than %d bytes", unix.IFNAMSIZ-1)}
	case name == "." || name == "..":
		return &NameError{Name: name, Reason: "reserved"}
	case strings.ContainsAny(name, "/: \t\n\v\f\r\x00"):
		return &NameError{Name: name, Reason: "contains '/', ':', NUL or white space"}
	}
	return nil
}

func openError(err error) error {
	e := &OpenError{Op: "open", Path: tunPath, Err: err}
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
		e.unavailable = true
		e.Hint = "load the tun module (modprobe tun) or create the node: mknod /dev/net/tun c 10 200 && chmod 0666 /dev/net/tun"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		e.unavailable = true
		e.Hint = "this user may not open it; chmod 0666 /dev/net/tun, as distributions ship it"
	}
	return e
}

func setiffError(name string, err error) error {
	e := &OpenError{Op: "TUNSETIFF", Path: name, Err: err}
	switch {
	case errors.Is(err, unix.EPERM):
		e.Hint = "needs CAP_NET_ADMIN in the user namespace owning this network namespace"
	case errors.Is(err, unix.EBUSY):
		e.Hint = "an interface of that name exists and is not a free TAP queue"
	case errors.Is(err, unix.EINVAL):
		e.Hint = "the name is taken by a non-TAP device, or the flags do not match it"
	}
	return e
}
