package sock

// UDP segmentation offload for both forwarders: the runs one message can
// carry (GSORun), the message array (GSOBatch), and the refusals to fall
// back on (GSORefused).

import (
	"encoding/binary"
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UDP segmentation offload (UDP_SEGMENT, Linux 4.18) for datagrams sent
// on in bulk, by the engine from the namespace's frames and by the splice
// loop from one socket to the other.
//
// The datagrams arrive one at a time, and a bulk sender's are all the same
// size. Sent one per message, each takes its own trip through the host's
// stack: socket buffer, route, netfilter, device queue, and on loopback
// the receive path up to the peer's socket. With UDP_SEGMENT a run of them
// goes as one super-datagram, one trip, and is cut back at the same
// boundaries as late as possible: by the receiving socket's stack on
// loopback (one datagram per segment, as sent, unless the receiver asked
// for UDP_GRO), by the device or just before it otherwise. The receiver
// gets the same datagrams; what is saved is the stack's work per datagram,
// which on a 1400-byte stream is over half of the forwarder's CPU time.
//
// The kernel's rules for one such send: segments of gso_size bytes, the
// last possibly shorter; at most 64 segments (UDP_MAX_SEGMENTS, which
// later kernels raised to 128); one IP packet's worth of payload in all;
// gso_size plus headers within the path MTU. The last one is the host's
// business, and its refusal is GSORefused's to recognise: the caller then
// sends the same datagrams one per message.
const (
	GSOMaxSegs = 64
	// GSOMaxPayload is the most payload one IPv4 packet carries (IPv6's
	// limit is higher): 65535 less the IPv4 and UDP headers.
	GSOMaxPayload = 0xffff - 20 - 8
)

// gsoCtlSpace is the room one UDP_SEGMENT control message takes: a cmsghdr
// and its uint16 segment size, padded.
var gsoCtlSpace = unix.CmsgSpace(2)

// GSORun returns how many datagrams, from iov[0] on (one payload each),
// one UDP_SEGMENT message can carry: a run of the first one's size, then
// at most one shorter, within the kernel's limits. An empty datagram has
// no segment size and goes alone.
func GSORun(iov []unix.Iovec) int {
	seg := int(iov[0].Len)
	if seg == 0 {
		return 1
	}
	total, k := seg, 1
	for k < len(iov) && k < GSOMaxSegs {
		l := int(iov[k].Len)
		if l == 0 || l > seg || total+l > GSOMaxPayload {
			break
		}
		total += l
		k++
		if l < seg {
			break
		}
	}
	return k
}

// GSOBatch is a sendmmsg message array over a batch of datagrams, each
// message one datagram or a run of them (GSORun) with a UDP_SEGMENT control
// message. It is built once and refilled for every batch without
// allocating.
type GSOBatch struct {
	// Msgs are the messages of the last Fill, from slot 0.
	Msgs []unix.Mmsghdr
	// ctl holds one control message per slot, its header written once:
	// Fill only sets the segment size.
	ctl []byte
}

// NewGSOBatch returns a batch of room for n messages.
func NewGSOBatch(n int) *GSOBatch {
	b := &GSOBatch{Msgs: make([]unix.Mmsghdr, n), ctl: make([]byte, n*gsoCtlSpace)}
	for i := range n {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b.ctl[i*gsoCtlSpace]))
		h.Level = unix.SOL_UDP
		h.Type = unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
	}
	return b
}

// Fill makes Msgs[:m] send the datagrams of iov (one payload each, at most
// len(Msgs) of them), in runs when gso is set and one per message
// otherwise, and returns m. The messages point into iov, which must stay
// as it is until they are sent.
func (b *GSOBatch) Fill(iov []unix.Iovec, gso bool) int {
	m := 0
	for i := 0; i < len(iov); m++ {
		k := 1
		if gso {
			k = GSORun(iov[i:])
		}
		h := &b.Msgs[m].Hdr
		*h = unix.Msghdr{Iov: &iov[i]}
		h.SetIovlen(k)
		if k > 1 {
			c := b.ctl[m*gsoCtlSpace : (m+1)*gsoCtlSpace]
			binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(iov[i].Len))
			h.Control = &c[0]
			h.SetControllen(len(c))
		}
		i += k
	}
	return m
}

// Datagrams returns how many datagrams msgs carry.
func Datagrams(msgs []unix.Mmsghdr) int {
	n := 0
	for i := range msgs {
		n += int(msgs[i].Hdr.Iovlen)
	}
	return n
}

// GSORefused reports whether err, from sending msg, is the host's refusal
// of segmentation offload, where the same datagrams sent singly may go: a
// kernel without UDP_SEGMENT, or a socket with checksums off (EINVAL,
// ENOPROTOOPT), a device without checksum offload on older kernels or a
// route through IPsec (EIO), a segment size beyond the path MTU (EINVAL,
// EMSGSIZE on newer kernels). A message of one datagram asks for no
// offload and is never refused this way.
func GSORefused(msg *unix.Mmsghdr, err error) bool {
	var en unix.Errno
	if msg.Hdr.Controllen == 0 || !errors.As(err, &en) {
		return false
	}
	switch en {
	case unix.EINVAL, unix.EIO, unix.EMSGSIZE, unix.ENOPROTOOPT, unix.EOPNOTSUPP:
		return true
	}
	return false
}
