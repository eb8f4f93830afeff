package splice

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// Dialer creates a socket in the other namespace connected (or connecting)
// to dst and returns its fd. The engine's implementation runs DialTCP or
// DialUDP on the namespace thread: a socket belongs to the namespace it was
// created in, whichever thread uses it later.
type Dialer func(network string, dst netip.AddrPort) (fd int, err error)

// DialTCP creates a non-blocking TCP socket and starts connecting it to dst.
// The connection may still be in progress when it returns; the Forwarder
// copes (data waits in the pipe, a failed connect resets the other side).
// network is "tcp", "tcp4" or "tcp6".
func DialTCP(network string, dst netip.AddrPort) (int, error) {
	return dial(network, unix.SOCK_STREAM, netip.AddrPort{}, dst)
}

// DialUDP creates a non-blocking UDP socket, bound to local when it is
// valid, connected to dst. network is "udp", "udp4" or "udp6".
func DialUDP(network string, local, dst netip.AddrPort) (int, error) {
	return dial(network, unix.SOCK_DGRAM, local, dst)
}

func dial(network string, typ int, local, dst netip.AddrPort) (int, error) {
	family, err := familyFor(network, typ, dst)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("splice: socket: %w", err)
	}
	if typ == unix.SOCK_STREAM {
		// Before connect so the SYN already carries our intent; pasta sets
		// both on spliced sockets.
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	if local.IsValid() {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if err := unix.Bind(fd, sockaddr(family, local)); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("splice: bind %s: %w", local, err)
		}
	}
	err = unix.Connect(fd, sockaddr(family, dst))
	if err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		return -1, fmt.Errorf("splice: connect %s: %w", dst, err)
	}
	return fd, nil
}

func familyFor(network string, typ int, dst netip.AddrPort) (int, error) {
	if !dst.IsValid() || dst.Port() == 0 {
		return 0, fmt.Errorf("splice: invalid destination %q", dst)
	}
	want4, want6 := true, true
	switch network {
	case "tcp", "udp":
	case "tcp4", "udp4":
		want6 = false
	case "tcp6", "udp6":
		want4 = false
	default:
		return 0, fmt.Errorf("splice: unknown network %q", network)
	}
	if (network[0] == 't') != (typ == unix.SOCK_STREAM) {
		return 0, fmt.Errorf("splice: network %q does not match socket type", network)
	}
	is4 := dst.Addr().Unmap().Is4()
	switch {
	case is4 && want4:
		return unix.AF_INET, nil
	case !is4 && want6:
		return unix.AF_INET6, nil
	}
	return 0, fmt.Errorf("splice: address %s does not fit network %q", dst.Addr(), network)
}

func sockaddr(family int, ap netip.AddrPort) unix.Sockaddr {
	if family == unix.AF_INET {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	}
	sa := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	if z := ap.Addr().Zone(); z != "" {
		if ifi, err := netInterfaceIndex(z); err == nil {
			sa.ZoneId = uint32(ifi)
		}
	}
	return sa
}

// netInterfaceIndex resolves an IPv6 zone. Names resolve in the calling
// thread's namespace, which is why Dialers run on the namespace thread.
func netInterfaceIndex(zone string) (int, error) {
	if n, err := strconv.Atoi(zone); err == nil {
		return n, nil
	}
	ifi, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}
