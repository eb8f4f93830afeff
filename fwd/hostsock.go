package fwd

// The host sockets of flows the namespace opens, for TCP, UDP and ICMP
// echo alike: one constructor, one outbound policy.

import (
	"errors"
	"net/netip"

	"golang.org/x/sys/unix"
)

// hostSock describes the host socket of a flow the namespace opens.
type hostSock struct {
	// typ and proto are socket(2)'s: SOCK_STREAM for TCP, SOCK_DGRAM with
	// 0 for UDP or IPPROTO_ICMP/IPPROTO_ICMPV6 for a ping socket. The
	// family is the flow's host address's.
	typ, proto int
	// port is the local port to keep: the namespace's source port (UDP)
	// or echo identifier (ping sockets), taken where the host lets the
	// socket have it and ephemeral otherwise; 0 is ephemeral.
	port uint16
	// tcp probes and sets SO_PEEK_OFF on a stream socket (usePeekOff).
	tcp *tcpTr
}

// openFlow makes the flow of p, a frame from the namespace that matched
// none, toward hostDst (where the NAT maps p's destination), and opens its
// host socket (hostSocket). It returns the flow's index, or -1 with the
// drop counted: toward a link-local hostDst (one the NAT did not map has
// no scope on the host side), with the table full (newFlow), or without a
// socket, whose error it returns.
func (e *Engine) openFlow(p *packet, proto uint8, hostDst netip.Addr, s hostSock) (int32, error) {
	if hostDst.Is6() && hostDst.IsLinkLocalUnicast() {
		e.drop(DropDestination)
		return -1, nil
	}
	idx := e.newFlow(p, proto)
	if idx < 0 {
		return -1, nil
	}
	f := e.flow(idx)
	f.setHostAddr(hostDst)
	fd, err := e.hostSocket(idx, s)
	if err != nil {
		e.drop(DropHostSocket)
		e.closeFlow(idx)
		return -1, err
	}
	f.Fd = fd
	return idx, nil
}

// hostSocket opens flow idx's host socket as s describes it, connects it
// to f.HostAddr() port f.DstPort (a TCP connect may still be in progress)
// and registers it with epoll: edge-triggered for TCP (tcp.go says why),
// level-triggered for datagrams.
//
// IPv6 sockets are IPv6-only. TCP sockets peek from an offset the kernel
// keeps where the family has it (usePeekOff), and carry TCP_NODELAY: the
// namespace's stack already coalesces small writes (Nagle), and delaying
// them again here would only add latency. Datagram sockets queue ICMP
// errors (IP_RECVERR), which udp.go turns into ICMP for the namespace.
// With --freebind (Options.Freebind), UDP sockets bind the outbound
// address with IP_FREEBIND, as pasta's flow sockets do: the host need not
// have it configured. UDP sockets that keep a port bind with SO_REUSEADDR,
// as pasta's do: a
// namespace socket that talks to two peers, or sends from a port gopasta
// forwards (a VPN or STUN endpoint), keeps its port for each, since every
// flow socket and the forwarded port's listener share it, and the kernel
// hands a datagram to the socket connected to its sender first. Ping
// sockets do not: their replies are matched by identifier alone.
//
// A UDP socket toward an IPv6 multicast group leaves through the template
// interface (Options.MulticastIf6), one toward a broadcast address gets
// SO_BROADCAST once connect(2) refuses it without. The socket leaves
// through the outbound interface and address (outbound). When socket(2) fails for lack of descriptors, a datagram
// flow makes room (outOfDescriptors). Errors are the system calls' own.
func (e *Engine) hostSocket(idx int32, s hostSock) (fd int, err error) {
	f := e.flow(idx)
	v6 := f.HostAddr().Is6()
	domain := unix.AF_INET
	if v6 {
		domain = unix.AF_INET6
	}
	if fd, err = e.sys.socket(domain, s.typ, s.proto); err != nil {
		e.outOfDescriptors(err, idx)
		return -1, err
	}
	defer func() {
		if err != nil {
			e.sys.close(fd)
			fd = -1
		}
	}()
	if v6 {
		e.sys.setsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	stream := s.typ == unix.SOCK_STREAM
	if stream {
		if err = s.tcp.usePeekOff(e, fd, f); err != nil {
			return fd, err
		}
		e.sys.setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	} else if err = e.recvErr(fd, v6); err != nil {
		return fd, err
	}
	local, ifname := e.outbound(f.HostAddr())
	if ifname != "" {
		if err = e.sys.bindToDevice(fd, ifname); err != nil {
			return fd, err
		}
	}
	udp := !stream && s.proto == 0
	if s.port != 0 && udp {
		if err = e.sys.setsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return fd, err
		}
	}
	if udp && e.opts.Freebind && local.IsValid() {
		// IPv6 sockets take IP_FREEBIND too (sock.Listen says why).
		if err = e.sys.setsockoptInt(fd, unix.IPPROTO_IP, unix.IP_FREEBIND, 1); err != nil {
			return fd, err
		}
	}
	if s.port != 0 || local.IsValid() {
		if err = e.sys.bind(fd, e.sa.Of(local, s.port, v6)); err != nil && s.port != 0 {
			err = e.sys.bind(fd, e.sa.Of(local, 0, v6))
		}
		if err != nil {
			return fd, err
		}
	}
	if udp && v6 && f.HostAddr().IsMulticast() && e.opts.MulticastIf6 != 0 {
		if err = e.sys.setsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, e.opts.MulticastIf6); err != nil {
			return fd, err
		}
	}
	err = e.sys.connect(fd, e.sa.Of(f.HostAddr(), f.DstPort, v6))
	if udp && !v6 && errors.Is(err, unix.EACCES) {
		// A broadcast address (255.255.255.255, or a subnet's):
		// connect(2) refuses it to a socket without SO_BROADCAST, which
		// only a broadcast destination needs.
		if err = e.sys.setsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err == nil {
			err = e.sys.connect(fd, e.sa.Of(f.HostAddr(), f.DstPort, v6))
		}
	}
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return fd, err
	}
	events := uint32(unix.EPOLLIN)
	if stream {
		events = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
	}
	err = e.sys.watch(fd, idx, f.gen, events)
	return fd, err
}

// outbound is the source address and interface of a host socket toward
// dst (Options.Outbound4/6, OutboundIf4/6, by dst's family): none toward
// loopback, which only loopback can reach.
func (e *Engine) outbound(dst netip.Addr) (local netip.Addr, ifname string) {
	switch {
	case dst.IsLoopback():
		return netip.Addr{}, ""
	case dst.Is6():
		return e.opts.Outbound6, e.opts.OutboundIf6
	}
	return e.opts.Outbound4, e.opts.OutboundIf4
}

// recvErr has datagram socket fd queue the ICMP errors it receives
// (IP_RECVERR, IPV6_RECVERR), for drainErrors.
func (e *Engine) recvErr(fd int, v6 bool) error {
	if v6 {
		return e.sys.setsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1)
	}
	return e.sys.setsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1)
}
