package fwd

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
)

// benchTCP opens a flow from the "namespace" to srv through a real host
// socket and returns its index; the engine writes to a discarding link.
func benchTCP(b *testing.B, port uint16) (*Engine, int32) {
	l := newFakeLink(b)
	e, err := New(&discardLink{l}, testParams(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	e.updateClock()
	e.handleFrames([][]byte{tcpFrame(ns4, gw4, 45000, port, 1000, 0, header.TCPFlagSYN, 65535, synOpts(1460, 7), nil)})
	idx := e.ft.active[0]
	tr := e.tr[protoTCP].(*tcpTr)
	ev := make([]unix.EpollEvent, 8)
	deadline := time.Now().Add(5 * time.Second)
	for tr.conn(idx).state == tcpConnecting {
		if time.Now().After(deadline) {
			b.Fatal("connect did not complete")
		}
		n, _ := unix.EpollWait(e.epfd, ev, 10)
		for i := range ev[:max(n, 0)] {
			if ev[i].Fd >= 0 {
				e.sockEvent(ev[i].Fd, uint32(ev[i].Pad), ev[i].Events)
			}
		}
	}
	c := tr.conn(idx)
	e.handleFrames([][]byte{tcpFrame(ns4, gw4, 45000, port, 1001, uint32(c.isn)+1, header.TCPFlagACK, 65535, nil, nil)})
	e.flush()
	if c.state != tcpEstablished {
		b.Fatalf("state %d, want established", c.state)
	}
	return e, idx
}

// setSeg rewrites a prepared segment's sequence and acknowledgement
// numbers and its checksum in place.
func setSeg(f []byte, seq, ack uint32) {
	th := header.TCP(f[34:])
	binary.BigEndian.PutUint32(th[4:], seq)
	binary.BigEndian.PutUint32(th[8:], ack)
	th.SetChecksum(0)
	ip := header.IPv4(f[14:])
	th.SetChecksum(th.CalculateChecksum(header.PseudoHeaderChecksum(header.ProtocolTCP, ip.SrcSlice(), ip.DstSlice(), uint32(len(th)))))
}

// BenchmarkTCPToHost: batches of 32 data segments from the namespace into
// one sendmsg to a loopback sink; steady state must not allocate.
func BenchmarkTCPToHost(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	e, idx := benchTCP(b, uint16(ln.Addr().(*net.TCPAddr).Port))
	c := e.tr[protoTCP].(*tcpTr).conn(idx)
	const segs, size = 32, 1400
	batch := make([][]byte, segs)
	for i := range batch {
		batch[i] = tcpFrame(ns4, gw4, 45000, uint16(ln.Addr().(*net.TCPAddr).Port), 0, 0, header.TCPFlagACK, 65535, nil, make([]byte, size))
	}
	b.ReportAllocs()
	b.SetBytes(segs * size)
	for b.Loop() {
		// Start where the engine is: a full send buffer leaves part of a
		// batch unacknowledged, which the next batch resends.
		seq := uint32(c.seqFromNS)
		for i, f := range batch {
			setSeg(f, seq+uint32(i*size), uint32(c.seqAckedByNS))
		}
		e.updateClock()
		e.handleFrames(batch)
		e.flush()
	}
}

// BenchmarkTCPToNS: the host writes 16 segments' worth, the engine peeks it
// into frames and the namespace acknowledges it (discarding it from the
// socket); steady state must not allocate.
func BenchmarkTCPToNS(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			acc <- c
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	e, idx := benchTCP(b, port)
	hc := <-acc
	defer hc.Close()
	c := e.tr[protoTCP].(*tcpTr).conn(idx)
	ack := tcpFrame(ns4, gw4, 45000, port, 0, 0, header.TCPFlagACK, 65535, nil, nil)
	acks := [][]byte{ack}
	buf := make([]byte, 16*1400)
	gen := e.flow(idx).gen
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		b.StopTimer()
		hc.Write(buf)
		for inqFd(e.flow(idx).Fd) < len(buf) {
		}
		b.StartTimer()
		e.updateClock()
		e.sockEvent(idx, gen, unix.EPOLLIN)
		e.flush()
		setSeg(ack, uint32(c.seqFromNS), uint32(c.seqToNS))
		e.handleFrames(acks)
		e.flush()
	}
	b.StopTimer()
	if c.seqAckedByNS != c.seqToNS {
		b.Fatalf("unacknowledged data left")
	}
}

func inqFd(fd int) int {
	n, _ := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return n
}
