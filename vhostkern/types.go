package vhostkern

// Frame size limits, the frame length error, and the per-direction counters.

import (
	"fmt"

	"github.com/gopasta/gopasta/internal/header"
)

const (
	// vnetHdrLen is sizeof(struct virtio_net_hdr_v1): flags, gso_type,
	// hdr_len, gso_size, csum_start, csum_offset, num_buffers.
	vnetHdrLen = header.VirtioNetHdrSize
	// numBuffersOff locates num_buffers, which the device fills with
	// MRG_RXBUF to say how many used elements carry this frame.
	numBuffersOff = 10

	// MaxFrameLen bounds the Ethernet frames WriteBatch accepts (header
	// excluded): the largest GSO frame, a 65535-byte IPv6 payload behind
	// its 40-byte header, an Ethernet header and a VLAN tag.
	MaxFrameLen = 65535 + 40 + 14 + 4
	// MinFrameLen is an Ethernet header; the TAP rejects anything shorter.
	MinFrameLen = 14
)

// FrameLenError is returned by WriteBatch for a frame that cannot be sent.
type FrameLenError struct {
	Len, Max int
}

func (e *FrameLenError) Error() string {
	return fmt.Sprintf("vhostkern: frame of %d bytes: want %d to %d", e.Len, MinFrameLen, e.Max)
}

// Stats counts frames and notifications per direction. Kicks are our
// eventfd writes to the kernel, calls the kernel's writes to us; the point
// of the suppression logic is to keep both far below the frame counts.
type Stats struct {
	RxFrames, TxFrames uint64
	RxKicks, TxKicks   uint64 // RX kicks follow buffer refills
	RxCalls, TxCalls   uint64
	RxDropped          uint64 // frames longer than the caller's buffer (RX queue only; TAP reads truncate)
	TxFull             uint64 // WriteBatch calls cut short by a full queue
	RxPolled           uint64 // empty-queue polls that found a frame before re-arming
	RxArmed            uint64 // times ReadBatch asked for a call; with EVENT_IDX the kernel sends at most one per request
	RxRefills          uint64 // batches of RX buffers handed back
	TxBatches          uint64 // WriteBatch calls that published frames
}
