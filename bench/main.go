// Command bench compares gopasta with pasta, slirp4netns and a plain veth
// pair on identical workloads, each inside a throwaway "host" network namespace,
// with every workload process running as uid 65534, and prints a markdown
// table of medians, ratios and the CPU time each tool spent per GB moved.
//
//	go run ./bench            # needs root; see `make bench` and docs/performance.md
//	go run ./bench -quick     # one short run of a subset, about two minutes
//
// A tool or path that is missing, unsupported or failing gives "n/a" with the
// reason in a footnote; nothing in one row aborts the others.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

type options struct {
	runs    int
	secs    int
	quick   bool
	tools   []string
	filter  *regexp.Regexp
	gopasta string
	pasta   string
	// pastaVersion names the pasta compared with when its --version
	// cannot (a build from a source tree without git: "unknown version").
	pastaVersion string
	// pinCPU is the CPU the pinned rows run on.
	pinCPU     int
	out        string
	doc        string
	commandStr string
	// steal is the share of the CPUs' time the hypervisor took over the
	// whole run (-1: not read), for the report's header.
	steal float64
}

func main() {
	o := options{}
	tools := flag.String("tools", "gopasta,pasta,slirp4netns,veth", "tools to compare, comma-separated")
	filter := flag.String("filter", "", "only rows whose label or id matches this regexp")
	flag.IntVar(&o.runs, "runs", 3, "runs per row (the table shows the median)")
	flag.IntVar(&o.secs, "time", 5, "seconds per run (iperf3 -t, rr -time)")
	flag.BoolVar(&o.quick, "quick", false, "the two-minute version: one run of 3 s per row, IPv4 subset (overrides -runs and -time unless given)")
	flag.StringVar(&o.gopasta, "gopasta", "./gopasta", "gopasta binary (built with `go build .` when missing)")
	flag.StringVar(&o.pasta, "pasta", "pasta", "pasta binary")
	flag.StringVar(&o.pastaVersion, "pasta-version", "", "the version of -pasta, for the report, when its --version does not say (e.g. a commit)")
	flag.IntVar(&o.pinCPU, "pin-cpu", 0, "the CPU that the pinned rows run the tool, client and server on")
	flag.StringVar(&o.out, "out", "bench/results/latest.md", "write the report here too (empty: stdout only)")
	flag.StringVar(&o.doc, "doc", "", "also replace the results section of this markdown file (docs/performance.md)")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		if !set["runs"] {
			o.runs = 1
		}
		if !set["time"] {
			o.secs = 3
		}
	}
	if o.runs < 1 || o.secs < 1 {
		fatalf("-runs and -time must be at least 1")
	}
	if o.pinCPU < 0 {
		fatalf("-pin-cpu must be a CPU number")
	}
	o.tools = canonicalOrder(strings.Split(*tools, ","))
	if *filter != "" {
		re, err := regexp.Compile(*filter)
		if err != nil {
			fatalf("-filter: %v", err)
		}
		o.filter = re
	}
	o.commandStr = "go run ./bench " + strings.Join(os.Args[1:], " ")
	if os.Geteuid() != 0 {
		fatalf("needs root: it creates network namespaces and veth pairs (the tools themselves run as uid 65534)")
	}
	os.Exit(runBench(o))
}

// canonicalOrder puts the tools in the table's fixed column order, whatever
// order -tools named them in; names it does not know go last (and fail).
func canonicalOrder(names []string) []string {
	rank := map[string]int{"gopasta": 0, "pasta": 1, "slirp4netns": 2, "veth": 3}
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		ri, ok := rank[out[i]]
		if !ok {
			ri = len(rank)
		}
		rj, ok := rank[out[j]]
		if !ok {
			rj = len(rank)
		}
		return ri < rj
	})
	return out
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(2)
}

// cleanups run in reverse order on the way out, including on SIGINT/SIGTERM.
var cleanups []func()

func cleanup() {
	stopAll()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanups = nil
}

func runBench(o options) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		warnf("%v: cleaning up", s)
		cleanup()
		os.Exit(130)
	}()
	defer cleanup()

	tmp, err := os.MkdirTemp("", "gopasta-bench-")
	if err != nil {
		warnf("%v", err)
		return 1
	}
	cleanups = append(cleanups, func() { _ = os.RemoveAll(tmp) })
	// uid 65534 must reach the binaries and write the slirp4netns socket.
	if err := os.Chmod(tmp, 0o777); err != nil {
		warnf("%v", err)
		return 1
	}
	rrBin, err := buildRR(tmp)
	if err != nil {
		warnf("building bench/rr: %v", err)
		return 1
	}
	gopastaBin, gopastaErr := stageGopasta(o.gopasta, tmp)
	if gopastaErr != nil {
		warnf("gopasta: %v", gopastaErr)
	}
	pastaBin, pastaErr := stagePasta(o.pasta, tmp)
	if pastaErr != nil && slices.Contains(o.tools, "pasta") {
		warnf("pasta: %v", pastaErr)
	}
	bins := binaries{gopasta: gopastaBin, gopastaErr: gopastaErr, pasta: pastaBin, pastaErr: pastaErr}

	cases := quickCases()
	if !o.quick {
		cases = fullCases()
	}
	if o.filter != nil {
		var keep []testCase
		for _, c := range cases {
			if o.filter.MatchString(c.label()) || o.filter.MatchString(c.id()) {
				keep = append(keep, c)
			}
		}
		cases = keep
	}
	if len(cases) == 0 {
		warnf("no rows match -filter")
		return 2
	}
	for _, c := range cases {
		if !c.pinned {
			continue
		}
		t, err := readCPUTimes()
		if err == nil {
			_, err = t.cpuOf(o.pinCPU)
		}
		if err != nil {
			warnf("-pin-cpu %d: %v", o.pinCPU, err)
			return 2
		}
		break
	}

	// Every tool has a host namespace of its own, so that all the tools'
	// instances can be up at once and the rows go round the tools.
	hosts := map[string]*hostNS{}
	for _, tool := range o.tools {
		h, err := newHostNS()
		if err != nil {
			warnf("%v", err)
			return 1
		}
		cleanups = append(cleanups, h.close)
		hosts[tool] = h
	}

	res := newResults(o.tools)
	began := time.Now()
	beganTimes, beganErr := readCPUTimes()
	// The rows go in groups that share the tools' instances: one per MTU,
	// and the pinned rows, whose instances run on one CPU, after them.
	type group struct {
		mtu    int
		pinned bool
	}
	for _, g := range []group{{mtuBig, false}, {mtuSmall, false}, {mtuBig, true}, {mtuSmall, true}} {
		var mine []testCase
		ids := map[string]bool{}
		for _, c := range cases {
			if c.mtu == g.mtu && c.pinned == g.pinned {
				mine = append(mine, c)
				ids[c.id()] = true
			}
		}
		if len(mine) == 0 {
			continue
		}
		pin := pinTo{pinned: g.pinned, cpu: o.pinCPU}
		var trs []*toolRun
		for _, tool := range o.tools {
			trs = append(trs, startToolRun(hosts[tool], tool, g.mtu, pin, bins, tmp))
		}
		// An interrupt also takes down the instances (the veth
		// reference's namespace is not one of the host namespaces).
		cleanups = append(cleanups, func() {
			for _, tr := range trs {
				tr.close()
			}
		})
		// Each row is measured through every tool in turn, one tool right
		// after the other, and the order of the tools turns by one each
		// run. This machine's speed moves by tens of per cent over seconds
		// (a shared host: the same work can take twice the CPU time in one
		// 5-second run as in the next), so the runs of two tools being
		// compared are best taken close together, and no tool always goes
		// first.
		for run := 0; run < o.runs; run++ {
			for _, c := range mine {
				for k := range trs {
					trs[(k+run)%len(trs)].measure(c, ids, res, o.secs, rrBin)
				}
			}
		}
		for _, tr := range trs {
			tr.close()
		}
	}
	elapsed := time.Since(began)
	endTimes, endErr := readCPUTimes()
	o.steal = stealShare(beganTimes, endTimes, beganErr, endErr, elapsed)

	report := renderReport(o, cases, res, machineInfo(), versions(o, gopastaBin), elapsed)
	fmt.Print(report)
	if o.out != "" {
		err := os.MkdirAll(filepath.Dir(o.out), 0o755)
		if err == nil {
			err = os.WriteFile(o.out, []byte(report), 0o644)
		}
		if err != nil {
			warnf("writing %s: %v", o.out, err)
		}
	}
	if o.doc != "" {
		if err := updateDoc(o.doc, report); err != nil {
			warnf("updating %s: %v", o.doc, err)
		}
	}
	return 0
}

// toolRun is one tool at one MTU: its own host namespace and its
// instance, which is started once and, after a crash, again once per row.
type toolRun struct {
	tool  string
	h     *hostNS
	in    *instance // nil after a failed restart
	err   error     // could not start: this tool's rows of the MTU are n/a
	start func() (*instance, error)
}

// binaries are the staged tool binaries, or why one is missing.
type binaries struct {
	gopasta, pasta       string
	gopastaErr, pastaErr error
}

func startToolRun(h *hostNS, tool string, mtu int, pin pinTo, bins binaries, tmp string) *toolRun {
	tr := &toolRun{tool: tool, h: h}
	tr.start = func() (*instance, error) {
		switch tool {
		case "gopasta":
			if bins.gopastaErr != nil {
				return nil, bins.gopastaErr
			}
			return startPastaLike("gopasta", bins.gopasta, h, mtu, pin)
		case "pasta":
			if bins.pastaErr != nil {
				return nil, bins.pastaErr
			}
			return startPastaLike("pasta", bins.pasta, h, mtu, pin)
		case "slirp4netns":
			if _, err := exec.LookPath("slirp4netns"); err != nil {
				return nil, fmt.Errorf("slirp4netns not installed")
			}
			return startSlirp(h, mtu, tmp, pin)
		case "veth":
			return startVeth(h, mtu, pin)
		}
		return nil, fmt.Errorf("unknown tool %q", tool)
	}
	where := ""
	if pin.pinned {
		where = fmt.Sprintf(", pinned to CPU %d", pin.cpu)
	}
	fmt.Fprintf(os.Stderr, "== %s, MTU %d%s\n", tool, mtu, where)
	if tr.in, tr.err = tr.start(); tr.err != nil {
		tr.err = fmt.Errorf("could not start: %w", tr.err)
		fmt.Fprintf(os.Stderr, "   %v\n", tr.err)
	}
	return tr
}

// measure runs row c once through the tool. ids holds the rows of this
// MTU: the veth reference measures a loopback row as the plain veth row
// for the same direction, and only once when that row is in the table.
func (tr *toolRun) measure(c testCase, ids map[string]bool, res *results, secs int, rrBin string) {
	if tr.err != nil {
		res.fail(c, tr.tool, tr.err.Error())
		return
	}
	// A tool that crashed, or whose restart for an earlier row failed,
	// gets one fresh start per row, so one crash does not blank the rest
	// of the table.
	why := "its restart for an earlier row failed"
	if tr.in != nil {
		why = tr.in.dead()
	}
	if why != "" {
		fmt.Fprintf(os.Stderr, "   %s: restarting: %s\n", tr.tool, why)
		tr.close()
		in, err := tr.start()
		if err != nil {
			fmt.Fprintf(os.Stderr, "   %s: could not restart: %v\n", tr.tool, err)
			res.fail(c, tr.tool, "could not restart: "+err.Error())
			return
		}
		tr.in = in
	}
	if tr.in.kernel && c.path != "tap" {
		alias := c
		alias.path = "tap"
		res.alias(c, tr.tool, alias)
		if ids[alias.id()] {
			return // measured as its own row
		}
		c = alias
	}
	s, err := measure(tr.in, tr.h, c, secs, rrBin)
	if err != nil {
		res.fail(c, tr.tool, err.Error())
		fmt.Fprintf(os.Stderr, "   %-12s %-60s n/a: %v\n", tr.tool, c.label(), err)
		return
	}
	res.add(c, tr.tool, s)
	fmt.Fprintf(os.Stderr, "   %-12s %-60s %s\n", tr.tool, c.label(), formatValue(c, s.value))
}

func (tr *toolRun) close() {
	if tr.in != nil {
		tr.in.close()
		tr.in = nil
	}
}

func buildRR(dir string) (string, error) {
	out := filepath.Join(dir, "rr")
	if _, err := run(3*time.Minute, goTool(), "build", "-o", out, "./bench/rr"); err != nil {
		return "", err
	}
	return out, nil
}

// stageGopasta copies (or builds) gopasta where uid 65534 can run it.
func stageGopasta(path, dir string) (string, error) {
	dst := filepath.Join(dir, "gopasta")
	if _, err := os.Stat(path); err != nil {
		if _, err := run(5*time.Minute, goTool(), "build", "-o", dst, "."); err != nil {
			return "", err
		}
		return dst, nil
	}
	return dst, copyFile(path, dst)
}

// stagePasta finds the pasta to compare with, and copies it where uid
// 65534 can run it when it cannot at its own path (a build under a
// directory that only root can enter). The copy is named pasta, which is
// what puts passt's binary in pasta mode, and its AVX2 build, which pasta
// runs in its own place when the CPU has AVX2, is copied beside it.
func stagePasta(name, dir string) (string, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found (apt-get install passt, or make pasta and PASTA=build/passt/pasta)", name)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return "", err
	}
	if _, err := run(10*time.Second, append(append([]string{}, asNobody...), "test", "-x", bin)...); err == nil {
		return bin, nil
	}
	dst := filepath.Join(dir, "pasta")
	if err := copyFile(bin, dst); err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		if _, err := os.Stat(real + ".avx2"); err == nil {
			if err := copyFile(real+".avx2", dst+".avx2"); err != nil {
				return "", err
			}
		}
	}
	return dst, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, in); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}
