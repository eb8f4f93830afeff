package ns

// Whether IPv6 can be used at all, on the host and on the namespace's
// interface: a kernel without IPv6 (built without it, or booted with
// ipv6.disable=1) or IPv6 switched off by sysctl (disable_ipv6) leaves
// nothing for IPv6 to run on, and gopasta then runs IPv4 only instead of
// failing to configure what cannot be.

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ipv6Probe is what the probes look at: a socket of the family, and
// sysctl files. Tests replace it.
type ipv6Probe struct {
	socket   func() error
	readFile func(string) ([]byte, error)
}

var sysProbe = ipv6Probe{
	socket: func() error {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	},
	readFile: os.ReadFile,
}

// HostIPv6Off says why the calling thread's network namespace (the
// host's) has no IPv6, or "" when it has: no IPv6 sockets, or
// net.ipv6.conf.all.disable_ipv6 set, which takes IPv6 off every
// interface, loopback included.
func HostIPv6Off() string { return sysProbe.hostOff() }

func (p ipv6Probe) hostOff() string {
	if err := p.socket(); err != nil {
		return fmt.Sprintf("no IPv6 sockets: %v", err)
	}
	return p.disabled("all")
}

// LinkIPv6Off says why interface ifname, in the calling thread's network
// namespace, cannot carry IPv6, or "" when it can: IPv6 missing from the
// kernel, or its disable_ipv6 set (which it takes from
// net.ipv6.conf.default when created, and from .all when that is set).
// Call it on a thread in the interface's namespace: /proc/sys/net shows
// the namespace of the thread that opens it.
func LinkIPv6Off(ifname string) string { return sysProbe.disabled(ifname) }

// disabled reads net.ipv6.conf.IF.disable_ipv6.
func (p ipv6Probe) disabled(ifname string) string {
	path := "/proc/sys/net/ipv6/conf/" + ifname + "/disable_ipv6"
	b, err := p.readFile(path)
	switch {
	case os.IsNotExist(err) && ifname == "all":
		return "no IPv6 in the kernel (no /proc/sys/net/ipv6)"
	case os.IsNotExist(err):
		// The interface's own directory is missing only when IPv6 is.
		if _, err := p.readFile("/proc/sys/net/ipv6/conf/all/disable_ipv6"); os.IsNotExist(err) {
			return "no IPv6 in the kernel (no /proc/sys/net/ipv6)"
		}
		return ""
	case err != nil:
		return "" // unreadable: assume it works, as without the probe
	}
	if strings.TrimSpace(string(b)) == "1" {
		return fmt.Sprintf("net.ipv6.conf.%s.disable_ipv6 = 1", ifname)
	}
	return ""
}
