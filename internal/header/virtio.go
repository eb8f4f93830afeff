package header

// The virtio-net header that precedes each frame on a TAP with offloads.

import "encoding/binary"

// VirtioNetHdr is the virtio-net header (virtio 1.x, struct
// virtio_net_hdr_v1 in include/uapi/linux/virtio_net.h) that a TAP opened
// with IFF_VNET_HDR and a 12-byte TUNSETVNETHDRSZ puts in front of every
// frame, in both directions. It carries the offload state of the frame:
// whether its transport checksum still needs computing, and whether it is
// a GSO "super-frame" to be cut into gso_size segments.
//
//	 0               1               2               3
//	+---------------+---------------+-------------------------------+
//	|     flags     |   gso_type    |            hdr_len            |
//	+---------------+---------------+-------------------------------+
//	|           gso_size            |          csum_start           |
//	+-------------------------------+-------------------------------+
//	|          csum_offset          |          num_buffers          |
//	+-------------------------------+-------------------------------+
//
// Fields are little-endian (virtio 1.x; the TAP uses the host's byte order
// unless told otherwise, which is little-endian on every platform gopasta
// builds for).
type VirtioNetHdr []byte

// VirtioNetHdrSize is the v1 header's size, as vhost-net and gopasta use it.
const VirtioNetHdrSize = 12

const (
	vnetFlags      = 0
	vnetGSOType    = 1
	vnetHdrLen     = 2
	vnetGSOSize    = 4
	vnetCsumStart  = 6
	vnetCsumOffset = 8
	vnetNumBuffers = 10
)

// Flags.
const (
	// VirtioNetHdrFNeedsCsum: the transport checksum is partial (the
	// pseudo-header sum is in place); sum from CsumStart and store the
	// result at CsumStart+CsumOffset.
	VirtioNetHdrFNeedsCsum uint8 = 1
	// VirtioNetHdrFDataValid: the checksum was verified, the receiver
	// need not (sets CHECKSUM_UNNECESSARY).
	VirtioNetHdrFDataValid uint8 = 2
)

// GSO types.
const (
	VirtioNetHdrGSONone  uint8 = 0
	VirtioNetHdrGSOTCPv4 uint8 = 1
	VirtioNetHdrGSOUDP   uint8 = 3
	VirtioNetHdrGSOTCPv6 uint8 = 4
	VirtioNetHdrGSOUDPL4 uint8 = 5 // USO, Linux 6.2
	VirtioNetHdrGSOECN   uint8 = 0x80
)

func (h VirtioNetHdr) Flags() uint8       { return h[vnetFlags] }
func (h VirtioNetHdr) GSOType() uint8     { return h[vnetGSOType] }
func (h VirtioNetHdr) HdrLen() uint16     { return binary.LittleEndian.Uint16(h[vnetHdrLen:]) }
func (h VirtioNetHdr) GSOSize() uint16    { return binary.LittleEndian.Uint16(h[vnetGSOSize:]) }
func (h VirtioNetHdr) CsumStart() uint16  { return binary.LittleEndian.Uint16(h[vnetCsumStart:]) }
func (h VirtioNetHdr) CsumOffset() uint16 { return binary.LittleEndian.Uint16(h[vnetCsumOffset:]) }
func (h VirtioNetHdr) NumBuffers() uint16 { return binary.LittleEndian.Uint16(h[vnetNumBuffers:]) }

// VirtioNetHdrFields are the values Encode writes.
type VirtioNetHdrFields struct {
	Flags, GSOType                         uint8
	HdrLen, GSOSize, CsumStart, CsumOffset uint16
}

// Encode writes f (num_buffers 0: a TAP does not merge buffers).
func (h VirtioNetHdr) Encode(f *VirtioNetHdrFields) {
	h[vnetFlags] = f.Flags
	h[vnetGSOType] = f.GSOType
	binary.LittleEndian.PutUint16(h[vnetHdrLen:], f.HdrLen)
	binary.LittleEndian.PutUint16(h[vnetGSOSize:], f.GSOSize)
	binary.LittleEndian.PutUint16(h[vnetCsumStart:], f.CsumStart)
	binary.LittleEndian.PutUint16(h[vnetCsumOffset:], f.CsumOffset)
	binary.LittleEndian.PutUint16(h[vnetNumBuffers:], 0)
}
