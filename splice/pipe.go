package splice

// The pipes spliced TCP moves bytes through: their size, probed once, and
// the pool that reuses them.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/faults"
	"github.com/gopasta/gopasta/internal/sock"
)

// DefaultPipeSize is the F_SETPIPE_SZ target. A bigger pipe means fewer
// splice calls per byte; 1 MiB is also Linux's default pipe-max-size, the
// ceiling for unprivileged processes.
const DefaultPipeSize = 1 << 20

// minPipeSize is where probing gives up and keeps the kernel default.
const minPipeSize = 64 << 10

// pipe is one kernel pipe used as the buffer of one direction of one
// connection. n counts bytes inside it, so a pipe is only reused empty.
type pipe struct {
	r, w int
	size int // capacity in bytes as reported by F_GETPIPE_SZ
	n    int // bytes spliced in but not yet out
}

// pipePool keeps drained pipes for reuse: two pipe2 + two fcntl calls per
// new connection are worth saving. It is bounded so that idle pipes do not
// pin fds and pipe-buffer accounting forever.
type pipePool struct {
	mu     sync.Mutex
	target int // size we ask each new pipe for
	free   []*pipe
	max    int
	closed bool

	created, reused uint64 // for tests and Stats
}

// probePipeSize finds the largest pipe size at most want that this process
// may set: pipe-max-size bounds unprivileged processes, and hitting the
// per-user pipe page limit makes F_SETPIPE_SZ fail with EPERM.
func probePipeSize(want int) (int, error) {
	if want <= 0 {
		want = DefaultPipeSize
	}
	if max := pipeMaxSize(); max > 0 && want > max && os.Geteuid() != 0 {
		want = max
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return 0, fmt.Errorf("splice: pipe2: %w", err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	for size := want; size >= minPipeSize; size /= 2 {
		if got, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, size); err == nil {
			return got, nil
		}
	}
	got, err := unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		return 0, fmt.Errorf("splice: F_GETPIPE_SZ: %w", err)
	}
	return got, nil
}

func pipeMaxSize() int {
	b, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}

func newPipePool(target, max int) *pipePool {
	return &pipePool{target: target, max: max}
}

// get returns an empty pipe, reused or new.
func (pp *pipePool) get() (*pipe, error) {
	pp.mu.Lock()
	if pp.closed {
		pp.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(pp.free); n > 0 {
		p := pp.free[n-1]
		pp.free[n-1] = nil
		pp.free = pp.free[:n-1]
		pp.reused++
		pp.mu.Unlock()
		return p, nil
	}
	pp.created++
	pp.mu.Unlock()

	var fds [2]int
	if err := faults.At(faults.Pipe2); err != nil {
		return nil, fmt.Errorf("splice: pipe2: %w", err)
	}
	if err := sock.Pipe2(&fds); err != nil {
		return nil, fmt.Errorf("splice: pipe2: %w", err)
	}
	p := &pipe{r: fds[0], w: fds[1]}
	// Over the per-user pipe page limit the resize fails; a smaller pipe
	// still works, just with more splice calls.
	size, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, pp.target)
	if err != nil {
		size, err = unix.FcntlInt(uintptr(p.w), unix.F_GETPIPE_SZ, 0)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("splice: F_GETPIPE_SZ: %w", err)
		}
	}
	p.size = size
	return p, nil
}

// put takes a pipe back. A pipe with bytes left in it is closed instead of
// pooled: stale bytes must never leak into another connection.
func (pp *pipePool) put(p *pipe) {
	if p == nil {
		return
	}
	pp.mu.Lock()
	if p.n != 0 || pp.closed || len(pp.free) >= pp.max {
		pp.mu.Unlock()
		p.close()
		return
	}
	pp.free = append(pp.free, p)
	pp.mu.Unlock()
}

// drain closes the idle pipes: out of descriptors, the two each holds are
// worth more to a connection than to the cache.
func (pp *pipePool) drain() {
	pp.mu.Lock()
	free := pp.free
	pp.free = nil
	pp.mu.Unlock()
	for _, p := range free {
		p.close()
	}
}

func (pp *pipePool) close() {
	pp.mu.Lock()
	free := pp.free
	pp.free = nil
	pp.closed = true
	pp.mu.Unlock()
	for _, p := range free {
		p.close()
	}
}

func (pp *pipePool) counts() (created, reused uint64, idle int) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.created, pp.reused, len(pp.free)
}

func (p *pipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
	p.r, p.w = -1, -1
}
