package nstest

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RunOutOfDescriptors runs f with the test process out of descriptors: the
// soft RLIMIT_NOFILE at the lowest free descriptor number, so that every
// call that would open one fails with EMFILE, and restores the limit when
// f returns. Descriptors f needs must be open before. It first waits (up
// to 5 s) for the process's descriptor count to settle, so that what
// earlier tests left closing does not free a number below the limit while
// f runs.
func RunOutOfDescriptors(t testing.TB, f func()) {
	t.Helper()
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	last := count()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		n := count()
		if n == last {
			break
		}
		last = n
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lowest, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(lowest)
	low := old
	low.Cur = uint64(lowest) // every descriptor below is in use: none left
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}()
	f()
}
