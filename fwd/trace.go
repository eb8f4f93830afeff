package fwd

// --trace: a line per group of frames from the namespace and per event on
// a flow's host socket. The hooks cost one branch on a field that is false
// unless the logger takes trace-level records (Engine.trace).

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/logging"
)

// protoName names a transport protocol number for the trace.
func protoName(p uint8) string {
	switch p {
	case header.ProtocolTCP:
		return "TCP"
	case header.ProtocolUDP:
		return "UDP"
	case header.ProtocolICMPv4:
		return "ICMP"
	case header.ProtocolICMPv6:
		return "ICMPv6"
	}
	return fmt.Sprintf("protocol %d", p)
}

// traceFrames logs the frames of one flow in this batch from the
// namespace, e.g. "tap: UDP 192.0.2.1:40000 -> 192.0.2.254:53, 1 frame".
func (e *Engine) traceFrames(pkts []*packet) {
	p := pkts[0]
	src, dst := p.src.String(), p.dst.String()
	if p.proto == header.ProtocolTCP || p.proto == header.ProtocolUDP {
		src = netip.AddrPortFrom(p.src, p.sport).String()
		dst = netip.AddrPortFrom(p.dst, p.dport).String()
	}
	e.log.Log(context.Background(), logging.LevelTrace,
		fmt.Sprintf("tap: %s %s -> %s, %s", protoName(p.proto), src, dst, frames(len(pkts))))
}

// traceSock logs an event on flow idx's host socket, before the
// translator handles it: what the host side sent or did.
func (e *Engine) traceSock(f *Flow, events uint32) {
	ns, dst := f.NSAddr(), f.DstAddr()
	var from, to string
	if f.proto == protoICMP {
		from, to = dst.String(), ns.String()
	} else {
		from, to = netip.AddrPortFrom(dst, f.DstPort).String(), netip.AddrPortFrom(ns, f.NSPort).String()
	}
	e.log.Log(context.Background(), logging.LevelTrace,
		fmt.Sprintf("host socket %d: %s %s -> %s, events %#x", f.Fd, protoName(f.key.proto), from, to, events))
}

func frames(n int) string {
	if n == 1 {
		return "1 frame"
	}
	return fmt.Sprintf("%d frames", n)
}
