// Command prog is the program TestAnalyze derives: confine is the point,
// and each system call says whether it can be made after it.
package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// thread runs what Do gives it on its own goroutine, as ns.Thread does.
type thread struct{ work chan func() }

func (t *thread) Do(fn func()) {
	done := make(chan struct{})
	t.work <- func() { fn(); close(done) }
	<-done
}

func (t *thread) loop() {
	for fn := range t.work {
		fn()
	}
}

// withFd calls f, as (*os.rawConn).Read does.
func withFd(f func(fd int)) { f(3) }

// holder keeps a function value in a field, as internal/epoll keeps its
// poll function: what a call of the field can run is what was stored in it.
type holder struct{ cb func(fd int) }

// confine is the point; the call it makes is before it.
func confine() { unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }

// child is a process that exits before the point.
func child() {
	go func() { unix.Chroot("/") }()
	os.Exit(0)
}

func ticker() { unix.Getppid() } // a goroutine started before: after

func main() {
	if len(os.Args) > 5 {
		child()
	}
	t := &thread{work: make(chan func())}
	go t.loop()
	t.Do(func() { unix.Mkdirat(unix.AT_FDCWD, "x", 0o700) }) // before
	withFd(func(fd int) { unix.Fchdir(fd) })                 // before
	go ticker()
	unix.Getuid() // before
	confine()
	defer unix.Sync()                       // after
	t.Do(func() { unix.Getgid() })          // after
	withFd(func(fd int) { unix.Fsync(fd) }) // after
	unix.Getpgid(0)                         // after
	h := &holder{}
	h.cb = func(fd int) { unix.Fdatasync(fd) } // after
	withFd(h.cb)
}
