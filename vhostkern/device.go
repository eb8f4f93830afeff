//go:build linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm)

package vhostkern

// The Device: /dev/vhost-net wired to the TAP (memory table, queues,
// eventfds), the fwd.Link methods, Close, and Probe.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	rxQueueIndex = 0 // device -> driver: what the namespace sends
	txQueueIndex = 1 // driver -> device: what we deliver into the namespace
)

// testStartIdx, when set by a test, starts both rings at this index so that
// a short run crosses the 65535 -> 0 wrap in the real kernel.
var testStartIdx uint16

// Device is a vhost-net instance attached to a TAP. ReadBatch and
// WriteBatch may run concurrently with each other (they use separate
// queues) but each must not run concurrently with itself or with Close.
type Device struct {
	cfg      Config
	vhost    int
	offered  uint64
	acked    uint64
	mem      []byte
	rx       *rxQueue // nil with RXFromTap
	tx       *txQueue
	kickFd   [2]int
	callFd   [2]int
	attached [2]bool
	stats    counters
	kickBuf  [8]byte // eventfd increments of 1, preallocated
	rxIov    [2]unix.Iovec
	rxHdr    [vnetHdrLen]byte
	closed   bool
}

// Open wires a fresh /dev/vhost-net instance to cfg.TapFd. Errors caused by
// vhost-net being absent or unusable wrap ErrNotSupported. The TAP fd stays
// the caller's: Close does not close it.
func Open(cfg Config) (d *Device, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := checkTap(cfg.TapFd); err != nil {
		return nil, err
	}
	d = &Device{cfg: cfg, vhost: -1, kickFd: [2]int{-1, -1}, callFd: [2]int{-1, -1}}
	binary.NativeEndian.PutUint64(d.kickBuf[:], 1)
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	if d.vhost, err = openVhost(); err != nil {
		return nil, err
	}
	if err = d.ioctl("VHOST_SET_OWNER", vhostSetOwner, nil); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	if err = d.ioctl("VHOST_GET_FEATURES", vhostGetFeatures, unsafe.Pointer(&d.offered)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	if d.offered&FeatureVersion1 == 0 {
		return nil, fmt.Errorf("%w: kernel offers %s, without VERSION_1", ErrNotSupported, FeatureString(d.offered))
	}
	d.acked = FeatureVersion1 | d.offered&(FeatureMrgRxbuf|FeatureEventIdx)
	if err = d.ioctl("VHOST_SET_FEATURES", vhostSetFeatures, unsafe.Pointer(&d.acked)); err != nil {
		return nil, err
	}
	if err = d.setupMemory(); err != nil {
		return nil, err
	}
	if err = d.setupQueues(); err != nil {
		return nil, err
	}
	if cfg.RXFromTap {
		// Nothing else reads the TAP, and ReadBatch must not block.
		if err = unix.SetNonblock(cfg.TapFd, true); err != nil {
			return nil, fmt.Errorf("vhostkern: TAP O_NONBLOCK: %w", err)
		}
		d.rxIov[0].Base = &d.rxHdr[0]
		d.rxIov[0].SetLen(vnetHdrLen)
	}
	return d, nil
}

func openVhost() (int, error) {
	fd, err := unix.Open("/dev/vhost-net", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: open /dev/vhost-net: %w", ErrNotSupported, err)
	}
	return fd, nil
}

// checkTap insists on a TAP with IFF_VNET_HDR and without packet info:
// otherwise the kernel would read our virtio-net header as frame bytes.
// Setting the header size here makes Open independent of how the caller
// opened the TAP.
func checkTap(fd int) error {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		return fmt.Errorf("vhostkern: TUNGETIFF on fd %d (not a TAP?): %w", fd, err)
	}
	const need = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	if fl := ifr.Uint16(); fl&need != need || fl&unix.IFF_TUN != 0 {
		return fmt.Errorf("vhostkern: %s has flags %#x: want a TAP with IFF_NO_PI|IFF_VNET_HDR", ifr.Name(), fl)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
		return fmt.Errorf("vhostkern: TUNSETVNETHDRSZ %d: %w", vnetHdrLen, err)
	}
	return nil
}

func (d *Device) ioctl(name string, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(d.vhost), req, uintptr(arg)); e != 0 {
		return fmt.Errorf("vhostkern: %s: %w", name, e)
	}
	return nil
}

func (d *Device) queueIoctl(q int, name string, req uintptr, arg unsafe.Pointer) error {
	if err := d.ioctl(name, req, arg); err != nil {
		return fmt.Errorf("queue %d: %w", q, err)
	}
	return nil
}

// setupMemory maps the one area holding both rings and both buffer sets:
//
//	[ring 0][ring 1][RX slots ... ][TX slots ...]
//
// and registers it as the device's whole "guest memory", identity mapped.
func (d *Device) setupMemory() error {
	num := d.cfg.QueueSize
	size := alignUp(areaSize(num, d.cfg.FrameSize), unix.Getpagesize())
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("vhostkern: mmap %d bytes: %w", size, err)
	}
	d.mem = mem
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	table := vhostMemory1{Nregions: 1}
	table.Regions[0] = vhostMemoryRegion{GuestPhysAddr: base, MemorySize: uint64(size), UserspaceAddr: base}
	if err := d.ioctl("VHOST_SET_MEM_TABLE", vhostSetMemTable, unsafe.Pointer(&table)); err != nil {
		return err
	}
	d.rx, d.tx, err = newQueues(mem, base, num, d.cfg.FrameSize, d.acked, !d.cfg.RXFromTap, testStartIdx, &d.stats)
	if err != nil {
		return err
	}
	d.tx.keepHdr = d.cfg.PassHdr
	if d.rx != nil {
		d.rx.keepHdr = d.cfg.PassHdr
		d.rx.poll = d.cfg.Poll
		d.rx.kick = func() error { return d.kick(rxQueueIndex) }
		d.rx.drainCall = func() (uint64, error) { return d.drainCall(rxQueueIndex) }
	}
	d.tx.kick = func() error { return d.kick(txQueueIndex) }
	d.tx.drainCall = func() (uint64, error) { return d.drainCall(txQueueIndex) }
	return nil
}

// setupQueues describes each ring to the kernel, gives it eventfds, fills
// the RX ring and attaches the TAP. With RXFromTap queue 0 gets no backend,
// so the kernel never polls the TAP for frames and read(2) gets them all.
func (d *Device) setupQueues() error {
	type q struct {
		idx int
		r   *ring
	}
	qs := []q{{txQueueIndex, d.tx.r}}
	if d.rx != nil {
		qs = []q{{rxQueueIndex, d.rx.r}, {txQueueIndex, d.tx.r}}
	}
	for _, x := range qs {
		var err error
		for _, p := range []*int{&d.kickFd[x.idx], &d.callFd[x.idx]} {
			if *p, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
				return fmt.Errorf("vhostkern: eventfd: %w", err)
			}
		}
		i := uint32(x.idx)
		num := vhostVringState{Index: i, Num: uint32(x.r.num)}
		base := vhostVringState{Index: i, Num: uint32(testStartIdx)}
		addr := vhostVringAddr{Index: i,
			DescUserAddr:  x.r.addr(x.r.desc),
			AvailUserAddr: x.r.addr(x.r.avail),
			UsedUserAddr:  x.r.addr(x.r.used)}
		kick := vhostVringFile{Index: i, Fd: int32(d.kickFd[x.idx])}
		call := vhostVringFile{Index: i, Fd: int32(d.callFd[x.idx])}
		for _, st := range []struct {
			name string
			req  uintptr
			arg  unsafe.Pointer
		}{
			{"VHOST_SET_VRING_NUM", vhostSetVringNum, unsafe.Pointer(&num)},
			{"VHOST_SET_VRING_BASE", vhostSetVringBase, unsafe.Pointer(&base)},
			{"VHOST_SET_VRING_ADDR", vhostSetVringAddr, unsafe.Pointer(&addr)},
			{"VHOST_SET_VRING_KICK", vhostSetVringKick, unsafe.Pointer(&kick)},
			{"VHOST_SET_VRING_CALL", vhostSetVringCall, unsafe.Pointer(&call)},
		} {
			if err := d.queueIoctl(x.idx, st.name, st.req, st.arg); err != nil {
				return err
			}
		}
	}
	if d.rx != nil {
		if err := d.rx.refill(); err != nil {
			return err
		}
	}
	for _, x := range qs {
		be := vhostVringFile{Index: uint32(x.idx), Fd: int32(d.cfg.TapFd)}
		if err := d.queueIoctl(x.idx, "VHOST_NET_SET_BACKEND", vhostNetSetBackend, unsafe.Pointer(&be)); err != nil {
			return err
		}
		d.attached[x.idx] = true
	}
	if d.rx != nil {
		// The backend starts with the ring already full; one kick makes the
		// kernel look at it regardless of what avail_event said.
		return d.kick(rxQueueIndex)
	}
	return nil
}

func (d *Device) kick(q int) error {
	for {
		_, err := unix.Write(d.kickFd[q], d.kickBuf[:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			// The counter is near overflow: the kernel has plenty of
			// kicks pending, so this one adds nothing.
			return nil
		}
		return err
	}
}

// drainCall resets the call eventfd and returns how many signals it held.
func (d *Device) drainCall(q int) (uint64, error) {
	var b [8]byte
	for {
		_, err := unix.Read(d.callFd[q], b[:])
		switch err {
		case nil:
			return binary.NativeEndian.Uint64(b[:]), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, nil
		default:
			return 0, err
		}
	}
}

// ReadBatch fills bufs with frames the namespace sent, Ethernet without
// the virtio-net header (with it, under Config.PassHdr), and their lengths
// into sizes. Fewer frames than len(bufs), 0 included, means the queue ran
// dry and Fd becomes readable when something arrives; a full bufs means
// there may be more, and the caller must call again before waiting on Fd.
// From the vhost RX queue, a frame longer than its buffer is dropped and
// counted in Stats.RxDropped; read from the TAP (Config.RXFromTap, the
// default), the kernel truncates it to the buffer instead, as a TAP read
// does, and nothing is counted here.
func (d *Device) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	if d.closed {
		return 0, unix.EBADF
	}
	if d.rx != nil {
		return d.rx.read(bufs, sizes)
	}
	return d.readTap(bufs, sizes)
}

// readTap is ReadBatch with RXFromTap: readv(2) puts the header aside and
// the frame straight into the caller's buffer.
func (d *Device) readTap(bufs [][]byte, sizes []int) (n int, err error) {
	for n < len(bufs) && n < len(sizes) {
		if len(bufs[n]) == 0 {
			break
		}
		d.rxIov[1].Base = &bufs[n][0]
		d.rxIov[1].SetLen(len(bufs[n]))
		// With PassHdr the header lands in the caller's buffer too.
		iov, cnt := &d.rxIov[0], 2
		if d.cfg.PassHdr {
			iov, cnt = &d.rxIov[1], 1
		}
		r, _, e := unix.Syscall(unix.SYS_READV, uintptr(d.cfg.TapFd), uintptr(unsafe.Pointer(iov)), uintptr(cnt))
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			break
		}
		if e != 0 {
			err = fmt.Errorf("vhostkern: TAP readv: %w", e)
			break
		}
		if int(r) < vnetHdrLen+MinFrameLen {
			continue
		}
		sizes[n] = int(r)
		if !d.cfg.PassHdr {
			sizes[n] -= vnetHdrLen
		}
		n++
	}
	d.rxIov[1].Base = nil // do not keep the caller's buffer alive
	d.stats.rxFrames.Add(uint64(n))
	return n, err
}

// WriteBatch sends frames (Ethernet; behind their virtio-net header under
// Config.PassHdr) into the namespace. It returns fewer than len(bufs) with
// a nil error when the queue is full; then WriteFd becomes readable once
// the kernel has sent half of what is queued.
// An invalid frame stops the batch with a *FrameLenError.
func (d *Device) WriteBatch(bufs [][]byte) (int, error) {
	if d.closed {
		return 0, unix.EBADF
	}
	return d.tx.write(bufs)
}

// Fd is readable when ReadBatch has frames: the RX call eventfd, or the TAP
// itself with RXFromTap.
func (d *Device) Fd() int {
	if d.rx == nil {
		return d.cfg.TapFd
	}
	return d.callFd[rxQueueIndex]
}

// WriteFd is the TX call eventfd, readable after a short WriteBatch once
// the queue has room again.
func (d *Device) WriteFd() int { return d.callFd[txQueueIndex] }

// Offered returns the features the kernel offered, Features those in use.
func (d *Device) Offered() uint64  { return d.offered }
func (d *Device) Features() uint64 { return d.acked }

// Stats returns the counters; safe from any goroutine.
func (d *Device) Stats() Stats { return d.stats.snapshot() }

// Close detaches the TAP and releases the device, eventfds and memory. The
// kernel stops touching the memory once the vhost fd is closed, so the
// mapping goes last.
func (d *Device) Close() error {
	if d == nil || d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for q := range d.attached {
		if d.attached[q] {
			be := vhostVringFile{Index: uint32(q), Fd: -1}
			errs = append(errs, d.queueIoctl(q, "VHOST_NET_SET_BACKEND", vhostNetSetBackend, unsafe.Pointer(&be)))
		}
	}
	if d.vhost >= 0 {
		errs = append(errs, unix.Close(d.vhost))
	}
	for _, fd := range [...]int{d.kickFd[0], d.kickFd[1], d.callFd[0], d.callFd[1]} {
		if fd >= 0 {
			errs = append(errs, unix.Close(fd))
		}
	}
	if d.mem != nil {
		errs = append(errs, unix.Munmap(d.mem))
		d.mem = nil
	}
	return errors.Join(errs...)
}

// Probe reports whether Open can work here: /dev/vhost-net opens, accepts
// an owner and offers VERSION_1. The error wraps ErrNotSupported and says why.
func Probe() error {
	fd, err := openVhost()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	d := &Device{vhost: fd}
	if err := d.ioctl("VHOST_SET_OWNER", vhostSetOwner, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	var f uint64
	if err := d.ioctl("VHOST_GET_FEATURES", vhostGetFeatures, unsafe.Pointer(&f)); err != nil {
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	if f&FeatureVersion1 == 0 {
		return fmt.Errorf("%w: kernel offers %s, without VERSION_1", ErrNotSupported, FeatureString(f))
	}
	return nil
}
