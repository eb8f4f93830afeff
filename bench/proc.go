package main

// Processes: starting, stopping and reaping them by process group, and the
// CPU and steal time read from /proc.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a process the harness started. Every one leads its own process
// group, so stopping it also stops whatever it forked, and it is killed by
// that group's id, never by name: other benchmark and test runs share the
// machine.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuf
	done chan struct{}
	err  error
}

// live holds every proc not yet stopped, for the signal handler.
var live = struct {
	sync.Mutex
	m map[*proc]bool
}{m: map[*proc]bool{}}

// syncBuf collects a process's output and reports when a line containing a
// wanted string appears (servers say when they listen).
type syncBuf struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() < 1<<20 { // bounded: a chatty tool must not eat memory
		s.b.Write(p)
	}
	if s.want != "" && s.seen != nil && bytes.Contains(s.b.Bytes(), []byte(s.want)) {
		close(s.seen)
		s.seen = nil
	}
	return len(p), nil
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs argv in the background. When ready is not empty, start waits
// (at most readyTimeout) until the output contains it.
func start(name string, argv []string, ready string, readyTimeout time.Duration) (*proc, error) {
	p := &proc{name: name, out: &syncBuf{want: ready}, done: make(chan struct{})}
	if ready != "" {
		p.out.seen = make(chan struct{})
	}
	seen := p.out.seen
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	live.Lock()
	live.m[p] = true
	live.Unlock()
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if ready == "" {
		return p, nil
	}
	select {
	case <-seen:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before it was ready (%v): %s", name, p.err, lastLine(p.out.String()))
	case <-time.After(readyTimeout):
		p.stop()
		return nil, fmt.Errorf("%s not ready within %v: %s", name, readyTimeout, lastLine(p.out.String()))
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process group politely, then firmly; every wait is bounded.
func (p *proc) stop() {
	if p == nil {
		return
	}
	live.Lock()
	delete(live.m, p)
	live.Unlock()
	pg := p.pid()
	_ = syscall.Kill(-pg, syscall.SIGTERM)
	_ = syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(-pg, syscall.SIGKILL)
		_ = syscall.Kill(pg, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(3 * time.Second):
			warnf("%s (pid %d) did not exit after SIGKILL", p.name, pg)
		}
	}
	// Stragglers that left the group still carry it in their pgid field.
	_ = syscall.Kill(-pg, syscall.SIGKILL)
}

// wait waits up to d for the process to exit by itself, then stops it.
func (p *proc) wait(d time.Duration) {
	select {
	case <-p.done:
	case <-time.After(d):
	}
	p.stop()
}

func stopAll() {
	live.Lock()
	ps := make([]*proc, 0, len(live.m))
	for p := range live.m {
		ps = append(ps, p)
	}
	live.Unlock()
	for _, p := range ps {
		p.stop()
	}
}

// run runs argv to completion within timeout and returns its standard
// output (standard error goes into the error when it fails).
func run(timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Kill the whole group on timeout, not just the leader.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return stdout.String(), fmt.Errorf("%s: timed out after %v", strings.Join(argv, " "), timeout)
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("%s: %v: %s", shortCmd(argv), err, lastLine(stderr.String()+stdout.String()))
	}
	return stdout.String(), nil
}

func shortCmd(argv []string) string {
	s := strings.Join(argv, " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// lastLine returns the last non-empty line of s, which is where tools put
// the reason they failed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			if len(l) > 200 {
				l = l[:200] + "..."
			}
			return l
		}
	}
	return "(no output)"
}

// cpuTicks returns the user+system CPU time, in clock ticks, of the process
// tree rooted at pid: gopasta or pasta may re-exec through helpers or fork,
// and /proc/PID/stat already sums a process's threads.
func cpuTicks(root int) (int64, error) {
	tree, err := procTree(root)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range tree {
		sum += t
	}
	return sum, nil
}

// procTree returns the processes of the tree rooted at root (root itself
// and every descendant alive now), each with its user+system CPU ticks.
func procTree(root int) (map[int]int64, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	parent := map[int]int{}
	ticks := map[int]int64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		pp, t, err := parseStat(b)
		if err != nil {
			continue
		}
		parent[pid], ticks[pid] = pp, t
	}
	if _, ok := ticks[root]; !ok {
		return nil, fmt.Errorf("process %d is gone", root)
	}
	tree := map[int]int64{}
	for pid, t := range ticks {
		for q, hops := pid, 0; q > 0 && hops < 64; q, hops = parent[q], hops+1 {
			if q == root {
				tree[pid] = t
				break
			}
		}
	}
	return tree, nil
}

// checkPinned returns an error naming the first thread of the process tree
// rooted at root that may run on any CPU but cpu: a pinned row's figure is
// only the cost on one CPU if the tool's every process and thread, those it
// started after the harness started it included, stayed there.
func checkPinned(root, cpu int) error {
	tree, err := procTree(root)
	if err != nil {
		return err
	}
	want := strconv.Itoa(cpu)
	for pid := range tree {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			continue // gone meanwhile
		}
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
			if err != nil {
				continue
			}
			allowed, ok := statusField(b, "Cpus_allowed_list")
			if !ok {
				return fmt.Errorf("thread %s of process %d: no Cpus_allowed_list in its status", t.Name(), pid)
			}
			if allowed != want {
				comm, _ := statusField(b, "Name")
				return fmt.Errorf("thread %s (%s) of process %d may run on CPUs %s, not only on CPU %d", t.Name(), comm, pid, allowed, cpu)
			}
		}
	}
	return nil
}

// statusField returns the value of a "Key:\tvalue" line of a
// /proc/PID/status file.
func statusField(b []byte, key string) (string, bool) {
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

var errStat = errors.New("malformed /proc/PID/stat")

// parseStat extracts ppid and utime+stime from a /proc/PID/stat line. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(b []byte) (ppid int, ticks int64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errStat
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return 0, 0, errStat
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || ut < 0 || st < 0 {
		return 0, 0, errStat
	}
	return ppid, ut + st, nil
}

// cpuTimes is what the harness reads of the aggregate "cpu" line of
// /proc/stat, in clock ticks since boot.
type cpuTimes struct {
	// busy is user, nice, system, irq and softirq: the tool's own CPU
	// time misses work the kernel does for it in another context (a
	// loopback receive that runs in the receiving process, or in
	// ksoftirqd); the machine's busy time over the same interval is the
	// whole cost of the workload, the client, the server and the tool
	// together.
	busy int64
	// steal is the time the hypervisor ran something else while this
	// machine's virtual CPUs had work: on a VM it is how a neighbour
	// shows, as a dip in a run that no tool caused (0 where the kernel
	// does not report it).
	steal int64
	// cpus counts the per-CPU lines below the aggregate one: the CPUs
	// whose times it sums (all online ones, whatever the harness's own
	// affinity), and so what a share of "the CPUs' time" is a share of.
	cpus int
	// each holds the busy and steal times of every CPU by its number (the
	// cpuN lines): a pinned row's cost is its one CPU's busy time.
	each map[int]cpuTimes
}

// readCPUTimes reads the machine's CPU times from /proc/stat.
func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPUTimes(b)
}

var errCPUTimes = errors.New("unreadable /proc/stat")

// parseCPUTimes reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal ... (guest time is already part of
// user). Idle, iowait and steal are not work done on this machine's behalf
// by its CPUs. It reads the "cpuN" lines after it the same way.
func parseCPUTimes(b []byte) (cpuTimes, error) {
	line, rest, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) == 0 || f[0] != "cpu" {
		return cpuTimes{}, errCPUTimes
	}
	t, err := parseCPUFields(f)
	if err != nil {
		return cpuTimes{}, err
	}
	t.each = map[int]cpuTimes{}
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if len(line) > 3 && bytes.HasPrefix(line, []byte("cpu")) && line[3] >= '0' && line[3] <= '9' {
			t.cpus++
			f := strings.Fields(string(line))
			n, err := strconv.Atoi(f[0][3:])
			if err != nil || n < 0 {
				return cpuTimes{}, errCPUTimes
			}
			one, err := parseCPUFields(f)
			if err != nil {
				return cpuTimes{}, err
			}
			t.each[n] = one
		}
	}
	return t, nil
}

// parseCPUFields reads the busy and steal times of one cpu or cpuN line,
// split into fields.
func parseCPUFields(f []string) (cpuTimes, error) {
	if len(f) < 8 {
		return cpuTimes{}, errCPUTimes
	}
	field := func(i int) (int64, bool) {
		v, err := strconv.ParseInt(f[i], 10, 64)
		return v, err == nil && v >= 0
	}
	var t cpuTimes
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, ok := field(i)
		if !ok || t.busy+v < t.busy {
			return cpuTimes{}, errCPUTimes
		}
		t.busy += v
	}
	if len(f) > 8 {
		v, ok := field(8)
		if !ok {
			return cpuTimes{}, errCPUTimes
		}
		t.steal = v
	}
	return t, nil
}

// cpuOf is one CPU's times, with cpus 1 so that stealShare reads a share of
// that CPU's time.
func (t cpuTimes) cpuOf(n int) (cpuTimes, error) {
	one, ok := t.each[n]
	if !ok {
		return cpuTimes{}, fmt.Errorf("no cpu%d line in /proc/stat", n)
	}
	one.cpus = 1
	return one, nil
}

// stealShare is the share of the CPUs' time over wall that the hypervisor
// took (-1 when either reading failed, or did not count the CPUs).
func stealShare(t0, t1 cpuTimes, err0, err1 error, wall time.Duration) float64 {
	capacity := wall.Seconds() * clockTicks * float64(t1.cpus)
	if err0 != nil || err1 != nil || t1.steal < t0.steal || capacity <= 0 {
		return -1
	}
	return float64(t1.steal-t0.steal) / capacity
}

// clockTicks is USER_HZ, which is 100 on every Linux architecture Go runs
// on (the kernel scales /proc times to it regardless of CONFIG_HZ).
const clockTicks = 100

func warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// readLines is a small helper for /proc/cpuinfo-like files.
func readLines(r io.Reader) []string {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
