package fwd

// The -p capture: every frame both ways, as a pcap file.

import (
	"bufio"
	"encoding/binary"
	"io"
	"time"
)

// Standard pcap (not pcapng): what tcpdump -w writes and every tool reads.
const (
	pcapMagicMicros  = 0xa1b2c3d4
	pcapLinkEthernet = 1
	pcapSnapLen      = 262144
	// pcapBufSize batches small frames into few writes; the engine also
	// flushes on every housekeeping tick, so a capture is readable while
	// gopasta runs and at most a second stale.
	pcapBufSize = 1 << 16
)

// pcapWriter appends frames to a pcap stream. Writes go through a buffer
// (one write(2) per 64 KiB instead of one per frame); flush pushes them out.
// Errors stop the capture (counted once and logged by the engine), they
// never stop forwarding.
type pcapWriter struct {
	w   *bufio.Writer
	hdr [16]byte
	err error
}

func newPcapWriter(w io.Writer) (*pcapWriter, error) {
	p := &pcapWriter{w: bufio.NewWriterSize(w, pcapBufSize)}
	var gh [24]byte
	binary.LittleEndian.PutUint32(gh[0:], pcapMagicMicros)
	binary.LittleEndian.PutUint16(gh[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(gh[6:], 4)
	// thiszone and sigfigs stay 0.
	binary.LittleEndian.PutUint32(gh[16:], pcapSnapLen)
	binary.LittleEndian.PutUint32(gh[20:], pcapLinkEthernet)
	if _, err := p.w.Write(gh[:]); err != nil {
		return nil, err
	}
	return p, p.w.Flush()
}

// frame records one Ethernet frame seen at t.
func (p *pcapWriter) frame(t time.Time, b []byte) {
	if p.err != nil {
		return
	}
	n := len(b)
	if n > pcapSnapLen {
		n = pcapSnapLen
	}
	us := t.UnixMicro()
	binary.LittleEndian.PutUint32(p.hdr[0:], uint32(us/1e6))
	binary.LittleEndian.PutUint32(p.hdr[4:], uint32(us%1e6))
	binary.LittleEndian.PutUint32(p.hdr[8:], uint32(n))
	binary.LittleEndian.PutUint32(p.hdr[12:], uint32(len(b)))
	if _, err := p.w.Write(p.hdr[:]); err != nil {
		p.err = err
		return
	}
	if _, err := p.w.Write(b[:n]); err != nil {
		p.err = err
	}
}

func (p *pcapWriter) flush() error {
	if p.err != nil {
		return p.err
	}
	if p.w.Buffered() > 0 {
		p.err = p.w.Flush()
	}
	return p.err
}
