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
	// returning how many it read. With nothing waiting it returns 0, nil
	// (the descriptor is non-blocking); the caller waits on Fd.
	ReadBatch(bufs [][]byte, sizes []int) (n int, err error)
	// WriteBatch sends the frames in bufs, returning how many went out. A
	// full queue returns a count below len(bufs) and a nil error.
	WriteBatch(bufs [][]byte) (n int, err error)
	// Fd is readable (epoll) when frames wait to be read.
	Fd() int
	Close() error
}
