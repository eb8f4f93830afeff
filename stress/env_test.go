package stress

// The fixture: a throwaway host namespace (nstest.HostNS), a namespace made
// the way a user makes one (unshare -Urn as uid 65534), echo servers on
// both sides, gopasta attached to it as uid 65534 with the options of the
// reliability measurements (docs/reliability.md), and what the test reads
// of gopasta: its exit, its log, its descriptors and its memory.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// The namespace's address and the ports: the namespace's servers listen on
// nsPort, forwarded from the host with -t; the host's on hostPort,
// forwarded from the namespace's loopback with -T. UDP is forwarded by
// -u auto and -U auto, pasta's defaults when only -t and -T are given.
const (
	nsAddr   = "192.0.2.2"
	nsPort   = 5401
	hostPort = 5302
)

// gopastaArgs are the options of the reliability measurements
// (docs/reliability.md); the suite adds
// -f (so that it sees gopasta's exit status and log), --stats 1 where the
// binary has it, and the namespace's PID.
var gopastaArgs = []string{"--config-net", "-a", nsAddr, "-n", "24", "-g", nstest.HostGW4,
	"-t", strconv.Itoa(nsPort), "-T", strconv.Itoa(hostPort)}

// A path is one way into gopasta: a side's generator dials target.
type path struct {
	name string
	ns   bool   // the generator runs in the namespace (else in the host namespace)
	dst  string // HOST:PORT
}

// The four TCP paths: the namespace to the host's address over the TAP and
// to host loopback spliced (-T); the host to the namespace over the TAP
// (from 192.0.2.1, not loopback) and spliced (from 127.0.0.1, -t).
var (
	nsToHostTAP    = path{"ns->host tap", true, fmt.Sprintf("%s:%d", nstest.HostAddr4, hostPort)}
	nsToHostSplice = path{"ns->host splice", true, fmt.Sprintf("127.0.0.1:%d", hostPort)}
	hostToNSTAP    = path{"host->ns tap", false, fmt.Sprintf("%s:%d", nstest.HostAddr4, nsPort)}
	hostToNSSplice = path{"host->ns splice", false, fmt.Sprintf("127.0.0.1:%d", nsPort)}
	allPaths       = []path{nsToHostTAP, nsToHostSplice, hostToNSTAP, hostToNSSplice}
)

// targets are the generator arguments for paths of one side, over proto
// ("tcp" or "udp").
func targets(ns bool, protos ...string) []string {
	var out []string
	for _, proto := range protos {
		for _, p := range allPaths {
			if p.ns == ns {
				out = append(out, proto+":"+p.dst)
			}
		}
	}
	return out
}

const (
	// serverProcs is how many processes serve each side's port: 20,000
	// connections over 3 stay within each one's descriptor limit.
	serverProcs = 3
	// perHoldProc is how many connections one hold process makes at most,
	// for the same reason.
	perHoldProc = 7000
	// fdSlack is how far above its baseline gopasta's descriptors may stay
	// after a load: the splice path's pipe pool holds up to 16 idle pipes
	// (32 descriptors) and its pool of namespace sockets refills 16 at a
	// time; both are warmed before the baseline, so this is a bound, not
	// what is expected.
	fdSlack = 48
	// settleTCP bounds the wait for gopasta's descriptors after a TCP load.
	settleTCP = 10 * time.Second
	// probeTimeout bounds the wait for a fresh connection to work after a
	// load.
	probeTimeout = 10 * time.Second
	// maxGap is the longest an established connection may go without
	// completing a round during a load.
	maxGap = 5 * time.Second
)

// suite is one gopasta under test, with its namespace and servers.
type suite struct {
	f        form
	h        *nstest.Host
	self     string
	bin      string
	gopasta  bool   // the binary is gopasta (else pasta): --stats, its UDP timeout
	version  string // the first line of its --version
	sleeper  *nstest.Proc
	gp       *nstest.Proc
	limit    int // gopasta's RLIMIT_NOFILE (soft)
	logStart int // gopasta's stderr before the current load
}

// newSuite sets up the namespaces, the servers and gopasta for the load
// called name, and waits until every path works. A set-up that fails is a
// row of the summary too.
func newSuite(t *testing.T, f form, name string) *suite {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTun(t, nstest.Nobody)
	nstest.RequireUserNS(t, nstest.Nobody)
	s := &suite{f: f, self: nstest.SelfBinary(t), bin: nstest.Binary(t)}
	v := nstest.Run(t, nstest.RootUser, s.bin, "--version")
	s.version = strings.SplitN(strings.TrimSpace(v.Stdout+v.Stderr), "\n", 2)[0]
	s.gopasta = strings.HasPrefix(s.version, "gopasta")
	s.h = nstest.HostNS(t)
	s.sleeper = s.h.Start(nstest.Nobody, "unshare", "-Urn", "sleep", "infinity")
	err := nstest.WaitFor(10*time.Second, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", s.sleeper.PID()))
		if err != nil || strings.TrimSpace(string(b)) != "sleep" {
			return fmt.Errorf("sleeper not in its namespaces yet (comm %q, %v)", b, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Both sides' generators make tens of thousands of connections to
	// one address and port in a minute or two: more ephemeral ports, and
	// TIME_WAIT reuse, so that they never run out themselves.
	for _, argv := range [][]string{
		{"sysctl", "-q", "-w", "net.ipv4.ip_local_port_range=10000 65000", "net.ipv4.tcp_tw_reuse=1"},
		{"nsenter", "-t", strconv.Itoa(s.sleeper.PID()), "-n", "sysctl", "-q", "-w", "net.ipv4.ip_local_port_range=10000 65000", "net.ipv4.tcp_tw_reuse=1"},
	} {
		if r := s.h.Run(nstest.RootUser, argv...); r.Code != 0 {
			t.Fatalf("%q: %s", argv, r)
		}
	}
	for range serverProcs {
		s.nsGen("serve", fmt.Sprintf("0.0.0.0:%d", nsPort)).waitReady(t, 20*time.Second)
		s.hostGen("serve", fmt.Sprintf("0.0.0.0:%d", hostPort)).waitReady(t, 20*time.Second)
	}
	s.startGopasta(t)
	// Ready once every path works; eight TCP probes at once per spliced
	// path fill the pipe pool, so the baseline holds it.
	err = s.probe(t, 30*time.Second, 8, "tcp")
	if err == nil {
		err = s.probe(t, 30*time.Second, 1, "udp")
	}
	// Read once it runs: until then the PID is a wrapper's.
	s.limit, _ = nofile(s.gp.PID())
	s.describe()
	if err != nil {
		survived := "set-up failed: paths not working"
		if how := s.exited(); how != "" {
			survived = "set-up failed: " + how
		}
		record(row{Load: name, Held: -1, Refused: -1, Failed: -1, Survived: survived, FDsAfter: -1, RSSAfter: -1})
		s.failWithLog(t, "%s: paths not working after start: %v", s.binName(), err)
	}
	return s
}

// binName names the binary under test in messages.
func (s *suite) binName() string {
	if s.gopasta {
		return "gopasta"
	}
	return filepath.Base(s.bin)
}

// startGopasta attaches gopasta to the sleeper's namespace, in the
// foreground, as uid 65534, through a lowered RLIMIT_NOFILE in the short
// form.
func (s *suite) startGopasta(t *testing.T) {
	t.Helper()
	var argv []string
	if s.f.limit > 0 {
		argv = append(argv, "prlimit", fmt.Sprintf("--nofile=%d:%d", s.f.limit, s.f.limit), "--")
	}
	// The seccomp report mode (GOPASTA_SECCOMP=log, and the report file)
	// reaches gopasta from the test's own environment.
	var env []string
	for _, k := range []string{"GOPASTA_SECCOMP", "GOPASTA_SECCOMP_REPORT"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if len(env) > 0 {
		argv = append(append(argv, "env"), env...)
	}
	argv = append(append(argv, s.bin), gopastaArgs...)
	argv = append(argv, "-f")
	if s.gopasta {
		argv = append(argv, "--stats", "1")
	}
	argv = append(argv, strings.Fields(os.Getenv(argsEnv))...)
	argv = append(argv, strconv.Itoa(s.sleeper.PID()))
	t.Logf("under test: %q", argv)
	s.gp = s.h.Start(nstest.Nobody, argv...)
}

// nofile reads a process's soft RLIMIT_NOFILE.
func nofile(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Max open files"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				return strconv.Atoi(fs[0])
			}
		}
	}
	return 0, fmt.Errorf("no \"Max open files\" in /proc/%d/limits", pid)
}

// gen is a generator process.
type gen struct {
	what string
	p    *nstest.Proc
}

// hostGen starts a generator in the host namespace (as root).
func (s *suite) hostGen(mode string, args ...string) *gen {
	return &gen{"host " + mode, s.h.Start(nstest.RootUser, genArgv(s.self, mode, args...)...)}
}

// nsGen starts a generator in the test's namespace, as uid 65534.
func (s *suite) nsGen(mode string, args ...string) *gen {
	argv := append([]string{"nsenter", "-t", strconv.Itoa(s.sleeper.PID()), "-U", "-n", "--preserve-credentials"},
		genArgv(s.self, mode, args...)...)
	return &gen{"namespace " + mode, s.h.Start(nstest.Nobody, argv...)}
}

// waitReady waits for the generator's "ready" line.
func (g *gen) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	err := nstest.WaitFor(timeout, func() error {
		select {
		case <-g.p.Done():
			r, _ := g.p.Wait(time.Second) // done: at once
			return nstest.Stop(fmt.Errorf("exited early: %s", r))
		default:
		}
		if o, _ := g.p.Output(); strings.Contains(o, "ready\n") {
			return nil
		}
		return errors.New("not ready")
	})
	if err != nil {
		t.Fatalf("%s: %v", g.what, err)
	}
}

// wait waits up to timeout for the generator's exit and decodes its result
// into v.
func (g *gen) wait(timeout time.Duration, v any) error {
	r, ok := g.p.Wait(timeout)
	if !ok {
		return fmt.Errorf("%s: no exit within %v", g.what, timeout)
	}
	lines := strings.Split(r.Stdout, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if js, ok := strings.CutPrefix(lines[i], "result "); ok {
			if err := json.Unmarshal([]byte(js), v); err != nil {
				return fmt.Errorf("%s: result %q: %v", g.what, js, err)
			}
			if r.Code != 0 {
				return fmt.Errorf("%s: %s", g.what, r)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: no result line: %s", g.what, r)
}

// stop ends a serve or steady generator and decodes its result into v.
func (g *gen) stop(v any) error {
	if err := g.p.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("%s: %v", g.what, err)
	}
	return g.wait(30*time.Second, v)
}

// probe checks fresh connections on every path over each of protos, both
// sides at once, par at a time per path, each retried for up to timeout.
func (s *suite) probe(t *testing.T, timeout time.Duration, par int, protos ...string) error {
	t.Helper()
	var gens []*gen
	for _, ns := range []bool{true, false} {
		args := append([]string{"-timeout", timeout.String(), "-par", strconv.Itoa(par)}, targets(ns, protos...)...)
		if ns {
			gens = append(gens, s.nsGen("probe", args...))
		} else {
			gens = append(gens, s.hostGen("probe", args...))
		}
	}
	var errs []error
	var took []string
	for _, g := range gens {
		var res probeResult
		if err := g.wait(timeout+30*time.Second, &res); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, pt := range res.Targets {
			side := "host"
			if strings.HasPrefix(g.what, "namespace") {
				side = "ns"
			}
			took = append(took, fmt.Sprintf("%s %s %dms", side, pt.Target, pt.MS))
			if !pt.OK {
				errs = append(errs, fmt.Errorf("%s -> %s: no intact echo on a fresh connection within %v (%d tries): %s", side, pt.Target, timeout, pt.Tries, pt.Err))
			}
		}
	}
	t.Logf("probes (%s, %d per path): %s", strings.Join(protos, "+"), par, strings.Join(took, ", "))
	return errors.Join(errs...)
}

// steady is the established connections, one per TCP path, that move data
// through a load.
type steady struct{ gens []*gen }

func (s *suite) startSteady(t *testing.T) *steady {
	t.Helper()
	st := &steady{gens: []*gen{s.nsGen("steady", targets(true, "tcp")...), s.hostGen("steady", targets(false, "tcp")...)}}
	for _, g := range st.gens {
		g.waitReady(t, 30*time.Second)
	}
	return st
}

// stop ends the steady connections and checks that each moved data,
// intact, throughout: no error, no round slower than maxGap. It returns a
// summary for the table.
func (st *steady) stop(t *testing.T) string {
	t.Helper()
	var rounds int64
	var gap int64
	ok, total := 0, 0
	for _, g := range st.gens {
		var res steadyResult
		if err := g.stop(&res); err != nil {
			t.Errorf("established connections: %v", err)
			continue
		}
		for _, tg := range res.Targets {
			total++
			rounds += tg.Rounds
			gap = max(gap, tg.MaxGapMS)
			switch {
			case tg.Err != "":
				t.Errorf("established connection %s (%s): broke %.1fs after it started, after %d intact rounds: %s",
					tg.Target, g.what, float64(tg.ErrAtMS)/1000, tg.Rounds, tg.Err)
			case time.Duration(tg.MaxGapMS)*time.Millisecond > maxGap:
				t.Errorf("established connection %s (%s): a round took %dms, want at most %v", tg.Target, g.what, tg.MaxGapMS, maxGap)
			default:
				ok++
			}
		}
	}
	t.Logf("established connections: %d of %d intact, %d rounds, longest gap %dms", ok, total, rounds, gap)
	return fmt.Sprintf("%d/%d, gap %.1fs", ok, total, float64(gap)/1000)
}

// procFDs counts a process's open descriptors.
func procFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(ents), nil
}

// procRSS reads a process's resident set (VmRSS) in KiB.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				return strconv.ParseInt(fs[0], 10, 64)
			}
		}
	}
	return 0, errors.New("no VmRSS")
}

// sample is one reading of gopasta's descriptors and memory.
type sample struct {
	at  time.Duration
	fds int
	rss int64 // KiB
}

// sampler reads gopasta's descriptors and memory every interval until
// end.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples []sample
}

func (s *suite) sampler(every time.Duration) *sampler {
	sm := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	pid := s.gp.PID()
	start := time.Now()
	go func() {
		defer close(sm.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			fds, err1 := procFDs(pid)
			rss, err2 := procRSS(pid)
			if err1 == nil && err2 == nil {
				sm.mu.Lock()
				sm.samples = append(sm.samples, sample{time.Since(start), fds, rss})
				sm.mu.Unlock()
			}
			select {
			case <-sm.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return sm
}

// end stops the sampler and returns its samples.
func (sm *sampler) end() []sample {
	close(sm.stop)
	<-sm.done
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.samples
}

func peaks(ss []sample) (fds int, rss int64) {
	for _, x := range ss {
		fds, rss = max(fds, x.fds), max(rss, x.rss)
	}
	return fds, rss
}

// median of the RSS of ss.
func medianRSS(ss []sample) int64 {
	if len(ss) == 0 {
		return 0
	}
	v := make([]int64, len(ss))
	for i, x := range ss {
		v[i] = x.rss
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// exited says how gopasta ended, or "" while it runs.
func (s *suite) exited() string {
	select {
	case <-s.gp.Done():
	default:
		return ""
	}
	r, _ := s.gp.Wait(time.Second) // done: at once
	if r.Signaled {
		return fmt.Sprintf("killed by %s (exit %d)", unix.SignalName(syscall.Signal(r.Code-128)), r.Code)
	}
	return fmt.Sprintf("exited with status %d", r.Code)
}

// statsLine matches gopasta's --stats lines: live flows and evictions.
var statsLine = regexp.MustCompile(`\bstats .*\btcp=(\d+) udp=(\d+) icmp=(\d+) evicted=(\d+)`)

// flowStats is one --stats line's flows.
type flowStats struct{ tcp, udp, icmp, evicted int }

// stats returns gopasta's --stats lines since the current load began.
func (s *suite) stats() []flowStats {
	_, stderr := s.gp.Output()
	var out []flowStats
	for _, m := range statsLine.FindAllStringSubmatch(stderr[min(s.logStart, len(stderr)):], -1) {
		var f flowStats
		f.tcp, _ = strconv.Atoi(m[1])
		f.udp, _ = strconv.Atoi(m[2])
		f.icmp, _ = strconv.Atoi(m[3])
		f.evicted, _ = strconv.Atoi(m[4])
		out = append(out, f)
	}
	return out
}

// statsLines returns gopasta's --stats lines since the current load
// began, as logged.
func (s *suite) statsLines() []string {
	_, stderr := s.gp.Output()
	var out []string
	for _, l := range strings.Split(stderr[min(s.logStart, len(stderr)):], "\n") {
		if statsLine.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// logLines returns gopasta's log since the current load began, without
// the --stats lines.
func (s *suite) logLines() []string {
	_, stderr := s.gp.Output()
	var out []string
	for _, l := range strings.Split(stderr[min(s.logStart, len(stderr)):], "\n") {
		if l != "" && !statsLine.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// checkLog fails on a Go panic and on a call outside the seccomp
// allowlist (reported in GOPASTA_SECCOMP=log mode, or before a kill in
// --debug's report mode) anywhere in gopasta's log so far, and logs the
// load's other lines (the first and last few).
func (s *suite) checkLog(t *testing.T) {
	t.Helper()
	_, stderr := s.gp.Output()
	if strings.Contains(stderr, "panic:") || strings.Contains(stderr, "goroutine ") {
		t.Errorf("%s's log: got a Go panic or stack trace, want none:\n%s", s.binName(), tail(stderr, 60))
	}
	var sc []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "seccomp: system call") {
			sc = append(sc, l)
		}
	}
	if len(sc) > 0 {
		t.Errorf("%s's log: got %d calls outside the seccomp allowlist, want none:\n%s", s.binName(), len(sc), strings.Join(sc, "\n"))
	}
	if lines := s.logLines(); len(lines) > 0 {
		t.Logf("%s's log during the load (%d lines besides --stats):\n%s", s.binName(), len(lines), clipLines(lines, 10))
	}
}

// clipLines joins the first and last n of lines, and says how many it
// left out between them.
func clipLines(lines []string, n int) string {
	if len(lines) <= 2*n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(slices.Concat(lines[:n], []string{fmt.Sprintf("[... %d lines]", len(lines)-2*n)}, lines[len(lines)-n:]), "\n")
}

// failWithLog fails the test now, with gopasta's log and exit.
func (s *suite) failWithLog(t *testing.T, format string, args ...any) {
	t.Helper()
	_, stderr := s.gp.Output()
	msg := fmt.Sprintf(format, args...)
	if how := s.exited(); how != "" {
		msg += "\n" + s.binName() + " " + how
	}
	t.Fatalf("%s\n%s's log:\n%s", msg, s.binName(), tail(stderr, 40))
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// waitFDs waits up to timeout for gopasta's descriptors to be at most
// bound() (re-evaluated each time), and returns the last count.
func (s *suite) waitFDs(timeout time.Duration, bound func() (int, string)) (int, error) {
	var fds int
	err := nstest.WaitFor(timeout, func() error {
		var err error
		if fds, err = procFDs(s.gp.PID()); err != nil {
			return nstest.Stop(fmt.Errorf("%s is gone: %v", s.binName(), err))
		}
		if b, why := bound(); fds > b {
			return fmt.Errorf("%s's descriptors: got %d, want at most %d (%s)", s.binName(), fds, b, why)
		}
		return nil
	})
	return fds, err
}

// row is one line of the summary table.
type row struct {
	Load                  string
	Held, Refused, Failed int // -1: not counted
	Survived              string
	FDsBefore, FDsPeak    int
	FDsAfter              int // -1: gopasta gone
	RSSBefore, RSSPeak    int64
	RSSAfter              int64 // -1: gopasta gone
	Established           string
	Took                  time.Duration
	Note                  string
	// udpExpiry, for a load that leaves UDP flows behind (they end by
	// timeout only), is how long they live; udpBound how many
	// descriptors above the baseline they may hold meanwhile, and why.
	udpExpiry time.Duration
	udpBound  func() (int, string)
}

var results struct {
	mu     sync.Mutex
	header string // what ran: the binary, its descriptor limit, the form
	rows   []row
}

func record(r row) {
	results.mu.Lock()
	results.rows = append(results.rows, r)
	results.mu.Unlock()
}

// printSummary writes the table of every load run, if any.
func printSummary(w *os.File) {
	results.mu.Lock()
	rows := slices.Clone(results.rows)
	results.mu.Unlock()
	if len(rows) == 0 {
		return
	}
	num := func(n int) string {
		if n < 0 {
			return "-"
		}
		return strconv.Itoa(n)
	}
	mib := func(k int64) string {
		if k < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(k)/1024)
	}
	fmt.Fprintf(w, "\nstress summary: %s\n\n", results.header)
	fmt.Fprintln(w, "| load | held | refused | failed | survived | fds before/peak/after | RSS MiB before/peak/after | established | took | notes |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d/%d/%s | %s/%s/%s | %s | %s | %s |\n",
			r.Load, num(r.Held), num(r.Refused), num(r.Failed), r.Survived,
			r.FDsBefore, r.FDsPeak, num(r.FDsAfter), mib(r.RSSBefore), mib(r.RSSPeak), mib(r.RSSAfter),
			r.Established, r.Took.Round(time.Second), r.Note)
	}
	fmt.Fprintln(w)
}
