package cmdline

// Parsers and checks of single option values: numbers, addresses, MAC,
// sizes, ids, interface and path names.

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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

// parseCUint reads a whole string as C's strtoul(3) with base 0 does, as
// pasta reads its numbers (so "-m 0x5dc" works and "-m 01500" means what it
// means to pasta, 832): leading white space, an optional sign, then 0x or
// 0X and hexadecimal digits, 0 and octal digits, or decimal digits. ok
// says s is such a number; one too large for 64 bits reads as the largest.
// neg reports a minus sign: strtoul would negate the value, so only -0 is
// in range for anything.
func parseCUint(s string) (n uint64, neg, ok bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	base := 10
	switch {
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		base, s = 16, s[2:]
	case len(s) > 1 && s[0] == '0':
		base, s = 8, s[1:]
	}
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, false, false
	}
	n, err := strconv.ParseUint(s, base, 64)
	if errors.Is(err, strconv.ErrRange) {
		return math.MaxUint64, neg, true
	}
	return n, neg, err == nil
}

// parseCRange is parseCUint for a value that must be in lo..hi.
func parseCRange(s string, lo, hi uint64) (uint64, bool) {
	n, neg, ok := parseCUint(s)
	if !ok || (neg && n != 0) || n < lo || n > hi {
		return 0, false
	}
	return n, true
}

func parseMTU(s string) (int, error) {
	n, ok := parseCRange(s, 0, maxMTU)
	if !ok || (n != 0 && n < minMTU) {
		return 0, badValue("--mtu", s, fmt.Sprintf("must be 0 or between %d and %d", minMTU, maxMTU))
	}
	return int(n), nil
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

// parseAddrPrefix parses -a ADDR[/LEN]; ADDR may be in brackets, as pasta
// takes it.
func parseAddrPrefix(s string) (netip.Prefix, bool, error) {
	addrPart, lenPart, hasLen := strings.Cut(s, "/")
	if len(addrPart) > 2 && addrPart[0] == '[' && addrPart[len(addrPart)-1] == ']' {
		addrPart = addrPart[1 : len(addrPart)-1]
	}
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
	if _, _, isNum := parseCUint(s); isNum {
		n, ok := parseCRange(s, 1, 32)
		if !ok {
			return 0, badValue("--netmask", s, "prefix length must be between 1 and 32")
		}
		return int(n), nil
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
	u, ok := parseCRange(num, 0, uint64((1<<62)/mult))
	if !ok {
		return 0, badValue("--log-size", s, "not a size in bytes (suffixes k, M, G allowed)")
	}
	n := int64(u)
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
	// Numbers as pasta reads them (parseCUint); anything else is a name.
	// (uid_t)-1 means "unchanged" to setresuid(2): it is no id.
	uid, uNum, uOK := parseID(u)
	gid, gNum, gOK := parseID(g)
	if uNum && !uOK {
		return nil, badValue("--runas", s, "user ids are 0 to 4294967294")
	}
	if hasG && gNum && !gOK {
		return nil, badValue("--runas", s, "group ids are 0 to 4294967294")
	}
	if uNum {
		r.UID, r.GID = uid, uid
		if pw, err := user.LookupId(strconv.Itoa(uid)); err == nil {
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
		if gNum {
			r.GID = gid
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

// parseID reads a user or group id: isNum says s is a number at all, ok
// that it is a valid id.
func parseID(s string) (id int, isNum, ok bool) {
	if _, _, isNum = parseCUint(s); !isNum {
		return 0, false, false
	}
	n, ok := parseCRange(s, 0, 1<<32-2)
	return int(n), true, ok
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

// checkOutputPath is checkPath for a file gopasta creates or appends to
// (-P, -l, -p): its directory must exist and the path must not be a
// directory, checked now so that a typo fails before any namespace is
// touched rather than once it is set up.
func checkOutputPath(opt, s string) error {
	if err := checkPath(opt, s); err != nil {
		return err
	}
	if fi, err := os.Stat(s); err == nil && fi.IsDir() {
		return badValue(opt, s, "is a directory")
	}
	dir := filepath.Dir(s)
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = syscall.ENOTDIR
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return badValue(opt, s, fmt.Sprintf("cannot use directory %s: %v", dir, err))
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

// nsGetNSType is NS_GET_NSTYPE, _IO(0xb7, 0x3) (Linux 4.11): the kind of
// namespace a namespace file is (a CLONE_NEW* flag).
const nsGetNSType = 0xb703

// userNSFile is nsFile for a user namespace (--userns): the file must be
// one, or the join would fail later with nsenter's message rather than
// one line of ours. A kernel that cannot tell (before 4.11) passes it.
func userNSFile(opt, s string) (string, error) {
	s, err := nsFile(opt, s)
	if err != nil {
		return "", err
	}
	f, err := os.Open(s)
	if err != nil {
		reason := "cannot open it"
		if errors.Is(err, os.ErrPermission) {
			reason = "permission denied"
		}
		return "", badValue(opt, s, reason)
	}
	defer f.Close()
	t, err := unix.IoctlRetInt(int(f.Fd()), nsGetNSType)
	switch {
	case errors.Is(err, unix.ENOTTY):
		return "", badValue(opt, s, "not a namespace file")
	case err == nil && t != unix.CLONE_NEWUSER:
		return "", badValue(opt, s, "not a user namespace")
	}
	return s, nil
}
