package vhostkern

// The Config a Device is built from, its defaults, and ErrNotSupported.

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotSupported is wrapped by every error that means "vhost-net cannot be
// used here" (no /dev/vhost-net, no permission, too old a kernel, an
// architecture this package does not build for), so that callers can fall
// back to plain TAP I/O: errors.Is(err, ErrNotSupported).
var ErrNotSupported = errors.New("vhost-net not supported")

const (
	// DefaultQueueSize is the ring size used when Config.QueueSize is 0.
	DefaultQueueSize = 256
	// DefaultFrameSize fits the largest frame of a 65520-byte MTU (pasta's
	// default) plus the virtio-net header in one buffer.
	DefaultFrameSize = 65536 + vnetHdrLen
	// DefaultPoll is how long ReadBatch watches an empty queue before it
	// asks the kernel for a call.
	DefaultPoll = 20 * time.Microsecond

	minFrameSize = 256
	maxFrameSize = 1 << 20
)

// Config describes the device Open builds.
type Config struct {
	// TapFd is a TAP opened with IFF_TAP|IFF_NO_PI|IFF_VNET_HDR. Open sets
	// its vnet header size to 12 (TUNSETVNETHDRSZ). Device never closes it.
	TapFd int
	// QueueSize is the number of descriptors per queue, a power of two up
	// to MaxQueueSize; 0 means DefaultQueueSize.
	QueueSize int
	// FrameSize is the buffer behind each descriptor, header included; 0
	// means DefaultFrameSize. When the kernel offers MRG_RXBUF (all do) a
	// received frame may span several buffers, and a sent frame always
	// may, so smaller buffers only cost more descriptors per large frame.
	FrameSize int
	// RXFromTap reads received frames with readv(2) on the TAP instead of
	// through the vhost RX queue; WriteBatch still uses vhost.
	RXFromTap bool
	// PassHdr hands the virtio-net header to the caller: frames from
	// ReadBatch and to WriteBatch begin with its 12 bytes (num_buffers is
	// the device's business and may hold anything on RX). The caller then
	// owns checksum and segmentation offload: with TUNSETOFFLOAD on the
	// TAP, the namespace's 64 KiB TSO frames and partial checksums reach it
	// as they are, and its GSO frames go in whole. Without PassHdr, RX
	// strips the header and TX writes a zeroed one (no offloads).
	PassHdr bool
	// Poll bounds the busy wait on an empty RX queue before re-arming the
	// call: 0 means DefaultPoll, negative disables polling.
	Poll time.Duration
}

func (c *Config) setDefaults() error {
	if c.TapFd < 0 {
		return fmt.Errorf("vhostkern: TAP fd %d", c.TapFd)
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.QueueSize < 2 || c.QueueSize > 32768 || c.QueueSize&(c.QueueSize-1) != 0 {
		return fmt.Errorf("vhostkern: queue size %d: want a power of two from 2 to 32768", c.QueueSize)
	}
	if c.FrameSize == 0 {
		c.FrameSize = DefaultFrameSize
	}
	if c.FrameSize < minFrameSize || c.FrameSize > maxFrameSize {
		return fmt.Errorf("vhostkern: frame size %d: want %d to %d bytes", c.FrameSize, minFrameSize, maxFrameSize)
	}
	if c.Poll == 0 {
		c.Poll = DefaultPoll
	}
	return nil
}
