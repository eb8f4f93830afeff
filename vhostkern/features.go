package vhostkern

// The virtio feature bits vhost-net reports, and their names for logs.

import (
	"fmt"
	"strings"
)

// Feature bits as VHOST_GET_FEATURES reports them (virtio numbering), as
// masks so that Offered()&FeatureEventIdx reads naturally.
const (
	FeatureMrgRxbuf     uint64 = 1 << 15 // VIRTIO_NET_F_MRG_RXBUF: one frame may span several RX buffers
	FeatureNotifyEmpty  uint64 = 1 << 24 // VIRTIO_F_NOTIFY_ON_EMPTY
	FeatureLogAll       uint64 = 1 << 26 // VHOST_F_LOG_ALL (live migration logging)
	FeatureVnetHdr      uint64 = 1 << 27 // VHOST_NET_F_VIRTIO_NET_HDR, shares the bit with VIRTIO_F_ANY_LAYOUT
	FeatureIndirectDesc uint64 = 1 << 28 // VIRTIO_RING_F_INDIRECT_DESC
	FeatureEventIdx     uint64 = 1 << 29 // VIRTIO_RING_F_EVENT_IDX: used_event/avail_event suppression
	FeatureVersion1     uint64 = 1 << 32 // VIRTIO_F_VERSION_1: little-endian rings, 12-byte net header
	FeatureAccessPlat   uint64 = 1 << 33 // VIRTIO_F_ACCESS_PLATFORM (IOTLB)
	FeatureRingPacked   uint64 = 1 << 34 // VIRTIO_F_RING_PACKED
	FeatureInOrder      uint64 = 1 << 35 // VIRTIO_F_IN_ORDER
)

var featureNames = []struct {
	mask uint64
	name string
}{
	{FeatureMrgRxbuf, "MRG_RXBUF"},
	{FeatureNotifyEmpty, "NOTIFY_ON_EMPTY"},
	{FeatureLogAll, "LOG_ALL"},
	{FeatureVnetHdr, "ANY_LAYOUT|VNET_HDR"},
	{FeatureIndirectDesc, "INDIRECT_DESC"},
	{FeatureEventIdx, "EVENT_IDX"},
	{FeatureVersion1, "VERSION_1"},
	{FeatureAccessPlat, "ACCESS_PLATFORM"},
	{FeatureRingPacked, "RING_PACKED"},
	{FeatureInOrder, "IN_ORDER"},
}

// FeatureString renders a feature mask for logs, e.g. "0x130008000
// [MRG_RXBUF EVENT_IDX VERSION_1]"; unknown bits appear as bitN.
func FeatureString(f uint64) string {
	var names []string
	known := uint64(0)
	for _, fn := range featureNames {
		known |= fn.mask
		if f&fn.mask != 0 {
			names = append(names, fn.name)
		}
	}
	for b := 0; b < 64; b++ {
		if m := uint64(1) << b; f&m != 0 && known&m == 0 {
			names = append(names, fmt.Sprintf("bit%d", b))
		}
	}
	return fmt.Sprintf("%#x [%s]", f, strings.Join(names, " "))
}
