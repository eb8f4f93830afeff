package ns

// The namespace thread: a goroutine locked to an OS thread that joined a
// network namespace and never leaves it.

import (
	"fmt"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// A Thread is a goroutine locked to an OS thread that has joined a network
// namespace and never leaves it. Work that must happen inside the namespace
// (opening the TAP, creating namespace-side sockets, rtnetlink, reading the
// namespace's /proc/net) runs there; everything else stays in the host
// namespaces. Sockets and fds keep their namespace wherever they are used
// later, so only their creation needs the thread.
//
// Goroutines started by fn run on other OS threads and therefore NOT in the
// namespace. New OS threads never inherit the namespace either: while any
// goroutine is locked, the Go runtime clones new threads from a clean
// template thread.
//
// Only the network namespace is joined: Go cannot setns into a user
// namespace (the process is multithreaded). The kernel allows
// setns(CLONE_NEWNET) when the caller has CAP_SYS_ADMIN both over the
// namespace's owning user namespace and in its own user namespace. Root has
// both. An unprivileged user in the initial user namespace lacks the second,
// even for a namespace it created: gopasta must then run inside the owning
// user namespace (see ReexecInUserNS and SpawnConfig.NoUserNS), where it is
// privileged. No unshare(CLONE_FS) is needed beforehand: that matters only
// for joining mount namespaces (fs_struct is shared between threads), while
// the network namespace lives in the per-thread nsproxy.
//
// Inside Do, /proc/self/net shows the thread group leader's namespace; use
// /proc/thread-self/net for the namespace's tables.
type Thread struct {
	path string
	tid  int

	mu    sync.Mutex // one Do at a time: the thread is serial anyway
	work  chan func()
	reply chan doResult
	quit  chan struct{}
	gone  chan struct{}
	once  sync.Once
}

type doResult struct {
	err      error
	panicked bool
	panicVal any
}

// Enter starts a Thread inside the network namespace at netnsPath
// (/proc/PID/ns/net, /run/netns/NAME, ...). Errors are *EnterError.
func Enter(netnsPath string) (*Thread, error) {
	f, err := openNetNS(netnsPath)
	if err != nil {
		return nil, err
	}
	t := &Thread{
		path:  netnsPath,
		work:  make(chan func()),
		reply: make(chan doResult),
		quit:  make(chan struct{}),
		gone:  make(chan struct{}),
	}
	started := make(chan error, 1)
	goLocked(func() { t.loop(f, started) })
	if err := <-started; err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Thread) loop(f *os.File, started chan<- error) {
	defer close(t.gone)
	err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
	f.Close()
	if err != nil {
		// setns failed, so the thread never changed namespace and can go
		// back to the runtime.
		runtime.UnlockOSThread()
		started <- &EnterError{Path: t.path, Op: "setns", Err: err}
		return
	}
	t.tid = unix.Gettid()
	started <- nil
	// From here on the goroutine returns without UnlockOSThread, so the
	// runtime terminates the OS thread instead of reusing it elsewhere.
	for {
		select {
		case fn := <-t.work:
			fn()
		case <-t.quit:
			return
		}
	}
}

// Path returns the namespace path the thread was entered with.
func (t *Thread) Path() string { return t.path }

// Do runs fn on the thread, inside the namespace, and returns its error. A
// panic in fn is re-raised in the caller. After Close, Do returns
// ErrThreadClosed without running fn. Calling Do from inside fn deadlocks.
func (t *Thread) Do(fn func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	job := func() {
		var r doResult
		func() {
			defer func() {
				if p := recover(); p != nil {
					r = doResult{panicked: true, panicVal: p}
				}
			}()
			r.err = fn()
		}()
		t.reply <- r
	}
	select {
	case t.work <- job:
	case <-t.quit:
		return ErrThreadClosed
	}
	r := <-t.reply
	if r.panicked {
		panic(r.panicVal)
	}
	return r.err
}

// Close ends the thread; the runtime discards its OS thread, so the
// namespace never leaks to unrelated goroutines. Close waits for a running
// Do to finish, except when called from inside Do itself. It is safe to call
// more than once.
func (t *Thread) Close() {
	t.once.Do(func() { close(t.quit) })
	if unix.Gettid() != t.tid {
		<-t.gone
	}
}

// goLocked runs fn on a new goroutine locked to an OS thread other than the
// process's main thread; fn unlocks it or not. The main thread must stay in
// the host namespace: /proc/self/ns/net and /proc/self/net follow it, and
// the runtime never lets it exit, so it could not be discarded either.
func goLocked(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			fn()
			return
		}
		// We hold the main thread, so a goroutine locking now gets another.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			fn()
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
}

// openNetNS opens path and makes sure it is a network namespace, so a wrong
// path gets a precise error instead of setns's bare EINVAL.
func openNetNS(path string) (*os.File, error) {
	if path == "" {
		return nil, &EnterError{Path: path, Op: "open", Err: os.ErrNotExist}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &EnterError{Path: path, Op: "open", Err: unwrapPathError(err)}
	}
	if err := checkNetNS(f); err != nil {
		f.Close()
		return nil, &EnterError{Path: path, Op: "check", Err: err}
	}
	return f, nil
}

// checkNetNS tells a network namespace from other files: nsfs (the file
// system behind /proc/PID/ns/* and their bind mounts) first, then the
// namespace type. Kernels before 4.11 lack NS_GET_NSTYPE; there setns itself
// rejects other namespace types with EINVAL.
func checkNetNS(f *os.File) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return err
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return ErrNotNetNS
	}
	typ, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	switch {
	case err == unix.ENOTTY || err == unix.EINVAL:
		return nil
	case err != nil:
		return err
	case typ != unix.CLONE_NEWNET:
		return fmt.Errorf("%w (it is a %s namespace)", ErrNotNetNS, nsTypeName(typ))
	}
	return nil
}

func nsTypeName(typ int) string {
	switch typ {
	case unix.CLONE_NEWUSER:
		return "user"
	case unix.CLONE_NEWPID:
		return "pid"
	case unix.CLONE_NEWNS:
		return "mount"
	case unix.CLONE_NEWUTS:
		return "uts"
	case unix.CLONE_NEWIPC:
		return "ipc"
	case unix.CLONE_NEWCGROUP:
		return "cgroup"
	case unix.CLONE_NEWTIME:
		return "time"
	}
	return fmt.Sprintf("type %#x", typ)
}

// unwrapPathError drops os.PathError's own "open PATH:" prefix, since
// EnterError already names the path and the operation.
func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
