package nstest

// Fresh, anonymous network namespaces for unit tests, entered by a thread
// of the test process (unshare(CLONE_NEWNET)): nothing is named, so tests
// running at once on the machine cannot collide, and a namespace goes
// with the last thread or socket in it.

import (
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// EnterNetns locks the calling goroutine to its thread and moves the
// thread into a fresh network namespace, with nothing up in it; the
// returned function moves it back and unlocks it. If the way back fails
// the thread stays locked, so that the runtime ends it rather than reuse
// a thread in the wrong namespace. Callers defer the restore on the same
// goroutine. It skips tb where the thread may not unshare (no
// CAP_SYS_ADMIN).
func EnterNetns(tb testing.TB) (restore func()) {
	tb.Helper()
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		tb.Skipf("cannot open own netns: %v", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		unix.Close(orig)
		runtime.UnlockOSThread()
		tb.Skipf("unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN: %v", err)
	}
	return func() {
		defer unix.Close(orig)
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			tb.Errorf("restore netns: %v (thread left locked)", err)
			return
		}
		runtime.UnlockOSThread()
	}
}

// UnshareNetns moves the calling goroutine for good into a fresh network
// namespace and brings its loopback up: the goroutine stays locked to its
// thread, which ends with it (a test's goroutine ends with the test).
// fresh reports whether the thread moved: where it may not unshare (no
// CAP_SYS_ADMIN) it stays, locked still, in the namespace it was in, and
// err says why; err is also lo's failure to come up.
func UnshareNetns() (fresh bool, err error) {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return false, fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
	}
	if err := LoopbackUp(); err != nil {
		return true, fmt.Errorf("bringing lo up in a fresh namespace: %w", err)
	}
	return true, nil
}

// LoopbackUp brings lo up in the calling thread's network namespace.
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// NetnsThread is a goroutine locked to an OS thread that moved into a
// fresh network namespace with its loopback up (UnshareNetns): a test's
// stand-in for a namespace of its own, such as gopasta's namespace thread
// or a host side whose ports and sysctls no other test shares. Sockets
// created in Do belong to its namespace for good, wherever they are used
// afterwards.
type NetnsThread struct {
	work chan func()
	err  error  // why the thread is not in a fresh namespace
	ino  uint64 // the inode of the thread's network namespace
}

// NewNetnsThread starts the thread; it ends in t.Cleanup, and its
// namespace with it. Where the thread may not unshare (no CAP_SYS_ADMIN)
// it serves Do from the test process's own namespace, and Fresh says why.
func NewNetnsThread(t testing.TB) *NetnsThread {
	t.Helper()
	n := &NetnsThread{work: make(chan func())}
	started := make(chan error, 1)
	go func() {
		// The thread is never unlocked: it ends with the goroutine,
		// taking its namespace along.
		fresh, err := UnshareNetns()
		if !fresh {
			n.err, err = err, nil
		}
		var st unix.Stat_t
		if err == nil {
			err = unix.Stat("/proc/thread-self/ns/net", &st)
		}
		n.ino = st.Ino
		started <- err
		for f := range n.work {
			f()
		}
	}()
	t.Cleanup(func() { close(n.work) })
	if err := <-started; err != nil {
		t.Fatalf("namespace thread: %v", err)
	}
	return n
}

// Fresh is nil when the thread is in a fresh namespace of its own, else
// the reason it is not.
func (n *NetnsThread) Fresh() error { return n.err }

// Ino is the inode number of the thread's network namespace.
func (n *NetnsThread) Ino() uint64 { return n.ino }

// Do runs f on the thread and returns once f has.
func (n *NetnsThread) Do(f func()) {
	done := make(chan struct{})
	n.work <- func() { f(); close(done) }
	<-done
}
