//go:build linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm)

package vhostkern

import (
	"testing"
	"unsafe"
)

// The expected numbers are worked out by hand from <linux/vhost.h> with the
// generic encoding _IOC(dir, type, nr, size) = dir<<30 | size<<16 | type<<8 | nr,
// where _IOW is dir 1, _IOR dir 2, _IOWR dir 3, and VHOST_VIRTIO = 0xAF:
//
//	VHOST_GET_FEATURES    _IOR(0xAF, 0x00, __u64)                     = 2<<30 | 8<<16  | 0xAF00        = 0x8008AF00
//	VHOST_SET_FEATURES    _IOW(0xAF, 0x00, __u64)                     = 1<<30 | 8<<16  | 0xAF00        = 0x4008AF00
//	VHOST_SET_OWNER       _IO(0xAF, 0x01)                             =                  0xAF01        = 0x0000AF01
//	VHOST_SET_MEM_TABLE   _IOW(0xAF, 0x03, struct vhost_memory)  (8)  = 1<<30 | 8<<16  | 0xAF03        = 0x4008AF03
//	VHOST_SET_VRING_NUM   _IOW(0xAF, 0x10, struct vhost_vring_state)  = 1<<30 | 8<<16  | 0xAF10        = 0x4008AF10
//	VHOST_SET_VRING_ADDR  _IOW(0xAF, 0x11, struct vhost_vring_addr) (40) = 1<<30 | 0x28<<16 | 0xAF11   = 0x4028AF11
//	VHOST_SET_VRING_BASE  _IOW(0xAF, 0x12, struct vhost_vring_state)  = 1<<30 | 8<<16  | 0xAF12        = 0x4008AF12
//	VHOST_GET_VRING_BASE  _IOWR(0xAF, 0x12, struct vhost_vring_state) = 3<<30 | 8<<16  | 0xAF12        = 0xC008AF12
//	VHOST_SET_VRING_KICK  _IOW(0xAF, 0x20, struct vhost_vring_file)   = 1<<30 | 8<<16  | 0xAF20        = 0x4008AF20
//	VHOST_SET_VRING_CALL  _IOW(0xAF, 0x21, struct vhost_vring_file)   = 1<<30 | 8<<16  | 0xAF21        = 0x4008AF21
//	VHOST_NET_SET_BACKEND _IOW(0xAF, 0x30, struct vhost_vring_file)   = 1<<30 | 8<<16  | 0xAF30        = 0x4008AF30
func TestIoctlNumbers(t *testing.T) {
	tests := []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"VHOST_GET_FEATURES", vhostGetFeatures, 0x8008AF00},
		{"VHOST_SET_FEATURES", vhostSetFeatures, 0x4008AF00},
		{"VHOST_SET_OWNER", vhostSetOwner, 0x0000AF01},
		{"VHOST_SET_MEM_TABLE", vhostSetMemTable, 0x4008AF03},
		{"VHOST_SET_VRING_NUM", vhostSetVringNum, 0x4008AF10},
		{"VHOST_SET_VRING_ADDR", vhostSetVringAddr, 0x4028AF11},
		{"VHOST_SET_VRING_BASE", vhostSetVringBase, 0x4008AF12},
		{"VHOST_GET_VRING_BASE", vhostGetVringBase, 0xC008AF12},
		{"VHOST_SET_VRING_KICK", vhostSetVringKick, 0x4008AF20},
		{"VHOST_SET_VRING_CALL", vhostSetVringCall, 0x4008AF21},
		{"VHOST_NET_SET_BACKEND", vhostNetSetBackend, 0x4008AF30},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %#x, want %#x", tt.name, tt.got, tt.want)
		}
	}
}

// Layouts from the UAPI headers: every field is naturally aligned there, so
// these are the offsets a C compiler gives on every Linux ABI.
func TestStructLayouts(t *testing.T) {
	var (
		st   vhostVringState
		f    vhostVringFile
		a    vhostVringAddr
		mr   vhostMemoryRegion
		m    vhostMemory1
		d    vringDesc
		u    vringUsedElem
		nhdr [vnetHdrLen]byte
	)
	tests := []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(vhost_vring_state)", unsafe.Sizeof(st), sizeofVringState},
		{"vhost_vring_state.num", unsafe.Offsetof(st.Num), 4},
		{"sizeof(vhost_vring_file)", unsafe.Sizeof(f), sizeofVringFile},
		{"vhost_vring_file.fd", unsafe.Offsetof(f.Fd), 4},
		{"sizeof(vhost_vring_addr)", unsafe.Sizeof(a), sizeofVringAddr},
		{"vhost_vring_addr.flags", unsafe.Offsetof(a.Flags), 4},
		{"vhost_vring_addr.desc_user_addr", unsafe.Offsetof(a.DescUserAddr), 8},
		{"vhost_vring_addr.used_user_addr", unsafe.Offsetof(a.UsedUserAddr), 16},
		{"vhost_vring_addr.avail_user_addr", unsafe.Offsetof(a.AvailUserAddr), 24},
		{"vhost_vring_addr.log_guest_addr", unsafe.Offsetof(a.LogGuestAddr), 32},
		{"sizeof(vhost_memory_region)", unsafe.Sizeof(mr), 32},
		{"vhost_memory_region.memory_size", unsafe.Offsetof(mr.MemorySize), 8},
		{"vhost_memory_region.userspace_addr", unsafe.Offsetof(mr.UserspaceAddr), 16},
		{"vhost_memory_region.flags_padding", unsafe.Offsetof(mr.FlagsPadding), 24},
		{"vhost_memory.regions", unsafe.Offsetof(m.Regions), sizeofVhostMemory},
		{"sizeof(vhost_memory)+1 region", unsafe.Sizeof(m), sizeofVhostMemory + 32},
		{"sizeof(vring_desc)", unsafe.Sizeof(d), sizeofVringDesc},
		{"vring_desc.len", unsafe.Offsetof(d.Len), 8},
		{"vring_desc.flags", unsafe.Offsetof(d.Flags), 12},
		{"vring_desc.next", unsafe.Offsetof(d.Next), 14},
		{"sizeof(vring_used_elem)", unsafe.Sizeof(u), sizeofVringUsedElem},
		{"vring_used_elem.len", unsafe.Offsetof(u.Len), 4},
		{"sizeof(virtio_net_hdr_v1)", unsafe.Sizeof(nhdr), 12},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

// Feature masks against the bit numbers in virtio_config.h, virtio_ring.h,
// virtio_net.h and vhost.h.
func TestFeatureBits(t *testing.T) {
	tests := []struct {
		name string
		mask uint64
		bit  uint
	}{
		{"VIRTIO_NET_F_MRG_RXBUF", FeatureMrgRxbuf, featMrgRxbuf},
		{"VIRTIO_F_NOTIFY_ON_EMPTY", FeatureNotifyEmpty, featNotifyEmpty},
		{"VHOST_NET_F_VIRTIO_NET_HDR", FeatureVnetHdr, featAnyLayout},
		{"VIRTIO_RING_F_INDIRECT_DESC", FeatureIndirectDesc, featIndirect},
		{"VIRTIO_RING_F_EVENT_IDX", FeatureEventIdx, featEventIdx},
		{"VIRTIO_F_VERSION_1", FeatureVersion1, featVersion1},
	}
	for _, tt := range tests {
		if tt.mask != 1<<tt.bit {
			t.Errorf("%s = %#x, want 1<<%d", tt.name, tt.mask, tt.bit)
		}
	}
	if got, want := FeatureString(FeatureVersion1|FeatureEventIdx|1<<50), "0x4000120000000 [EVENT_IDX VERSION_1 bit50]"; got != want {
		t.Errorf("FeatureString = %q, want %q", got, want)
	}
}

const (
	featMrgRxbuf    = 15
	featNotifyEmpty = 24
	featAnyLayout   = 27
	featIndirect    = 28
	featEventIdx    = 29
	featVersion1    = 32
)
