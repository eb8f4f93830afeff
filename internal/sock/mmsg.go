package sock

// Batches of datagrams for recvmmsg and sendmmsg, one datagram per message
// (GSOBatch sends runs of them as one).

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/faults"
)

// Mmsg is recvmmsg(2) or sendmmsg(2) (trap SYS_RECVMMSG, SYS_SENDMMSG) on
// msgs: one system call, no allocation (x/sys/unix wraps neither), raw
// (raw.go), so flags must include MSG_DONTWAIT on a blocking socket. It
// returns how many messages went through; no messages is no call.
func Mmsg(trap uintptr, fd int, msgs []unix.Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	site := faults.Recvmmsg
	if trap == unix.SYS_SENDMMSG {
		site = faults.Sendmmsg
	}
	if err := faults.At(site); err != nil {
		return 0, err
	}
	r, _, e := unix.RawSyscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// pktInfoSpace holds one IP_PKTINFO or IPV6_PKTINFO control message with
// room to spare.
const pktInfoSpace = 64

// RecvBatch is a message array for recvmmsg, one datagram per message,
// each into a buffer of the caller's. Made with room for addresses, it
// also takes each datagram's source address and the destination address
// it was sent to (IP_PKTINFO, IPV6_PKTINFO: RecvPktInfo): what a socket
// that is not connected, a forwarded port's listener, needs. It is built
// once and set for every batch without allocating.
type RecvBatch struct {
	// Msgs are the messages. After recvmmsg, Msgs[i].Len is datagram i's
	// length and Msgs[i].Hdr.Flags its flags (MSG_TRUNC: cut short).
	Msgs []unix.Mmsghdr
	// Iovs are the messages' buffers, one each, which a caller may send
	// the datagrams on from (GSOBatch.Fill).
	Iovs  []unix.Iovec
	names []unix.RawSockaddrAny
	ctl   [][pktInfoSpace]byte
}

// NewRecvBatch returns a batch of n messages, with room for each
// datagram's addresses if addrs is set.
func NewRecvBatch(n int, addrs bool) *RecvBatch {
	r := &RecvBatch{Msgs: make([]unix.Mmsghdr, n), Iovs: make([]unix.Iovec, n)}
	if addrs {
		r.names = make([]unix.RawSockaddrAny, n)
		r.ctl = make([][pktInfoSpace]byte, n)
	}
	return r
}

// Set makes message i carry one datagram in b, which must not be empty:
// received into it, or sent from it. It asks for no addresses.
func (r *RecvBatch) Set(i int, b []byte) {
	r.Iovs[i].Base = &b[0]
	r.Iovs[i].SetLen(len(b))
	r.Msgs[i] = unix.Mmsghdr{Hdr: unix.Msghdr{Iov: &r.Iovs[i]}}
	r.Msgs[i].Hdr.SetIovlen(1)
}

// SetFrom is Set for a datagram to receive with its addresses (From,
// To); the batch must have been made with room for them.
func (r *RecvBatch) SetFrom(i int, b []byte) {
	r.Set(i, b)
	h := &r.Msgs[i].Hdr
	h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
	h.Namelen = uint32(unsafe.Sizeof(r.names[i]))
	h.Control = &r.ctl[i][0]
	h.SetControllen(len(r.ctl[i]))
}

// From is the source address of datagram i, received after SetFrom.
func (r *RecvBatch) From(i int) netip.AddrPort { return AddrPortOf(&r.names[i]) }

// To is the address datagram i, received after SetFrom, was sent to, or
// def when its packet information is missing (PktDst).
func (r *RecvBatch) To(i int, def netip.Addr) netip.Addr {
	return PktDst(r.ctl[i][:r.Msgs[i].Hdr.Controllen], def)
}
