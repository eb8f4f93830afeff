package nstest

// Processes a test starts: their output, signals, waits bounded by timeouts,
// and their end checked and cleaned up.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DefaultHangup gives the programs a test binary starts from now on
// SIGHUP's default disposition, even when the test binary itself was started
// with it ignored (under nohup): exec keeps an ignored signal ignored but
// resets a caught one to the default, and tests of hang-up handling expect
// gopasta and its command to die of one. Call it once, before any test.
func DefaultHangup() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
}

// Result is how a command ended and what it printed.
type Result struct {
	Stdout, Stderr string
	// Code is the exit status, or 128+signal when the process was killed by
	// a signal (as a shell reports it), or -1 if it never ran.
	Code int
	// Signaled is set when the process died of a signal.
	Signaled bool
	// TimedOut is set when the context expired and the group was killed.
	TimedOut bool
	// PipesHeld is set when the process exited but something it started
	// kept its stdout or stderr open for more than PipeGrace: a daemon that
	// did not detach its stdio (podman's CombinedOutput would hang on it).
	PipesHeld bool
	// Err is any other failure to run or wait.
	Err error
}

// String summarises the result for failure messages.
func (r Result) String() string {
	return fmt.Sprintf("exit %d (signaled=%v timedout=%v pipesheld=%v err=%v)\nstdout: %q\nstderr: %q",
		r.Code, r.Signaled, r.TimedOut, r.PipesHeld, r.Err, clip(r.Stdout), clip(r.Stderr))
}

// clip keeps failure messages readable when a program dumps its usage.
func clip(s string) string {
	const max = 1500
	if len(s) <= max {
		return s
	}
	return s[:max] + fmt.Sprintf("... [%d more bytes]", len(s)-max)
}

// PipeGrace is how long Wait keeps reading stdout/stderr after the process
// exited, for output still buffered in descendants.
const PipeGrace = 3 * time.Second

// Proc is a command running in the background.
type Proc struct {
	cmd            *exec.Cmd
	stdout, stderr SyncBuffer
	done           chan struct{}
	res            Result
}

// PID is the process ID (the command's own, see Host.Command).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Output returns what the process printed so far.
func (p *Proc) Output() (stdout, stderr string) { return p.stdout.String(), p.stderr.String() }

// Wait waits up to timeout for the process to exit. ok is false on timeout
// (the process keeps running; cleanup kills it).
func (p *Proc) Wait(timeout time.Duration) (r Result, ok bool) {
	select {
	case <-p.done:
		return p.res, true
	case <-time.After(timeout):
		return Result{Code: -1, Stdout: p.stdout.String(), Stderr: p.stderr.String()}, false
	}
}

// Signal sends sig to the process (not its group).
func (p *Proc) Signal(sig syscall.Signal) error { return syscall.Kill(p.PID(), sig) }

func (p *Proc) wait() Result {
	<-p.done
	return p.res
}

// kill SIGKILLs the process group and reaps the leader, bounded so a stuck
// cleanup cannot hang the test binary.
func (p *Proc) kill() {
	select {
	case <-p.done:
		// The leader is gone; members of its group may not be.
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		return
	default:
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	_ = syscall.Kill(p.PID(), syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// prepare gives cmd the identity's environment, a directory every uid can
// enter, and its own process group.
func prepare(cmd *exec.Cmd, u User) {
	cmd.Env = u.env()
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = PipeGrace
}

// start runs cmd, which was made with ctx, and reaps it in the background.
func start(ctx context.Context, cmd *exec.Cmd) (*Proc, error) {
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout = &p.stdout
	cmd.Stderr = &p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		err := cmd.Wait()
		r := Result{Code: -1}
		if ps := cmd.ProcessState; ps != nil {
			r.Code = ps.ExitCode()
			if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				r.Signaled = true
				r.Code = 128 + int(ws.Signal())
			}
		}
		var ee *exec.ExitError
		switch {
		case errors.Is(err, exec.ErrWaitDelay):
			r.PipesHeld = true
		case err != nil && !errors.As(err, &ee):
			r.Err = err
		}
		if ctx.Err() != nil {
			r.TimedOut = true
		}
		r.Stdout, r.Stderr = p.stdout.String(), p.stderr.String()
		p.res = r
		close(p.done)
	}()
	return p, nil
}

// SyncBuffer is a bytes.Buffer that one goroutine (a process's output, a
// logger) writes while another reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// PIDAlive reports whether pid exists and is not a zombie. Zombies count as
// gone: a daemon re-parented to a PID 1 that does not reap (containers) stays
// a zombie forever, but it has exited. A process is gone only when all its
// threads are: a killed multi-threaded process's leader shows as a zombie
// while the other threads still exit, and until the last one has, its
// descriptors (a listening socket, say) are still open.
func PIDAlive(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	if tasks, err := os.ReadDir(dir + "/task"); err == nil {
		for _, t := range tasks {
			if taskAlive(dir + "/task/" + t.Name() + "/stat") {
				return true
			}
		}
		return false
	}
	return taskAlive(dir + "/stat")
}

// taskAlive reports whether the task whose stat file is path exists and is
// neither a zombie nor dead.
func taskAlive(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	// The state follows the last ')' (the command name may contain any byte).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	st := s[i+2]
	return st != 'Z' && st != 'X'
}

// WaitGone polls until pid is gone (see PIDAlive) and returns how long that
// took, or an error after timeout.
func WaitGone(pid int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		if !PIDAlive(pid) {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("pid %d still alive after %v", pid, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitFor polls cond every 50ms until it returns nil or timeout passes, and
// returns cond's last error. A cond error wrapped with Stop ends the wait at
// once (the thing waited for can no longer happen).
func WaitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var s stopError
		if errors.As(err, &s) {
			return s.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ReadPIDFile reads a pid file as gopasta (and pasta) write it: a decimal
// number and a newline.
func ReadPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: got %q, want a positive decimal PID", path, b)
	}
	return pid, nil
}

// KillOnCleanup SIGKILLs pid in t.Cleanup unless it is already gone, for
// processes the test did not start itself (daemons found via a pid file).
func KillOnCleanup(t testing.TB, pid int) {
	t.Cleanup(func() {
		if PIDAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_, _ = WaitGone(pid, 5*time.Second)
		}
	})
}

type stopError struct{ err error }

func (s stopError) Error() string { return s.err.Error() }

// Stop marks a WaitFor condition error as final.
func Stop(err error) error { return stopError{err} }
