package nstest

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// procCongestion is the calling thread's network namespace's default TCP
// congestion control (/proc/sys/net follows the thread's namespace).
const procCongestion = "/proc/sys/net/ipv4/tcp_congestion_control"

// CongestionNotReno returns the congestion control new TCP sockets of the
// calling thread's network namespace get, for tests of code that switches
// sockets to reno: they can tell the switch from the default only if the
// default is something else. When it is reno and the thread is in a
// namespace of the test's own (EnterNetns, UnshareNetns), it sets another
// algorithm the kernel has there; when the default stays reno, it skips
// tb. The host's own setting is never written.
func CongestionNotReno(tb testing.TB) string {
	tb.Helper()
	def := readTrimmed(tb, procCongestion)
	if def != "reno" {
		return def
	}
	if !ownNetns() {
		tb.Skip("the host's default TCP congestion control is reno: a switch to reno cannot be seen")
	}
	for _, alg := range strings.Fields(readTrimmed(tb, "/proc/sys/net/ipv4/tcp_available_congestion_control")) {
		if alg != "reno" && os.WriteFile(procCongestion, []byte(alg), 0) == nil {
			return alg
		}
	}
	tb.Skip("no TCP congestion control but reno in this namespace: a switch to reno cannot be seen")
	return ""
}

// ownNetns reports whether the calling thread's network namespace is not
// the one the test process started in (false where either cannot be
// read).
func ownNetns() bool {
	var mine unix.Stat_t
	if startNetns.Ino == 0 || unix.Stat("/proc/thread-self/ns/net", &mine) != nil {
		return false
	}
	return mine.Ino != startNetns.Ino || mine.Dev != startNetns.Dev
}

// startNetns is the network namespace the test process started in, read
// before any test moves a thread.
var startNetns = func() unix.Stat_t {
	var st unix.Stat_t
	_ = unix.Stat("/proc/thread-self/ns/net", &st)
	return st
}()

func readTrimmed(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Skipf("no %s: %v", path, err)
	}
	return strings.TrimSpace(string(b))
}
