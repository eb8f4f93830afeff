package ns

// Attach mode's targets: a --netns argument or a process's namespaces turned
// into paths that are checked to be network namespaces.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// NetNSDir is where ip-netns(8) and podman keep named network namespaces.
const NetNSDir = "/run/netns"

// ResolveNetNS turns a --netns argument into a path: a NAME (no slash)
// means NetNSDir/NAME, anything else is a path, made absolute. It checks
// that the result exists and is a network namespace; errors are
// *EnterError.
func ResolveNetNS(arg string) (string, error) {
	var path string
	switch {
	case arg == "":
		return "", &EnterError{Path: arg, Op: "resolve", Err: errors.New("empty namespace name")}
	case !strings.ContainsRune(arg, '/'):
		if arg == "." || arg == ".." {
			return "", &EnterError{Path: arg, Op: "resolve", Err: ErrNotNetNS}
		}
		path = filepath.Join(NetNSDir, arg)
	default:
		abs, err := filepath.Abs(arg)
		if err != nil {
			return "", &EnterError{Path: arg, Op: "resolve", Err: err}
		}
		path = abs
	}
	f, err := openNetNS(path)
	if err != nil {
		return "", err
	}
	f.Close()
	return path, nil
}

// ProcessNetNS returns the network and user namespace paths of process pid
// (/proc/PID/ns/net and /proc/PID/ns/user), after checking that the process
// exists and its network namespace can be opened. A missing process gives
// an error wrapping ErrNoProcess; others are *EnterError.
func ProcessNetNS(pid int) (netns, userns string, err error) {
	if pid <= 0 {
		return "", "", fmt.Errorf("ns: invalid PID %d", pid)
	}
	dir := "/proc/" + strconv.Itoa(pid)
	st, err := readProcStat(dir + "/stat")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("ns: process %d: %w", pid, ErrNoProcess)
		}
		return "", "", fmt.Errorf("ns: process %d: %w", pid, err)
	}
	if st.state == 'Z' || st.state == 'X' {
		return "", "", fmt.Errorf("ns: process %d has exited: %w", pid, ErrNoProcess)
	}
	netns, userns = dir+"/ns/net", dir+"/ns/user"
	f, err := openNetNS(netns)
	if err != nil {
		return "", "", err
	}
	f.Close()
	return netns, userns, nil
}

// procStat holds the fields of /proc/PID/stat we use.
type procStat struct {
	state     byte
	startTime uint64 // clock ticks after boot: with the PID, names one process
}

func readProcStat(path string) (procStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// parseProcStat parses /proc/PID/stat. The command name (field 2) may
// contain spaces and parentheses, so fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("ns: malformed /proc stat: no command name")
	}
	// Field 3 (state) is first after ") "; starttime is field 22.
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return procStat{}, errors.New("ns: malformed /proc stat: too few fields")
	}
	// The state is one ASCII letter (R, S, D, Z, T, t, X, I, ...); anything
	// else means the line is not what we think it is.
	if st := fields[0]; len(st) != 1 || !('A' <= st[0] && st[0] <= 'Z' || 'a' <= st[0] && st[0] <= 'z') {
		return procStat{}, fmt.Errorf("ns: malformed /proc stat state %q", st)
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("ns: malformed /proc stat start time: %w", err)
	}
	return procStat{state: fields[0][0], startTime: start}, nil
}
