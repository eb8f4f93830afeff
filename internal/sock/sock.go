// Package sock holds the socket primitives that the engine (fwd), the
// splice forwarder and run-time port forwarding share, so that each exists
// once: socket addresses from net/netip values, listening sockets as the
// forwarding rules ask for them, per-peer UDP reply sockets, outgoing
// sockets, accept4 and resets, and UDP batches: the message arrays of
// recvmmsg and sendmmsg (RecvBatch, Mmsg), how many datagrams to read at
// once (Burst) and how to send them on in segmentation offload runs
// (GSOBatch).
//
// Every function creates its sockets in the calling thread's network
// namespace; a socket keeps that namespace whichever thread uses it later.
package sock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/faults"
)

// Loopback is the loopback address of a family: 127.0.0.1 or ::1.
func Loopback(v6 bool) netip.Addr {
	if v6 {
		return netip.IPv6Loopback()
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// Addr is a reusable pair of socket addresses. Of fills the one of the
// requested family and returns a pointer into Addr, so an Addr that lives
// in a long-lived struct converts addresses without allocating.
type Addr struct {
	in4 unix.SockaddrInet4
	in6 unix.SockaddrInet6
}

// Of returns a as a socket address of family v6 (an invalid a is the
// family's any address). IPv4-mapped IPv6 addresses are unmapped for IPv4.
func (s *Addr) Of(a netip.Addr, port uint16, v6 bool) unix.Sockaddr {
	if v6 {
		s.in6 = unix.SockaddrInet6{Port: int(port)}
		if a.IsValid() {
			s.in6.Addr = a.As16()
		}
		return &s.in6
	}
	s.in4 = unix.SockaddrInet4{Port: int(port)}
	if a.IsValid() {
		s.in4.Addr = a.Unmap().As4()
	}
	return &s.in4
}

// Sockaddr converts ap to a socket address of its own family (allocating).
// An IPv6 zone is resolved to an interface index in the calling thread's
// namespace; an unknown zone is left out.
func Sockaddr(ap netip.AddrPort) unix.Sockaddr {
	a := ap.Addr()
	v6 := a.Is6() && !a.Is4In6()
	sa := new(Addr).Of(a, ap.Port(), v6)
	if z := a.Zone(); v6 && z != "" {
		if idx, err := zoneIndex(z); err == nil {
			sa.(*unix.SockaddrInet6).ZoneId = uint32(idx)
		}
	}
	return sa
}

func zoneIndex(zone string) (int, error) {
	if n, err := strconv.Atoi(zone); err == nil {
		return n, nil
	}
	ifi, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

// AddrPortOf converts a kernel socket address; IPv4-mapped IPv6 addresses
// come back as IPv4. It allocates nothing.
func AddrPortOf(rsa *unix.RawSockaddrAny) netip.AddrPort {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// Acceptor accepts connections without allocating: unix.Accept4 builds a
// Sockaddr on the heap for every connection. The zero value is ready; one
// Acceptor serves one goroutine at a time.
type Acceptor struct {
	rsa unix.RawSockaddrAny
	n   uint32
}

// Accept takes one connection from listening socket fd, non-blocking and
// close-on-exec, with its peer's address.
func (a *Acceptor) Accept(fd int) (int, netip.AddrPort, error) {
	if err := faults.At(faults.Accept); err != nil {
		return -1, netip.AddrPort{}, err
	}
	creating.RLock()
	defer creating.RUnlock()
	return a.accept(fd)
}

// accept is Accept with the descriptor gate (creating) already held.
func (a *Acceptor) accept(fd int) (int, netip.AddrPort, error) {
	a.n = uint32(unsafe.Sizeof(a.rsa))
	nfd, _, errno := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(fd),
		uintptr(unsafe.Pointer(&a.rsa)), uintptr(unsafe.Pointer(&a.n)),
		unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if errno != 0 {
		return -1, netip.AddrPort{}, errno
	}
	return int(nfd), AddrPortOf(&a.rsa), nil
}

// RenoAfter is how many bytes a TCP connection of ours carries toward a
// peer on this host before it gets reno for congestion control (LocalReno,
// SetReno): a bulk transfer passes it at once, and requests and answers,
// which stay below it, cost no system call for it.
const RenoAfter = 256 << 10

// RenoCount counts the bytes one direction of a connection sent, up to
// RenoAfter.
type RenoCount uint32

// Add counts n more bytes and reports whether they took the count to
// RenoAfter: true once per count, when the connection is due its reno.
func (r *RenoCount) Add(n int) bool {
	if *r >= RenoAfter {
		return false
	}
	*r += RenoCount(min(n, RenoAfter))
	return *r >= RenoAfter
}

// LocalReno sets the congestion control of TCP socket fd, connected to
// dst, to reno when dst is on this host: a loopback address, or one the
// kernel took as fd's source too (a route of type local makes the
// destination its own source). It reports whether it did. a is scratch
// for the source address.
//
// Such a connection crosses no network, so there is no one to be fair
// to, while the host's default may pace its segments: bbr, the default
// on many machines, paces every one by a timer of its own and keeps the
// window near a bandwidth-delay product measured in microseconds, so a
// bulk transfer's data waits in the send buffer, and the namespace's
// sender on the window that buffer offers. Set on an established
// connection, the kernel initialises reno in place of the default
// (tcp_reinit_congestion_control). reno is allowed to every user
// (net.ipv4.tcp_allowed_congestion_control always lists it).
func LocalReno(fd int, dst netip.Addr, a *Acceptor) bool {
	if !dst.IsLoopback() {
		src, err := a.Local(fd)
		if err != nil || !localPeer(dst, src.Addr()) {
			return false
		}
	}
	return SetReno(fd) == nil
}

// localPeer reports whether a connection from src to dst stays on this
// host: dst is loopback, or the kernel chose dst itself as the source.
func localPeer(dst, src netip.Addr) bool {
	return dst.IsLoopback() || (dst.IsValid() && dst.Unmap() == src.Unmap())
}

// SetReno sets TCP socket fd's congestion control to reno (LocalReno says
// why).
func SetReno(fd int) error {
	_, _, errno := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION,
		uintptr(unsafe.Pointer(&renoName[0])), uintptr(len(renoName)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// renoName is the name LocalReno gives setsockopt(2), which takes it
// without a terminating NUL.
var renoName = [...]byte{'r', 'e', 'n', 'o'}

// Local is the address and port socket fd is bound to (getsockname): for a
// connection accepted on a listener bound to any address, the address its
// peer connected to.
func (a *Acceptor) Local(fd int) (netip.AddrPort, error) {
	a.n = uint32(unsafe.Sizeof(a.rsa))
	_, _, errno := unix.Syscall(unix.SYS_GETSOCKNAME, uintptr(fd),
		uintptr(unsafe.Pointer(&a.rsa)), uintptr(unsafe.Pointer(&a.n)))
	if errno != 0 {
		return netip.AddrPort{}, errno
	}
	return AddrPortOf(&a.rsa), nil
}

// AcceptBatch is the most connections an event loop takes off one
// level-triggered listener per event while connections queue there.
const AcceptBatch = 32

// AcceptBudget is how many connections an event loop accepts in cycle now
// from a level-triggered listener that last accepted in cycle last (0:
// never). One accept per event loses nothing on such a listener: a
// connection left queued reports it again in the next cycle. That is the
// common case (connections one after another, each then costing one
// accept4 instead of two with the second failing with EAGAIN); a listener
// reported in two cycles in a row has a queue, which is taken in batches of
// AcceptBatch up to EAGAIN.
func AcceptBudget(last, now uint64) int {
	if last != 0 && last+1 >= now {
		return AcceptBatch
	}
	return 1
}

// AcceptRetry reports whether an accept error is about one connection
// (gone before it was taken) rather than the listener or the process:
// accept again at once. Other errors (out of descriptors or memory) leave
// the connection in the backlog, and retrying at once would spin.
func AcceptRetry(err error) bool {
	return err == unix.EINTR || err == unix.ECONNABORTED || err == unix.EPROTO
}

// Abort closes fd so that its peer sees a reset rather than an orderly end
// of stream.
func Abort(fd int) {
	if fd < 0 {
		return
	}
	l := unix.Linger{Onoff: 1}
	_, _, _ = unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER, uintptr(unsafe.Pointer(&l)), unsafe.Sizeof(l), 0)
	Close(fd)
}

// Listen describes a forwarded port's socket.
type Listen struct {
	UDP    bool
	V6     bool       // the socket's family; IPv6 sockets are IPV6_V6ONLY
	Addr   netip.Addr // bind address; invalid or unspecified: any
	Port   uint16
	Ifname string // SO_BINDTODEVICE, if set
	// Freebind (--freebind): the address need not exist yet, for a
	// host address that comes up later (a VPN, DHCP).
	Freebind bool
	// ReusePort (TCP): bind with SO_REUSEPORT, so that a listener on the
	// any address and one on loopback can share a port. The kernel
	// hands a connection to the listener bound to its exact destination
	// address before one bound to any. Clear it (ClearReusePort) once
	// both are bound, or another process of the same user could join.
	ReusePort bool
}

// ClearReusePort turns SO_REUSEPORT off on a bound socket: sockets bound
// with it stay bound, and no new socket can join them.
func ClearReusePort(fd int) error {
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 0)
}

// ErrListenReserve is matched (errors.Is) when Open refuses a listener
// that would take one of the descriptors kept for connections.
var ErrListenReserve = fmt.Errorf("%w (the last descriptors are kept for connections)", unix.EMFILE)

// listenCeiling is the lowest descriptor number a listener may not have.
// Forwarded port ranges can ask for more listeners than the descriptor
// limit allows (four sockets a port: two families, and the loopback twins
// for splicing); were they to take every descriptor, no connection could
// be accepted or opened, and the sandbox, the control socket and the pid
// file could not open theirs. A quarter of the limit, at least 64 and at
// most 4096, stays for those. Descriptors are allocated lowest first, so a
// new socket's number is a lower bound of how many are open.
//
// It is read at start-up (after the runtime raised the soft limit to the
// hard one): listeners also open once the sandbox's system call filter is
// on, and it does not allow getrlimit.
var listenCeiling = func() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 1 << 30
	}
	limit := int(rl.Cur)
	return limit - min(max(limit/4, 64), 4096)
}()

// Open creates, binds and (for TCP) listens on l's socket, non-blocking.
// It refuses with ErrListenReserve (an EMFILE) a socket that would leave
// fewer descriptors than listenCeiling keeps for connections.
// Both protocols get SO_REUSEADDR: TCP to rebind a port whose connections
// are in TIME_WAIT, UDP because per-peer reply sockets (Reply) bind the
// same address and port. TCP listeners get TCP_NODELAY, which the
// connections they accept inherit: forwarded bytes go out as they come.
func (l Listen) Open() (int, error) {
	typ := unix.SOCK_STREAM
	if l.UDP {
		typ = unix.SOCK_DGRAM
	}
	fd, err := socket(l.V6, typ)
	if err != nil {
		return -1, err
	}
	fail := func(err error) (int, error) {
		unix.Close(fd)
		return -1, err
	}
	if fd >= listenCeiling {
		return fail(ErrListenReserve)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if l.ReusePort && !l.UDP {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fail(err)
		}
	}
	if l.Freebind {
		if err := setFreebind(fd); err != nil {
			return fail(fmt.Errorf("--freebind: %w", err))
		}
	}
	if l.Ifname != "" {
		if err := unix.BindToDevice(fd, l.Ifname); err != nil {
			return fail(fmt.Errorf("binding to interface %s: %w", l.Ifname, err))
		}
	}
	if err := unix.Bind(fd, new(Addr).Of(l.Addr, l.Port, l.V6)); err != nil {
		return fail(err)
	}
	if !l.UDP {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
			return fail(err)
		}
	}
	return fd, nil
}

// socket is a non-blocking, close-on-exec socket; IPv6 ones carry IPv6
// only, so that a forwarded port's IPv4 and IPv6 sockets can coexist.
func socket(v6 bool, typ int) (int, error) {
	domain := unix.AF_INET
	if v6 {
		domain = unix.AF_INET6
	}
	fd, err := Socket(domain, typ, 0)
	if err != nil {
		return -1, err
	}
	if v6 {
		_ = SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	return fd, nil
}

// Reply opens the socket of one UDP peer of a forwarded port: bound to
// local, the address and port the peer sent to (both sockets have
// SO_REUSEADDR), and connected to peer. The kernel then delivers the peer's
// later datagrams to it rather than to the listening socket, and replies
// leave from the address the peer talked to, which a connected peer socket
// insists on. local's address matters when the listener is bound to any:
// left to routing, a reply could leave from another local address.
func Reply(local netip.AddrPort, ifname string, peer netip.AddrPort) (int, error) {
	return ReplyWith(local, peer, ReplyOptions{Ifname: ifname})
}

// ReplyOptions are a reply socket's (Reply) settings beyond its addresses.
type ReplyOptions struct {
	// Ifname binds the socket to the listener's interface
	// (SO_BINDTODEVICE), if set.
	Ifname string
	// Freebind (--freebind): the socket binds local even where the host
	// does not have that address, as the listener may: an address of a
	// local route (IPv6 binds only configured addresses without it) or
	// one not configured yet.
	Freebind bool
}

// ReplyWith is Reply with options.
func ReplyWith(local, peer netip.AddrPort, o ReplyOptions) (int, error) {
	v6 := peer.Addr().Is6()
	fd, err := socket(v6, unix.SOCK_DGRAM)
	if err != nil {
		return -1, err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if o.Ifname != "" {
		_ = unix.BindToDevice(fd, o.Ifname)
	}
	la := local.Addr()
	if la.IsUnspecified() {
		la = netip.Addr{}
	}
	var sa Addr
	err = onlyFrom(fd, peer)
	if err == nil && o.Freebind {
		err = setFreebind(fd)
	}
	if err == nil {
		err = unix.Bind(fd, sa.Of(la, local.Port(), v6))
	}
	if err == nil {
		err = faults.At(faults.Connect)
	}
	if err == nil {
		err = unix.Connect(fd, sa.Of(peer.Addr(), peer.Port(), v6))
	}
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// onlyFrom makes UDP socket fd drop every datagram that does not come from
// peer, for the moment between its bind and its connect. A socket bound
// to a port that a listening socket shares (SO_REUSEADDR) takes the port's
// datagrams from every sender in that moment: the kernel prefers it to a
// listener bound to any address, and to one bound to the same address
// because it is the newer. What it took there would be carried as the
// peer's. Dropped here, a stranger's datagram is lost, as on any full
// queue, rather than delivered under another sender's name. Once the
// socket is connected, the kernel gives it the peer's datagrams only, and
// the filter can go (SO_DETACH_FILTER), so that the data path does not run
// it.
//
// The filter runs where the kernel queues a datagram on the socket, with
// the UDP header at offset 0 and the IP header reachable at SKF_NET_OFF.
func onlyFrom(fd int, peer netip.AddrPort) error {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		ldh  = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		nh   = 0xfff00000 // SKF_NET_OFF (-0x100000) as the 32-bit K
		all  = 0xffffffff
		none = 0
	)
	a := peer.Addr().Unmap()
	// The source address, as big-endian words: IPv4 header offset 12,
	// IPv6 header offset 8. Fixed arrays, so that a new flow's socket
	// costs no allocation here.
	var b [16]byte
	addr, off := b[:4], uint32(12)
	if a.Is4() {
		b4 := a.As4()
		copy(b[:], b4[:])
	} else {
		b = a.As16()
		addr, off = b[:], 8
	}
	// Each comparison jumps to the last instruction (drop) on mismatch.
	var buf [2*4 + 4]unix.SockFilter
	n := 2*len(addr)/4 + 4
	prog := buf[:0]
	for i := 0; i < len(addr); i += 4 {
		prog = append(prog, unix.SockFilter{Code: ld, K: nh + off + uint32(i)})
		prog = append(prog, unix.SockFilter{Code: jeq, K: binary.BigEndian.Uint32(addr[i:]), Jf: uint8(n - len(prog) - 2)})
	}
	prog = append(prog,
		unix.SockFilter{Code: ldh, K: 0}, // the UDP source port
		unix.SockFilter{Code: jeq, K: uint32(peer.Port()), Jf: 1},
		unix.SockFilter{Code: ret, K: all},
		unix.SockFilter{Code: ret, K: none},
	)
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// DialUDPFrom is Dial for UDP keeping the source port a peer used on the
// other side, and its address if it is a loopback one: the socket binds
// them (SO_REUSEADDR, so that it may share the port with a forwarded
// port's listener or another flow, as pasta's do) before it connects, and
// takes an address and ephemeral port of the kernel's choice if they
// cannot be had. Protocols that answer to where a datagram came from (a
// VPN's handshake, STUN, SIP) then see the same port on both sides of a
// spliced flow, and a loopback peer its own loopback address (127.0.0.6
// stays 127.0.0.6). A source without a port is Dial.
func DialUDPFrom(dst, src netip.AddrPort) (int, error) {
	port := src.Port()
	if port == 0 {
		return Dial(true, dst)
	}
	if !dst.IsValid() || dst.Port() == 0 {
		return -1, fmt.Errorf("invalid destination %q", dst)
	}
	v6 := dst.Addr().Is6() && !dst.Addr().Is4In6()
	fd, err := socket(v6, unix.SOCK_DGRAM)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	// Between bind and connect the socket would take any sender's
	// datagrams to port (onlyFrom).
	if err := onlyFrom(fd, dst); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("SO_ATTACH_FILTER: %w", err)
	}
	var sa Addr
	from := src.Addr().Unmap()
	if !from.IsLoopback() || from.Is6() != v6 {
		from = netip.Addr{}
	}
	if unix.Bind(fd, sa.Of(from, port, v6)) != nil {
		unix.Close(fd)
		return Dial(true, dst)
	}
	if err := connect(fd, dst); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect %s: %w", dst, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("SO_DETACH_FILTER: %w", err)
	}
	return fd, nil
}

// Dial creates a non-blocking socket and starts connecting it to dst:
// a TCP connection may still be in progress when it returns. TCP sockets
// get TCP_NODELAY before connecting, so that the SYN already carries it.
func Dial(udp bool, dst netip.AddrPort) (int, error) {
	if !dst.IsValid() || dst.Port() == 0 {
		return -1, fmt.Errorf("invalid destination %q", dst)
	}
	typ := unix.SOCK_STREAM
	if udp {
		typ = unix.SOCK_DGRAM
	}
	a := dst.Addr()
	fd, err := socket(a.Is6() && !a.Is4In6(), typ)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if !udp {
		_ = SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	if err := connect(fd, dst); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		Close(fd)
		return -1, fmt.Errorf("connect %s: %w", dst, err)
	}
	return fd, nil
}

// connect is Connect with the family dst's address has.
func connect(fd int, dst netip.AddrPort) error {
	a := dst.Addr()
	return Connect(fd, dst, a.Is6() && !a.Is4In6())
}

// PktDst is the destination address of a datagram, from its IP_PKTINFO or
// IPV6_PKTINFO control message, or def when there is none.
func PktDst(ctl []byte, def netip.Addr) netip.Addr {
	for len(ctl) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		if h.Len < unix.SizeofCmsghdr || int(h.Len) > len(ctl) {
			break
		}
		data := ctl[unix.SizeofCmsghdr:h.Len]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			return netip.AddrFrom4([4]byte(data[8:12]))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			return netip.AddrFrom16([16]byte(data[0:16])).Unmap()
		}
		ctl = ctl[(int(h.Len)+7)&^7:]
	}
	return def
}

// RecvPktInfo asks the kernel for the destination address of each datagram
// received on fd (PktDst reads it).
func RecvPktInfo(fd int, v6 bool) error {
	if v6 {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
}

// setFreebind lets fd, of either family, bind an address the host does
// not have: IP_FREEBIND, which IPv6 sockets take too and which sets the
// same flag that IPv6's bind checks. IPV6_FREEBIND sets that flag as well
// but needs Linux 4.15.
func setFreebind(fd int) error {
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_FREEBIND, 1)
}

// BurstBytes bounds the payload of one batch of datagrams read from a
// socket to forward (Burst).
const BurstBytes = 64 << 10

// Burst is how many datagrams to read from a socket at once, out of a batch
// of at most batch, when the largest datagram of the previous batch from it
// carried last bytes (0: none read yet).
//
// Both forwarders read a batch with recvmmsg and send it on at once, and
// sending into a namespace, through a TAP or over loopback, puts each
// datagram straight into the receiving socket. Two things make a batch of
// large datagrams cost more than it saves in system calls:
//
//   - The receiving socket's default buffer (208 KiB) holds about three
//     datagrams of 64 KiB. A batch of nine of them, which recvmmsg returns
//     when the sender refills the socket while the batch is copied,
//     overflows a receiver that reads one at a time, and each datagram
//     dropped there cost the forwarder two copies.
//   - Each datagram has a buffer of its own, 64 KiB apart. Thirty-two of
//     them are 2 MiB, as much as a core's whole L2 cache, so the send
//     copies what the receive wrote from farther out, and the copy into
//     the socket costs more per datagram than in batches of one or two
//     (docs/performance.md, change 14).
//
// Bounding a batch to BurstBytes of payload reads large datagrams one at a
// time, into the same hot buffer, and still 46 of 1400 bytes at once.
func Burst(batch, last int) int {
	if last <= 0 {
		return batch
	}
	return max(1, min(batch, BurstBytes/last))
}
