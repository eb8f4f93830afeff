package run

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// raiseFileLimit gives the process as many descriptors as it may have:
// every flow and forwarded connection holds one or more, and the limits the
// loops derive their shares from (fwd's datagram flows, splice's
// connections) are read from RLIMIT_NOFILE after this. The Go runtime
// already raises the soft limit to the hard one at start (and gives
// children the soft limit they would have had); a process with
// CAP_SYS_RESOURCE over the host (root, before the sandbox drops it)
// also raises the hard limit to fs.nr_open, the most the kernel allows, as
// pasta does. It returns the limit in force.
func raiseFileLimit() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if max := nrOpen(); max > rl.Max {
		up := unix.Rlimit{Cur: max, Max: max}
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &up) == nil {
			return max
		}
	}
	if rl.Cur < rl.Max {
		up := unix.Rlimit{Cur: rl.Max, Max: rl.Max}
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &up) == nil {
			return rl.Max
		}
	}
	return rl.Cur
}

// nrOpen is fs.nr_open, the ceiling of RLIMIT_NOFILE (0 if unknown).
func nrOpen() uint64 {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
