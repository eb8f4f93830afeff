package fwd

// Frames toward the namespace: the transmit queue of preallocated buffers,
// their headers, and one WriteBatch per cycle.

import (
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"
)

// txFrames is how many frames the engine queues toward the namespace before
// it must flush: one WriteBatch per cycle normally carries all of them, and
// a cycle that produces more flushes early instead of dropping.
const txFrames = 128

// txQueue holds frames for the link in preallocated buffers. Producers ask
// for a buffer (txBuf/txBufs), write a frame into it in place, and commit
// its length; recvmmsg fills the buffers' payload area directly, so host
// data is copied once, by the kernel.
//
// With a virtio-net header on the link (Options.VnetHdr), every buffer has
// that header's room in front of the frame area producers see, filled at
// flush time from the frame's offload metadata: producers never shift a
// frame to make room.
type txQueue struct {
	bufs [][]byte                    // txFrames frame areas of frameMax bytes
	full [][]byte                    // the same buffers with the header room in front
	meta []header.VirtioNetHdrFields // offload state of each committed frame
	out  [][]byte                    // committed frames: prefixes of bufs[:len(out)]
	wire [][]byte                    // what goes to the link: out with headers in front
}

func (e *Engine) initTx() {
	stride := e.vnet + e.frameMax
	e.tx.bufs = make([][]byte, txFrames)
	e.tx.full = make([][]byte, txFrames)
	e.tx.meta = make([]header.VirtioNetHdrFields, txFrames)
	backing := make([]byte, txFrames*stride)
	for i := range e.tx.bufs {
		b := backing[i*stride : (i+1)*stride : (i+1)*stride]
		e.tx.full[i] = b
		e.tx.bufs[i] = b[e.vnet:]
	}
	e.tx.out = make([][]byte, 0, txFrames)
	e.tx.wire = make([][]byte, 0, txFrames)
}

// txBuf returns the next free buffer (frameMax bytes), flushing first when
// the queue is full.
func (e *Engine) txBuf() []byte {
	if len(e.tx.out) == txFrames {
		e.flush()
	}
	return e.tx.bufs[len(e.tx.out)]
}

// txBufs returns up to n free buffers, flushing first when none is free.
// Commit them in order with txCommit.
func (e *Engine) txBufs(n int) [][]byte {
	if len(e.tx.out) == txFrames {
		e.flush()
	}
	free := txFrames - len(e.tx.out)
	if n > free {
		n = free
	}
	return e.tx.bufs[len(e.tx.out) : len(e.tx.out)+n]
}

// txDataValid is the offload state of a frame whose checksums are complete:
// the namespace's kernel may skip verifying them.
var txDataValid = header.VirtioNetHdrFields{Flags: header.VirtioNetHdrFDataValid}

// txCommit queues the next buffer, holding a complete frame of n bytes.
func (e *Engine) txCommit(n int) {
	e.txCommitMeta(n, &txDataValid)
}

// txCommitMeta queues the next buffer, holding a frame of n bytes whose
// offload state (a partial checksum, a GSO super-frame) is m. Only with a
// virtio-net header on the link may m ask for offloads.
func (e *Engine) txCommitMeta(n int, m *header.VirtioNetHdrFields) {
	i := len(e.tx.out)
	e.tx.meta[i] = *m
	e.tx.out = append(e.tx.out, e.tx.bufs[i][:n])
}

// txCommitFrom commits bs[i], one of the buffers txBufs returned as bs,
// after w of them were committed already: recvmmsg fills several buffers at
// once and some of what it returns is dropped, so the kept ones are swapped
// down into queue order (slice headers only, no copy).
func (e *Engine) txCommitFrom(bs [][]byte, i, w, n int, m *header.VirtioNetHdrFields) {
	if i != w {
		base := len(e.tx.out) - w // bs[0] is e.tx.bufs[base]
		bs[w], bs[i] = bs[i], bs[w]
		e.tx.full[base+w], e.tx.full[base+i] = e.tx.full[base+i], e.tx.full[base+w]
	}
	e.txCommitMeta(n, m)
}

// flush writes every queued frame to the link in one WriteBatch (more only
// if the link takes them in parts), recording them in the capture first.
// What the link refuses is dropped and counted: holding frames would stall
// every flow behind a namespace that does not read.
func (e *Engine) flush() {
	out := e.tx.out
	if len(out) == 0 {
		return
	}
	if e.pcap != nil {
		for _, f := range out {
			e.pcap.frame(e.nowT, f)
		}
	}
	wire := out
	if e.vnet > 0 {
		wire = e.tx.wire[:0]
		for i, f := range out {
			full := e.tx.full[i][:e.vnet+len(f)]
			header.VirtioNetHdr(full).Encode(&e.tx.meta[i])
			wire = append(wire, full)
		}
	}
	sent := 0
	for sent < len(wire) {
		n, err := e.link.WriteBatch(wire[sent:])
		if n > 0 {
			for _, f := range out[sent : sent+n] {
				e.ctr.bytesOut.Add(uint64(len(f)))
			}
			e.ctr.framesOut.Add(uint64(n))
			sent += n
		}
		if err != nil || n == 0 {
			if err != nil && e.debug {
				e.log.Debug("link write failed", "err", err)
			}
			break
		}
	}
	for range out[sent:] {
		e.drop(DropLinkFull)
	}
	e.tx.out = e.tx.out[:0]
}

// IP header fields of the frames the engine builds. TTL/hop limit 255 as
// pasta: the namespace sees the host side as one hop away at most, and a
// high value keeps its own TTL checks (e.g. GTSM-style) happy.
const (
	outTTL = 255
)

// writeHeaders writes Ethernet and IP headers into b for a packet of l4len
// transport bytes of protocol proto from src to dst (the namespace), and
// returns the transport header's offset. The Ethernet source is src's MAC
// address as the namespace resolved it (the mirrored neighbour table's,
// else ours). IPv4 packets get DF and a fresh ID; the namespace never sees
// fragments from us.
func (e *Engine) writeHeaders(b []byte, v6 bool, proto uint8, src, dst netip.Addr, l4len int) int {
	eth := header.Ethernet(b)
	mac := e.neigh.srcMAC(src)
	if v6 {
		eth.Encode(e.nsMAC[:], mac[:], header.EtherTypeIPv6)
		ip := header.IPv6(b[header.EthernetMinimumSize:])
		ip.Encode(&header.IPv6Fields{
			PayloadLength: uint16(l4len), NextHeader: proto, HopLimit: outTTL,
			Src: src, Dst: dst,
		})
		return header.EthernetMinimumSize + header.IPv6MinimumSize
	}
	eth.Encode(e.nsMAC[:], mac[:], header.EtherTypeIPv4)
	ip := header.IPv4(b[header.EthernetMinimumSize:])
	e.ipID++
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(header.IPv4MinimumSize + l4len), ID: e.ipID,
		Flags: header.IPv4FlagDontFragment, TTL: outTTL, Protocol: proto,
		Src: src, Dst: dst,
	})
	return header.EthernetMinimumSize + header.IPv4MinimumSize
}

// pseudoSum returns the pseudo-header checksum of the packet whose headers
// writeHeaders put in b.
func pseudoSum(b []byte, v6 bool, proto uint8, l4len int) uint16 {
	if v6 {
		ip := header.IPv6(b[header.EthernetMinimumSize:])
		return header.PseudoHeaderChecksum(proto, ip.SrcSlice(), ip.DstSlice(), uint32(l4len))
	}
	ip := header.IPv4(b[header.EthernetMinimumSize:])
	return header.PseudoHeaderChecksum(proto, ip.SrcSlice(), ip.DstSlice(), uint32(l4len))
}

// l4Offset is where the transport header starts in frames we build.
func l4Offset(v6 bool) int {
	if v6 {
		return header.EthernetMinimumSize + header.IPv6MinimumSize
	}
	return header.EthernetMinimumSize + header.IPv4MinimumSize
}
