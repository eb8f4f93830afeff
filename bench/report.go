package main

// The report: medians, ratios, CPU columns, notes and the markdown tables,
// and the docs/performance.md section it replaces.

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// cell holds one tool's measurements of one row.
type cell struct {
	samples []sample
	errs    []string
	aliasOf string // veth: the row whose figure stands in for this one
}

type results struct {
	tools []string
	cells map[string]map[string]*cell // case id -> tool -> cell
}

func newResults(tools []string) *results {
	return &results{tools: tools, cells: map[string]map[string]*cell{}}
}

func (r *results) get(c testCase, tool string) *cell {
	m := r.cells[c.id()]
	if m == nil {
		m = map[string]*cell{}
		r.cells[c.id()] = m
	}
	if m[tool] == nil {
		m[tool] = &cell{}
	}
	return m[tool]
}

func (r *results) add(c testCase, tool string, s sample) {
	r.get(c, tool).samples = append(r.get(c, tool).samples, s)
}

func (r *results) fail(c testCase, tool, why string) {
	r.get(c, tool).errs = append(r.get(c, tool).errs, why)
}

func (r *results) alias(c testCase, tool string, of testCase) {
	r.get(c, tool).aliasOf = of.id()
}

// resolve follows a veth alias to the cell that holds the measurements.
func (r *results) resolve(c testCase, tool string) *cell {
	ce := r.get(c, tool)
	if ce.aliasOf != "" {
		if m := r.cells[ce.aliasOf]; m != nil && m[tool] != nil {
			return m[tool]
		}
	}
	return ce
}

func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}

// medianOf is the median of f over the cell's runs, leaving out the runs
// for which f has no figure.
func (ce *cell) medianOf(f func(sample) (float64, bool)) (float64, bool) {
	var v []float64
	for _, s := range ce.samples {
		if x, ok := f(s); ok {
			v = append(v, x)
		}
	}
	return median(v)
}

func (ce *cell) value() (float64, bool) {
	return ce.medianOf(func(s sample) (float64, bool) { return s.value, true })
}

// spread is the slowest and the fastest run of a cell (zeros when it has
// none).
func (ce *cell) spread() (lo, hi float64) {
	for i, s := range ce.samples {
		if i == 0 || s.value < lo {
			lo = s.value
		}
		if i == 0 || s.value > hi {
			hi = s.value
		}
	}
	return lo, hi
}

// overlap reports whether two cells of at least two runs each have runs
// that cross: the slowest run of each is no faster than the fastest of the
// other. Their ratio is then one draw from the run-to-run spread, and a
// second run of the bench can put it on either side of 1.0.
func overlap(a, b *cell) bool {
	if len(a.samples) < 2 || len(b.samples) < 2 {
		return false
	}
	alo, ahi := a.spread()
	blo, bhi := b.spread()
	return alo <= bhi && blo <= ahi
}

// worstShare is the slowest whole second of any run as a share of the
// median, for TCP transfers.
func (ce *cell) worstShare() (float64, bool) {
	med, ok := ce.value()
	if !ok || med <= 0 {
		return 0, false
	}
	worst := 0.0
	for _, s := range ce.samples {
		if s.worst > 0 && (worst == 0 || s.worst < worst) {
			worst = s.worst
		}
	}
	return worst / med, worst > 0
}

// rcvDropShare is the median share of the datagrams reaching the
// receiving socket that it dropped, over the runs that read it: beside a
// UDP row's rate, it tells a tool that forwarded less from one whose
// receiver could not keep up with more.
func (ce *cell) rcvDropShare() (float64, bool) {
	return ce.medianOf(func(s sample) (float64, bool) { return s.rcvDrops, s.rcvDrops >= 0 })
}

// stealLimit is the share of the CPUs' time above which a run counts as
// slowed by the hypervisor: more than a run-to-run difference between
// tools on this kind of machine, and far above what a quiet VM loses.
const stealLimit = 0.05

var stealNote = fmt.Sprintf("during at least one run of this cell the hypervisor took more than %.0f%% of the CPUs' time (steal in /proc/stat): the machine, not the tool, may have slowed that run", 100*stealLimit)

// stolen reports whether any run of the cell lost more than stealLimit of
// the CPUs' time to the hypervisor.
func (ce *cell) stolen() bool {
	for _, s := range ce.samples {
		if s.steal > stealLimit {
			return true
		}
	}
	return false
}

// cpu is the tool's median CPU cost: seconds per GB received for
// throughput rows, microseconds per transaction for request/response rows.
func (ce *cell) cpu(rr bool) (float64, bool) {
	return ce.perUnit(rr, func(s sample) int64 { return s.cpuTicks })
}

// machineCPU is the same for the whole machine's busy time.
func (ce *cell) machineCPU(rr bool) (float64, bool) {
	return ce.perUnit(rr, func(s sample) int64 { return s.machineTicks })
}

// pinnedCPU is the same for the busy time of the one CPU a pinned row ran
// on.
func (ce *cell) pinnedCPU(rr bool) (float64, bool) {
	return ce.perUnit(rr, func(s sample) int64 { return s.pinTicks })
}

func (ce *cell) perUnit(rr bool, ticks func(sample) int64) (float64, bool) {
	return ce.medianOf(func(s sample) (float64, bool) {
		if ticks(s) < 0 || s.amount <= 0 {
			return 0, false
		}
		sec := float64(ticks(s)) / clockTicks
		if rr {
			return sec * 1e6 / s.amount, true
		}
		return sec / (s.amount / 1e9), true
	})
}

func formatValue(c testCase, v float64) string {
	if c.isRR() {
		return fmt.Sprintf("%.0f", v)
	}
	if v < 0.1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func formatCPU(c testCase, v float64) string {
	if c.isRR() {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// notes numbers footnote reasons, the same reason once.
type notes struct {
	order []string
	index map[string]int
}

func (n *notes) ref(why string) string {
	why = strings.ReplaceAll(strings.TrimSpace(why), "|", "/")
	if n.index == nil {
		n.index = map[string]int{}
	}
	i, ok := n.index[why]
	if !ok {
		n.order = append(n.order, why)
		i = len(n.order)
		n.index[why] = i
	}
	return fmt.Sprintf("[%d]", i)
}

type section struct {
	title, unit, cpuUnit string
	match                func(testCase) bool
	worst                bool // show the worst second of each row
	drops                bool // show the receiver's drop share of each row
	// pinned: the rows ran on one CPU (its number fills the title's %d),
	// and the second CPU column is that CPU's busy time rather than the
	// machine's.
	pinned bool
}

var sections = []section{
	{title: "TCP throughput", unit: "Gbit/s", cpuUnit: "CPU s/GB",
		match: func(c testCase) bool { return c.kind == "tcp" }, worst: true},
	{title: "UDP throughput (received)", unit: "Gbit/s", cpuUnit: "CPU s/GB",
		match: func(c testCase) bool { return c.kind == "udp" }, drops: true},
	{title: "TCP request/response (1-byte messages)", unit: "transactions/s", cpuUnit: "CPU µs/transaction",
		match: func(c testCase) bool { return c.isRR() && !c.pinned }},
	{title: "TCP request/response (1-byte messages), tool, client and server pinned to CPU %d", unit: "transactions/s", cpuUnit: "CPU µs/transaction",
		match: func(c testCase) bool { return c.isRR() && c.pinned }, pinned: true},
}

const spreadNote = "the two tools' runs of this row cross (each one's slowest run is no faster than the other's fastest): the ratio is within run-to-run spread"

// ratioSummary counts the rows where gopasta leads pasta, and of those
// where it does not, the ones whose runs cross pasta's.
type ratioSummary struct {
	rows, ahead, behindCrossed int
}

func (s *ratioSummary) add(ahead, crossed bool) {
	s.rows++
	switch {
	case ahead:
		s.ahead++
	case crossed:
		s.behindCrossed++
	}
}

func (s ratioSummary) String() string {
	behind := s.rows - s.ahead
	out := fmt.Sprintf("%d of %d rows at or above 1.00×", s.ahead, s.rows)
	if behind > 0 {
		out += fmt.Sprintf("; of the %d below, %d within run-to-run spread (runs cross), %d with every gopasta run slower than every pasta run",
			behind, s.behindCrossed, behind-s.behindCrossed)
	}
	return out + "."
}

func renderReport(o options, cases []testCase, r *results, machine, vers string, elapsed time.Duration) string {
	var b strings.Builder
	var n notes
	fmt.Fprintf(&b, "## Results\n\n")
	fmt.Fprintf(&b, "%s, %d run(s) of %d s per row, median shown; the run took %s",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.runs, o.secs, elapsed.Round(time.Second))
	if o.steal >= 0 {
		fmt.Fprintf(&b, ", and the hypervisor took %.1f%% of the CPUs' time meanwhile (steal in /proc/stat)", 100*o.steal)
	}
	b.WriteString(".\n\n")
	fmt.Fprintf(&b, "Machine: %s\n\n", machine)
	fmt.Fprintf(&b, "Versions: %s\n\n", vers)
	fmt.Fprintf(&b, "Command (as root, from the repository root): `%s`\n\n", o.commandStr)
	hasVeth, hasPasta := false, false
	var cpuTools []string
	for _, t := range r.tools {
		switch t {
		case "veth":
			hasVeth = true
		case "pasta":
			hasPasta = true
		}
		if t != "veth" {
			cpuTools = append(cpuTools, t)
		}
	}
	hasGopasta := false
	var sum ratioSummary
	for _, t := range r.tools {
		hasGopasta = hasGopasta || t == "gopasta"
	}
	for _, sec := range sections {
		var rows []testCase
		for _, c := range cases {
			if sec.match(c) {
				rows = append(rows, c)
			}
		}
		if len(rows) == 0 {
			continue
		}
		title, machineCol := sec.title, "machine "
		if sec.pinned {
			title, machineCol = fmt.Sprintf(sec.title, o.pinCPU), "pinned "
		}
		fmt.Fprintf(&b, "### %s, %s\n\n", title, sec.unit)
		hdr := []string{"Test"}
		hdr = append(hdr, r.tools...)
		if hasGopasta && hasPasta {
			hdr = append(hdr, "gopasta/pasta")
		}
		if hasGopasta && hasVeth {
			hdr = append(hdr, "gopasta/veth")
		}
		for _, t := range cpuTools {
			hdr = append(hdr, sec.cpuUnit+" "+t)
		}
		for _, t := range r.tools {
			hdr = append(hdr, machineCol+sec.cpuUnit+" "+t)
		}
		if sec.worst {
			for _, t := range r.tools {
				hdr = append(hdr, "worst 1 s/median "+t)
			}
		}
		if sec.drops {
			for _, t := range r.tools {
				hdr = append(hdr, "receiver dropped "+t)
			}
		}
		fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat(" --- |", len(hdr)))
		for _, c := range rows {
			vals := map[string]float64{}
			line := []string{c.label()}
			for _, t := range r.tools {
				ce := r.resolve(c, t)
				v, ok := ce.value()
				if !ok {
					why := "not measured"
					if len(ce.errs) > 0 {
						why = ce.errs[0]
					}
					line = append(line, "n/a "+n.ref(t+": "+why))
					continue
				}
				vals[t] = v
				s := formatValue(c, v)
				if r.get(c, t).aliasOf != "" {
					s += " " + n.ref("veth has no loopback mapping: the kernel figure for the same direction over the veth pair")
				}
				if len(ce.errs) > 0 {
					s += " " + n.ref(fmt.Sprintf("%s: %d of %d runs failed, e.g. %s", t, len(ce.errs), len(ce.errs)+len(ce.samples), ce.errs[0]))
				}
				if ce.stolen() {
					s += " " + n.ref(stealNote)
				}
				line = append(line, s)
			}
			ratio := func(a, b string) (float64, bool) {
				x, ok1 := vals[a]
				y, ok2 := vals[b]
				return x / y, ok1 && ok2 && y != 0
			}
			if hasGopasta && hasPasta {
				s := "–"
				if v, ok := ratio("gopasta", "pasta"); ok {
					s = fmt.Sprintf("%.2f×", v)
					crossed := overlap(r.resolve(c, "gopasta"), r.resolve(c, "pasta"))
					if crossed {
						s += " " + n.ref(spreadNote)
					}
					// Counted as shown: a row printed as 1.00× is not below.
					sum.add(math.Round(v*100) >= 100, crossed)
				}
				line = append(line, s)
			}
			if hasGopasta && hasVeth {
				s := "–"
				if v, ok := ratio("gopasta", "veth"); ok {
					s = fmt.Sprintf("%.2f×", v)
				}
				line = append(line, s)
			}
			for _, t := range cpuTools {
				if v, ok := r.resolve(c, t).cpu(c.isRR()); ok {
					line = append(line, formatCPU(c, v))
				} else {
					line = append(line, "–")
				}
			}
			for _, t := range r.tools {
				ce := r.resolve(c, t)
				v, ok := ce.machineCPU(c.isRR())
				if sec.pinned {
					v, ok = ce.pinnedCPU(c.isRR())
				}
				if ok {
					line = append(line, formatCPU(c, v))
				} else {
					line = append(line, "–")
				}
			}
			if sec.worst {
				for _, t := range r.tools {
					if v, ok := r.resolve(c, t).worstShare(); ok {
						line = append(line, fmt.Sprintf("%.2f", v))
					} else {
						line = append(line, "–")
					}
				}
			}
			if sec.drops {
				for _, t := range r.tools {
					if v, ok := r.resolve(c, t).rcvDropShare(); ok {
						line = append(line, fmt.Sprintf("%.0f%%", 100*v))
					} else {
						line = append(line, "–")
					}
				}
			}
			fmt.Fprintf(&b, "| %s |\n", strings.Join(line, " | "))
		}
		b.WriteString("\n")
	}
	if sum.rows > 0 {
		fmt.Fprintf(&b, "gopasta/pasta: %s\n\n", sum)
	}
	if len(n.order) > 0 {
		b.WriteString("Notes:\n\n")
		for i, why := range n.order {
			fmt.Fprintf(&b, "- [%d] %s\n", i+1, why)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func machineInfo() string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		for _, l := range readLines(f) {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	kernel := "unknown kernel"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	cc := ""
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control"); err == nil {
		cc = ", TCP congestion control " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d CPUs (nproc), %s, %s%s", runtime.NumCPU(), model, kernel, cc)
}

func versions(o options, gopastaBin string) string {
	var parts []string
	add := func(name string, argv ...string) {
		out, err := run(10*time.Second, argv...)
		v := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
		if err != nil || v == "" {
			v = "not available"
		}
		parts = append(parts, name+" "+v)
	}
	for _, t := range o.tools {
		switch t {
		case "gopasta":
			if gopastaBin != "" {
				add("gopasta:", gopastaBin, "--version")
			}
		case "pasta":
			add("pasta ("+o.pasta+"):", o.pasta, "--version")
			// Debian's 2023 build reports "unknown version"; the package
			// version names the snapshot. A build from a source tree
			// without git says the same, and -pasta-version names it.
			if o.pastaVersion != "" {
				parts = append(parts, "pasta version given (-pasta-version): "+o.pastaVersion)
			}
			if p, err := exec.LookPath(o.pasta); err == nil && p == "/usr/bin/pasta" {
				add("Debian passt package:", "dpkg-query", "-W", "-f", "${Version}", "passt")
			}
			if avx2, ok := pastaAVX2(o.pasta); ok {
				parts = append(parts, "pasta runs its AVX2 build "+avx2)
			}
		case "slirp4netns":
			add("slirp4netns:", "slirp4netns", "--version")
		}
	}
	add("iperf3:", "iperf3", "--version")
	return strings.Join(parts, "; ")
}

// pastaAVX2 names the AVX2 build that pasta execs in its own place on an
// x86_64 CPU with AVX2 (its binary's resolved path with ".avx2"), when both
// are there: the table then compares with that build.
func pastaAVX2(name string) (string, bool) {
	if runtime.GOARCH != "amd64" || !cpuHasAVX2() {
		return "", false
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", false
	}
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return "", false
	}
	if _, err := os.Stat(real + ".avx2"); err != nil {
		return "", false
	}
	return real + ".avx2", true
}

func cpuHasAVX2() bool {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	for _, l := range readLines(f) {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "flags" {
			return slices.Contains(strings.Fields(v), "avx2")
		}
	}
	return false
}

const docBegin, docEnd = "<!-- bench:begin -->", "<!-- bench:end -->"

// updateDoc replaces what lies between the markers in the document.
func updateDoc(path, report string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, docBegin), strings.Index(s, docEnd)
	if i < 0 || j < i {
		return fmt.Errorf("no %s ... %s markers", docBegin, docEnd)
	}
	s = s[:i+len(docBegin)] + "\n" + report + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
