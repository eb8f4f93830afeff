package tap

// Batched frame I/O on the TAP: ReadBatch and WriteBatch, allocating
// nothing.

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/sock"
)

// ReadBatch reads frames into bufs until the queue is empty or bufs (or
// sizes) run out, storing each frame's length in sizes. An empty queue is
// not an error: it returns the count so far (possibly 0) and nil, and the
// caller waits on Fd. The kernel silently truncates a frame longer than
// its buffer (sizes[i] == len(bufs[i]), rest lost), so buffers must be
// larger than the largest frame: MTU+14 plus the vnet header, or 64 KiB
// plus the header once GSO offloads are on.
//
// It allocates nothing: the errno values it sees are preallocated by
// x/sys/unix, and the frames land in the caller's buffers. The reads are
// raw system calls (sock.Read), as the event loop's calls are.
func (d *Device) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	n := min(len(bufs), len(sizes))
	for i := 0; i < n; {
		m, err := sock.Read(d.fd, bufs[i])
		switch err {
		case nil:
			sizes[i] = m
			i++
		case unix.EINTR:
		case unix.EAGAIN:
			return i, nil
		default:
			return i, &IOError{Op: "read", Name: d.name, Err: err}
		}
	}
	return n, nil
}

// WriteBatch writes each frame in bufs to the namespace. A full queue
// (EAGAIN, ENOBUFS) stops the batch early with a nil error, and the caller
// retries the rest when it sees fit. Any other error stops the batch too
// and is returned with the count of frames written before it; the failed
// frame is bufs[n].
func (d *Device) WriteBatch(bufs [][]byte) (int, error) {
	for i := 0; i < len(bufs); {
		_, err := sock.Write(d.fd, bufs[i])
		switch err {
		case nil:
			i++
		case unix.EINTR:
		case unix.EAGAIN, unix.ENOBUFS:
			return i, nil
		default:
			return i, &IOError{Op: "write", Name: d.name, Err: err}
		}
	}
	return len(bufs), nil
}

// IOError is a read or write failure on the TAP. It is only built on the
// error path, so the fast path stays allocation-free.
type IOError struct {
	Op   string
	Name string
	Err  error
}

func (e *IOError) Error() string { return fmt.Sprintf("tap: %s %s: %v", e.Op, e.Name, e.Err) }

func (e *IOError) Unwrap() error { return e.Err }
