//go:build linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm)

package vhostkern

// Kernel ABI: <linux/vhost.h>, <linux/vhost_types.h>, <linux/virtio_ring.h>,
// <linux/virtio_net.h>. Only little-endian architectures using the generic
// <asm-generic/ioctl.h> encoding are built; virtio 1.x rings are
// little-endian, and the atomics in ring.go rely on host order matching.

// ioc mirrors _IOC(dir, type, nr, size) from <asm-generic/ioctl.h>.
func ioc(dir, typ, nr, size uintptr) uintptr { return dir<<30 | size<<16 | typ<<8 | nr }

const (
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2

	vhostVirtio = 0xAF // VHOST_VIRTIO, the ioctl "type" of every vhost request
)

// ioctl requests. Sizes are the argument structs' sizes, checked in
// uapi_test.go against the numbers the kernel headers produce.
var (
	vhostGetFeatures   = ioc(iocRead, vhostVirtio, 0x00, 8)
	vhostSetFeatures   = ioc(iocWrite, vhostVirtio, 0x00, 8)
	vhostSetOwner      = ioc(iocNone, vhostVirtio, 0x01, 0)
	vhostSetMemTable   = ioc(iocWrite, vhostVirtio, 0x03, sizeofVhostMemory)
	vhostSetVringNum   = ioc(iocWrite, vhostVirtio, 0x10, sizeofVringState)
	vhostSetVringAddr  = ioc(iocWrite, vhostVirtio, 0x11, sizeofVringAddr)
	vhostSetVringBase  = ioc(iocWrite, vhostVirtio, 0x12, sizeofVringState)
	vhostGetVringBase  = ioc(iocRead|iocWrite, vhostVirtio, 0x12, sizeofVringState)
	vhostSetVringKick  = ioc(iocWrite, vhostVirtio, 0x20, sizeofVringFile)
	vhostSetVringCall  = ioc(iocWrite, vhostVirtio, 0x21, sizeofVringFile)
	vhostNetSetBackend = ioc(iocWrite, vhostVirtio, 0x30, sizeofVringFile)
)

// struct vhost_vring_state: SET_VRING_NUM and SET/GET_VRING_BASE.
type vhostVringState struct {
	Index uint32
	Num   uint32
}

// struct vhost_vring_file: SET_VRING_KICK/CALL, NET_SET_BACKEND (Fd -1 unsets).
type vhostVringFile struct {
	Index uint32
	Fd    int32
}

// struct vhost_vring_addr: user addresses of one queue's three parts.
type vhostVringAddr struct {
	Index         uint32
	Flags         uint32
	DescUserAddr  uint64
	UsedUserAddr  uint64
	AvailUserAddr uint64
	LogGuestAddr  uint64
}

// struct vhost_memory_region.
type vhostMemoryRegion struct {
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
	FlagsPadding  uint64
}

// struct vhost_memory with its flexible array fixed at the one region we use.
type vhostMemory1 struct {
	Nregions uint32
	Padding  uint32
	Regions  [1]vhostMemoryRegion
}

const (
	sizeofVringState  = 8
	sizeofVringFile   = 8
	sizeofVringAddr   = 40
	sizeofVhostMemory = 8 // header only, as _IOW(..., struct vhost_memory) sees it
)
