// Package fwd is gopasta's engine: the event loop, the flow table, the
// forwarding rules and the per-protocol translators that turn the
// namespace's Ethernet frames into host socket operations and back.
package fwd

// A Link carries Ethernet frames between gopasta and the namespace. The TAP
// device (package tap) and the vhost-net offload (package vhostkern) both
// implement it, so the engine never knows which one it has.
//
// Implementations reuse the caller's buffers and allocate nothing per call.
type Link interface {
	// ReadBatch fills bufs[i] with frames and sizes[i] with their lengths,
	// returning how many it read. Fewer than len(bufs) (0 included) means
	// nothing more waits and Fd will be readable when something arrives.
	// All of bufs filled means there may be more, and the caller must call
	// again before it relies on Fd: vhost-net's call eventfd only fires for
	// frames that land after the queue was seen empty.
	ReadBatch(bufs [][]byte, sizes []int) (n int, err error)
	// WriteBatch sends the frames in bufs, returning how many went out. A
	// full queue returns a count below len(bufs) and a nil error.
	WriteBatch(bufs [][]byte) (n int, err error)
	// Fd is readable (epoll) when frames arrived after a short ReadBatch.
	Fd() int
	Close() error
}
