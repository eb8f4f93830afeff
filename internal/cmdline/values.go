package cmdline

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/ctlsock"
)

// MTU limits. The tap driver refuses more than 65535 minus the Ethernet
// header, and pasta's default, 65520, is that rounded down to 32 bits; 68 is
// the IPv4 minimum (RFC 791) and 1280 the IPv6 one (RFC 8200).
const (
	minMTU     = 68
	maxMTU     = config.DefaultMTU
	minMTUIPv6 = 1280
)

// minLogSize mirrors pasta: the log is trimmed in blocks, so a tiny limit
// makes no sense.
const minLogSize = 40960

func parseMTU(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || (n != 0 && (n < minMTU || n > maxMTU)) {
		return 0, badValue("--mtu", s, fmt.Sprintf("must be 0 or between %d and %d", minMTU, maxMTU))
	}
	return n, nil
}

// parseAddr parses one IP address for option opt and rejects the kinds
// pasta rejects for it. IPv4-mapped IPv6 forms are refused outright: they
// would silently change family.
func parseAddr(opt, s string, allowLoopback4, allowLoopback6 bool) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, badValue(opt, s, "not an IPv4 or IPv6 address")
	}
	switch {
	case a.Is4In6():
		return netip.Addr{}, badValue(opt, s, "IPv4-mapped IPv6 address; give the IPv4 form")
	case a.IsUnspecified():
		return netip.Addr{}, badValue(opt, s, "unspecified address")
	case a.IsMulticast():
		return netip.Addr{}, badValue(opt, s, "multicast address")
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return netip.Addr{}, badValue(opt, s, "broadcast address")
	case a.IsLoopback() && a.Is4() && !allowLoopback4, a.IsLoopback() && a.Is6() && !allowLoopback6:
		return netip.Addr{}, badValue(opt, s, "loopback address")
	}
	return a, nil
}

// parseAddrPrefix parses -a ADDR[/LEN].
func parseAddrPrefix(s string) (netip.Prefix, bool, error) {
	addrPart, lenPart, hasLen := strings.Cut(s, "/")
	a, err := parseAddr("--address", addrPart, false, false)
	if err != nil {
		err.(*OptionError).Value = s
		return netip.Prefix{}, false, err
	}
	if !hasLen {
		if a.Is4() {
			return netip.PrefixFrom(a, classfulLen(a)), false, nil
		}
		return netip.PrefixFrom(a, 64), false, nil
	}
	n, err := strconv.Atoi(lenPart)
	if err != nil || n < 1 || n > a.BitLen() {
		return netip.Prefix{}, false, badValue("--address", s, fmt.Sprintf("prefix length must be between 1 and %d", a.BitLen()))
	}
	return netip.PrefixFrom(a, n), true, nil
}

// classfulLen is the RFC 4632 "CIDR block" fallback pasta uses when the host
// has no matching address to take a netmask from.
func classfulLen(a netip.Addr) int {
	b := a.As4()[0]
	switch {
	case b < 128:
		return 8
	case b < 192:
		return 16
	}
	return 24
}

// parseNetmask parses -n as dot-decimal or as a prefix length.
func parseNetmask(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 32 {
			return 0, badValue("--netmask", s, "prefix length must be between 1 and 32")
		}
		return n, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return 0, badValue("--netmask", s, "not a dot-decimal netmask or a prefix length")
	}
	b := a.As4()
	ones, bits := net.IPv4Mask(b[0], b[1], b[2], b[3]).Size()
	if bits == 0 || ones == 0 {
		return 0, badValue("--netmask", s, "not a contiguous netmask")
	}
	return ones, nil
}

func parseMAC(opt, s string) (net.HardwareAddr, error) {
	// net.ParseMAC also takes dashes, dots and 8/20-byte addresses; pasta
	// takes exactly six colon-separated hex pairs, and so do we.
	m, err := net.ParseMAC(s)
	if err != nil || len(m) != 6 || len(s) != 17 || strings.Count(s, ":") != 5 {
		return nil, badValue(opt, s, "not a MAC address of the form 9a:55:9a:55:9a:55")
	}
	if m[0]&1 != 0 {
		return nil, badValue(opt, s, "multicast MAC address")
	}
	if m.String() == "00:00:00:00:00:00" {
		return nil, badValue(opt, s, "all-zero MAC address")
	}
	return m, nil
}

// parseLogSize takes bytes, with an optional k, M or G suffix (binary).
func parseLogSize(s string) (int64, error) {
	num, mult := s, int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult != 1 {
			num = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, badValue("--log-size", s, "not a size in bytes (suffixes k, M, G allowed)")
	}
	if n*mult < minLogSize {
		return 0, badValue("--log-size", s, fmt.Sprintf("must be at least %d bytes", minLogSize))
	}
	return n * mult, nil
}

func parseStats(s string) (time.Duration, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 86400 {
		return 0, badValue("--stats", s, "must be a number of seconds between 0 and 86400")
	}
	return time.Duration(n) * time.Second, nil
}

// parseRunAs resolves UID[:GID] or LOGIN[:GROUP] now, so that a typo fails
// before any namespace is touched.
func parseRunAs(s string) (*config.RunAs, error) {
	u, g, hasG := strings.Cut(s, ":")
	if u == "" || (hasG && g == "") {
		return nil, badValue("--runas", s, "expected UID[:GID] or LOGIN[:GROUP]")
	}
	r := &config.RunAs{}
	// (uid_t)-1 means "unchanged" to setresuid(2): it is no id.
	if isDigits(u) && !validID(u) {
		return nil, badValue("--runas", s, "user ids are 0 to 4294967294")
	}
	if hasG && isDigits(g) && !validID(g) {
		return nil, badValue("--runas", s, "group ids are 0 to 4294967294")
	}
	if id, err := strconv.ParseUint(u, 10, 32); err == nil {
		r.UID, r.GID = int(id), int(id)
		if pw, err := user.LookupId(u); err == nil {
			r.GID, _ = strconv.Atoi(pw.Gid)
		}
	} else {
		pw, err := user.Lookup(u)
		if err != nil {
			return nil, badValue("--runas", s, fmt.Sprintf("no such user %q", u))
		}
		r.UID, _ = strconv.Atoi(pw.Uid)
		r.GID, _ = strconv.Atoi(pw.Gid)
	}
	if hasG {
		if id, err := strconv.ParseUint(g, 10, 32); err == nil {
			r.GID = int(id)
		} else {
			gr, err := user.LookupGroup(g)
			if err != nil {
				return nil, badValue("--runas", s, fmt.Sprintf("no such group %q", g))
			}
			r.GID, _ = strconv.Atoi(gr.Gid)
		}
	}
	return r, nil
}

// validID reports whether the decimal s is a user or group id.
func validID(s string) bool {
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && n < 1<<32-1
}

// checkIfName checks the syntax the kernel requires of an interface name.
func checkIfName(opt, s string) error {
	if s == "" || len(s) >= 16 || s == "." || s == ".." {
		return badValue(opt, s, "interface names are 1 to 15 bytes")
	}
	for _, c := range []byte(s) {
		if c == '/' || c == ':' || c <= ' ' || c >= 0x7f {
			return badValue(opt, s, "interface names cannot contain '/', ':', spaces or control characters")
		}
	}
	return nil
}

// checkHostIf also requires the interface to exist on the host.
func checkHostIf(opt, s string) error {
	if err := checkIfName(opt, s); err != nil {
		return err
	}
	if _, err := net.InterfaceByName(s); err != nil {
		return badValue(opt, s, "no such interface on the host")
	}
	return nil
}

// checkDomain checks one DNS name (search domain, hostname, FQDN).
func checkDomain(opt, full, s string, maxLen int) error {
	name := strings.TrimSuffix(s, ".")
	if name == "" || len(name) > maxLen {
		return badValue(opt, full, fmt.Sprintf("names are 1 to %d characters", maxLen))
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return badValue(opt, full, "each dot-separated label must be 1 to 63 characters")
		}
		for _, c := range []byte(label) {
			ok := c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
			if !ok {
				return badValue(opt, full, fmt.Sprintf("invalid character %q", c))
			}
		}
	}
	return nil
}

// checkPath requires a usable, non-empty path for a file gopasta creates.
func checkPath(opt, s string) error {
	if s == "" {
		return badValue(opt, s, "empty path")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return badValue(opt, s, "path contains a NUL byte")
	}
	if len(s) >= 4096 {
		return badValue(opt, s, "path too long")
	}
	return nil
}

// parseConfPath checks -c/--conf-path as pasta does (1 to 107 bytes, used
// verbatim), and now rather than at start: its directory must exist and
// nothing may listen there yet (a stale socket is replaced at start).
func parseConfPath(s string) (string, error) {
	if err := ctlsock.CheckPath(s); err != nil {
		reason := err.Error()
		var pe *ctlsock.PathError
		if errors.As(err, &pe) {
			reason = pe.Reason
		}
		return "", &OptionError{Option: "--conf-path", Value: s, Reason: reason, Err: err}
	}
	return s, nil
}

// nsFile resolves a namespace file and requires that it exists now, so a
// mistyped --netns fails with its name rather than later with an errno.
func nsFile(opt, s string) (string, error) {
	if err := checkPath(opt, s); err != nil {
		return "", err
	}
	if _, err := os.Stat(s); err != nil {
		reason := "cannot access it"
		if errors.Is(err, os.ErrNotExist) {
			reason = "no such file"
		} else if errors.Is(err, os.ErrPermission) {
			reason = "permission denied"
		}
		return "", badValue(opt, s, reason)
	}
	return s, nil
}
