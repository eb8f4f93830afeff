package main

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantPPID  int
		wantTicks int64
		wantErr   bool
	}{
		{"plain", "42 (pasta) S 7 42 42 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 1 0 1 1 1", 7, 175, false},
		{"name with spaces and parens", "9 (a b) c)) R 1 9 9 0 -1 0 0 0 0 0 3 4 0 0", 1, 7, false},
		{"truncated", "9 (x) R 1 9", 0, 0, true},
		{"no paren", "9 x R 1 9 9 0 -1 0 0 0 0 0 3 4", 0, 0, true},
		{"negative", "9 (x) R 1 9 9 0 -1 0 0 0 0 0 -3 4 0 0", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ppid, ticks, err := parseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if ppid != tt.wantPPID || ticks != tt.wantTicks {
				t.Errorf("got ppid %d ticks %d, want %d %d", ppid, ticks, tt.wantPPID, tt.wantTicks)
			}
		})
	}
}

func TestParseIperf(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		udp       bool
		wantGbit  float64
		wantBytes float64
		wantErr   string
		wantWorst float64
	}{
		{"tcp with intervals: the worst whole second, the short tail left out",
			`{"intervals":[{"sum":{"seconds":1.0,"bits_per_second":9e9}},{"sum":{"seconds":1.0,"bits_per_second":4e8}},` +
				`{"sum":{"seconds":1.0,"bits_per_second":8e9}},{"sum":{"seconds":0.2,"bits_per_second":1e6}}],` +
				`"end":{"sum_received":{"bytes":1e9,"bits_per_second":6e9}}}`,
			false, 6, 1e9, "", 0.4},
		{"tcp", `{"end":{"sum_sent":{"bytes":2e9,"bits_per_second":3.2e9},"sum_received":{"bytes":1e9,"bits_per_second":1.6e9}}}`,
			false, 1.6, 1e9, "", 0},
		{"udp 3.12: sender sum less loss", `{"end":{"sum":{"bytes":1e9,"bits_per_second":2e9,"lost_percent":25}}}`,
			true, 1.5, 0.75e9, "", 0},
		{"udp newer: receiver sum", `{"end":{"sum":{"bytes":1e9,"bits_per_second":2e9,"lost_percent":25},"sum_received":{"bytes":5e8,"bits_per_second":1e9}}}`,
			true, 1, 5e8, "", 0},
		{"error field", `{"error":"unable to connect to server: Connection refused","end":{}}`, false, 0, 0, "Connection refused", 0},
		{"nothing received", `{"end":{"sum_received":{"bytes":0,"bits_per_second":0}}}`, false, 0, 0, "nothing received", 0},
		{"lost over 100", `{"end":{"sum":{"bytes":1,"bits_per_second":1,"lost_percent":140}}}`, true, 0, 0, "out of range", 0},
		{"garbage", `iperf3: error`, false, 0, 0, "unreadable", 0},
		{"no summary", `{"end":{}}`, false, 0, 0, "no summary", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseIperf([]byte(tt.in), tt.udp)
			if !errorAsWanted(t, err, tt.wantErr) {
				return
			}
			if math.Abs(s.value-tt.wantGbit) > 1e-9 || math.Abs(s.amount-tt.wantBytes) > 1e-3 {
				t.Errorf("got %v Gbit/s %v bytes, want %v %v", s.value, s.amount, tt.wantGbit, tt.wantBytes)
			}
			if math.Abs(s.worst-tt.wantWorst) > 1e-9 {
				t.Errorf("worst second: got %v Gbit/s, want %v", s.worst, tt.wantWorst)
			}
		})
	}
}

func TestParseRR(t *testing.T) {
	tests := []struct {
		in       string
		wantRate float64
		wantErr  bool
	}{
		{`{"mode":"rr","transactions":1000,"seconds":2,"rate":500}`, 500, false},
		{`{"mode":"rr","transactions":10,"seconds":5,"rate":2,"warning":"i/o timeout"}`, 2, false},
		{`{"mode":"crr","transactions":0,"error":"connection refused"}`, 0, true},
		{`{"mode":"crr","transactions":0}`, 0, true},
		{``, 0, true},
	}
	for _, tt := range tests {
		s, err := parseRR([]byte(tt.in))
		if (err != nil) != tt.wantErr || s.value != tt.wantRate {
			t.Errorf("parseRR(%s) = %v, %v; want rate %v, error %v", tt.in, s.value, err, tt.wantRate, tt.wantErr)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
		ok   bool
	}{
		{nil, 0, false},
		{[]float64{3}, 3, true},
		{[]float64{5, 1, 3}, 3, true},
		{[]float64{4, 1, 3, 2}, 2.5, true},
	}
	for _, tt := range tests {
		got, ok := median(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("median(%v) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCanonicalOrder(t *testing.T) {
	got := strings.Join(canonicalOrder([]string{"veth", "bogus", "pasta", " gopasta", "pasta"}), ",")
	if want := "gopasta,pasta,veth,bogus"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestEndpoints(t *testing.T) {
	pastaLike := &instance{tool: "pasta", addr4: nsAddr4, addr6: nsAddr6}
	slirp := &instance{tool: "slirp4netns", addr4: "10.0.2.100", noGW: "no gw", noSplice: "no splice", noIn6: "no v6 in"}
	veth := &instance{tool: "veth", addr4: nsAddr4, addr6: nsAddr6, kernel: true}
	tests := []struct {
		in        *instance
		c         testCase
		bind, dst string
		na        string
	}{
		{pastaLike, testCase{kind: "tcp", dir: "out", path: "tap", fam: 4}, hostAddr4, hostAddr4, ""},
		{pastaLike, testCase{kind: "tcp", dir: "out", path: "gw", fam: 6}, "::1", hostGW6, ""},
		{pastaLike, testCase{kind: "tcp", dir: "out", path: "splice", fam: 4}, "127.0.0.1", "127.0.0.1", ""},
		{pastaLike, testCase{kind: "tcp", dir: "in", path: "tap", fam: 6}, nsAddr6, hostAddr6, ""},
		{pastaLike, testCase{kind: "tcp", dir: "in", path: "splice", fam: 6}, "::", "::1", ""},
		{slirp, testCase{kind: "tcp", dir: "in", path: "tap", fam: 4}, "10.0.2.100", hostAddr4, ""},
		{slirp, testCase{kind: "tcp", dir: "out", path: "gw", fam: 4}, "", "", "no gw"},
		{slirp, testCase{kind: "tcp", dir: "in", path: "splice", fam: 4}, "", "", "no splice"},
		{slirp, testCase{kind: "tcp", dir: "in", path: "tap", fam: 6}, "", "", "no v6 in"},
		{veth, testCase{kind: "tcp", dir: "in", path: "tap", fam: 4}, nsAddr4, nsAddr4, ""},
		{veth, testCase{kind: "tcp", dir: "out", path: "splice", fam: 4}, hostAddr4, hostAddr4, ""},
	}
	for _, tt := range tests {
		bind, dst, err := endpoints(tt.in, tt.c)
		if tt.na != "" {
			if _, ok := err.(errNA); !ok || err.Error() != tt.na {
				t.Errorf("%s %s: got error %v, want n/a %q", tt.in.tool, tt.c.id(), err, tt.na)
			}
			continue
		}
		if err != nil || bind != tt.bind || dst != tt.dst {
			t.Errorf("%s %s: got %q %q %v, want %q %q", tt.in.tool, tt.c.id(), bind, dst, err, tt.bind, tt.dst)
		}
	}
}

func TestRenderReportFootnotes(t *testing.T) {
	c := testCase{kind: "tcp", dir: "out", path: "tap", fam: 4, mtu: mtuBig}
	r := newResults([]string{"gopasta", "pasta", "veth"})
	r.add(c, "pasta", sample{value: 2, amount: 1e9, cpuTicks: 50, machineTicks: 130})
	r.add(c, "veth", sample{value: 8, amount: 1e9, cpuTicks: -1, machineTicks: -1, steal: 0.2})
	r.fail(c, "gopasta", "gopasta: not | supported")
	out := renderReport(options{runs: 1, secs: 1, steal: 0.034}, []testCase{c}, r, "m", "v", 0)
	// Columns after the ratio: tool CPU (gopasta, pasta), machine CPU
	// (gopasta, pasta, veth), worst second (three tools).
	for _, want := range []string{"n/a [1]", "[1] gopasta: gopasta: not / supported", "| 2.00 |", "| 8.00 [2] |",
		"| – | 0.50 | – | 1.30 | – |", "machine CPU s/GB veth",
		"[2] during at least one run of this cell the hypervisor took more than 5% of the CPUs' time",
		"the hypervisor took 3.4% of the CPUs' time meanwhile (steal in /proc/stat)."} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestRenderReportSpread(t *testing.T) {
	rows := []struct {
		c      testCase
		gp, pa []float64
	}{
		// Ahead, every run faster.
		{testCase{kind: "tcp", dir: "out", path: "tap", fam: 4, mtu: mtuBig}, []float64{12, 13, 14}, []float64{9, 10, 11}},
		// Behind, runs cross.
		{testCase{kind: "tcp", dir: "in", path: "tap", fam: 4, mtu: mtuBig}, []float64{9, 10, 11}, []float64{10, 11, 12}},
		// Behind, every run slower.
		{testCase{kind: "tcp", dir: "out", path: "tap", fam: 6, mtu: mtuBig}, []float64{7, 8, 9}, []float64{10, 11, 12}},
		// 0.996: shown as 1.00×, so not below.
		{testCase{kind: "tcp", dir: "in", path: "tap", fam: 6, mtu: mtuBig}, []float64{9.96}, []float64{10}},
	}
	r := newResults([]string{"gopasta", "pasta"})
	var cases []testCase
	for _, row := range rows {
		cases = append(cases, row.c)
		for i := range row.gp {
			r.add(row.c, "gopasta", sample{value: row.gp[i], amount: 1e9, cpuTicks: 1})
		}
		for i := range row.pa {
			r.add(row.c, "pasta", sample{value: row.pa[i], amount: 1e9, cpuTicks: 1})
		}
	}
	out := renderReport(options{runs: 3, secs: 1}, cases, r, "m", "v", 0)
	for _, want := range []string{
		"| 1.30× |", "| 0.91× [1] |", "| 0.73× |", "| 1.00× |",
		"2 of 4 rows at or above 1.00×; of the 2 below, 1 within run-to-run spread (runs cross), 1 with every gopasta run slower than every pasta run.",
		"[1] the two tools' runs of this row cross",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestOverlap(t *testing.T) {
	cellOf := func(v ...float64) *cell {
		c := &cell{}
		for _, x := range v {
			c.samples = append(c.samples, sample{value: x})
		}
		return c
	}
	tests := []struct {
		a, b *cell
		want bool
	}{
		{cellOf(1, 2), cellOf(2, 3), true},
		{cellOf(1, 2), cellOf(2.1, 3), false},
		{cellOf(3, 4), cellOf(1, 2.9), false},
		{cellOf(1, 5), cellOf(2, 3), true},
		{cellOf(1), cellOf(1, 2), false}, // one run: no spread to compare
	}
	for _, tt := range tests {
		if got := overlap(tt.a, tt.b); got != tt.want {
			t.Errorf("overlap(%v, %v): got %v, want %v", tt.a.samples, tt.b.samples, got, tt.want)
		}
	}
}

// TestPinnedCases: every unpinned request/response row of the full table
// has a pinned twin with an id and label of its own, and the quick table
// has one pinned RR and one pinned CRR row.
func TestPinnedCases(t *testing.T) {
	seen := map[string]bool{}
	pinned := map[string]bool{}
	for _, c := range fullCases() {
		if seen[c.id()] || seen[c.label()] {
			t.Errorf("id %s or label %q twice", c.id(), c.label())
		}
		seen[c.id()], seen[c.label()] = true, true
		if c.pinned {
			if !c.isRR() {
				t.Errorf("%s: pinned, want only request/response rows pinned", c.id())
			}
			twin := c
			twin.pinned = false
			pinned[twin.id()] = true
		}
	}
	for _, c := range fullCases() {
		if c.isRR() && !c.pinned && !pinned[c.id()] {
			t.Errorf("%s: no pinned twin", c.id())
		}
	}
	if got, want := len(pinned), 8; got != want {
		t.Errorf("pinned rows: got %d, want %d", got, want)
	}
	kinds := map[string]int{}
	for _, c := range quickCases() {
		if c.pinned {
			kinds[c.kind]++
		}
	}
	if kinds["rr"] != 1 || kinds["crr"] != 1 || len(kinds) != 2 {
		t.Errorf("quick pinned rows by kind: got %v, want one rr and one crr", kinds)
	}
}

// TestRenderReportPinned: pinned rows get a section of their own, whose
// second CPU column is the pinned CPU's busy time per transaction.
func TestRenderReportPinned(t *testing.T) {
	free := testCase{kind: "crr", dir: "in", path: "splice", fam: 4, mtu: mtuBig}
	pin := free
	pin.pinned = true
	r := newResults([]string{"gopasta", "pasta", "veth"})
	r.add(free, "gopasta", sample{value: 6000, amount: 30000, cpuTicks: 180, machineTicks: 540, pinTicks: -1})
	r.add(free, "pasta", sample{value: 5000, amount: 25000, cpuTicks: 170, machineTicks: 500, pinTicks: -1})
	r.add(pin, "gopasta", sample{value: 4000, amount: 20000, cpuTicks: 120, machineTicks: 600, pinTicks: 500})
	r.add(pin, "pasta", sample{value: 5000, amount: 25000, cpuTicks: 150, machineTicks: 700, pinTicks: 500})
	r.add(pin, "veth", sample{value: 10000, amount: 50000, cpuTicks: -1, machineTicks: 900, pinTicks: 500})
	out := renderReport(options{runs: 1, secs: 5, pinCPU: 1}, []testCase{free, pin}, r, "m", "v", 0)
	for _, want := range []string{
		"### TCP request/response (1-byte messages), transactions/s\n",
		"### TCP request/response (1-byte messages), tool, client and server pinned to CPU 1, transactions/s\n",
		"| pinned CPU µs/transaction gopasta | pinned CPU µs/transaction pasta | pinned CPU µs/transaction veth |",
		// 120 ticks over 20000 transactions, 500 ticks over 20000.
		"| CRR host→ns IPv4, splice, -t from 127.0.0.1, pinned to one CPU | 4000 | 5000 | 10000 | 0.80× | 0.40× | 60.0 | 60.0 | 250.0 | 200.0 | 100.0 |",
		"| CRR host→ns IPv4, splice, -t from 127.0.0.1 | 6000 | 5000 | n/a [1] | 1.20× | – | 60.0 | 68.0 | 180.0 | 200.0 | – |",
		"1 of 2 rows at or above 1.00×",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestParseCPUTimesPerCPU(t *testing.T) {
	in := "cpu  100 2 30 9999 5 4 6 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu3 10 0 0 99 0 0 1 2 0 0\nintr 5\n"
	tm, err := parseCPUTimes([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cpu         int
		busy, steal int64
		ok          bool
	}{
		{0, 19, 8, true},
		{3, 11, 2, true},
		{1, 0, 0, false}, // offline: no line
	}
	for _, tt := range tests {
		got, err := tm.cpuOf(tt.cpu)
		if (err == nil) != tt.ok || got.busy != tt.busy || got.steal != tt.steal || (tt.ok && got.cpus != 1) {
			t.Errorf("cpu%d: got busy %d, steal %d, %d CPUs, %v; want %d, %d, 1 CPU, ok %v",
				tt.cpu, got.busy, got.steal, got.cpus, err, tt.busy, tt.steal, tt.ok)
		}
	}
	for _, bad := range []string{
		"cpu 1 1 1 1 1 1 1\ncpu0 1 1\n",            // a CPU line too short
		"cpu 1 1 1 1 1 1 1\ncpu0 1 -1 1 1 1 1 1\n", // a negative time
		"cpu 1 1 1 1 1 1 1\ncpu99999999999999999999 1 1 1 1 1 1 1\n",
	} {
		if _, err := parseCPUTimes([]byte(bad)); err == nil {
			t.Errorf("parseCPUTimes(%q): got no error, want one", bad)
		}
	}
}

func TestStatusField(t *testing.T) {
	b := []byte("Name:\tpasta\nCpus_allowed:\t1\nCpus_allowed_list:\t0\n")
	tests := []struct {
		key, want string
		ok        bool
	}{
		{"Name", "pasta", true},
		{"Cpus_allowed_list", "0", true},
		{"Cpus", "", false},
	}
	for _, tt := range tests {
		if got, ok := statusField(b, tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("statusField(%s): got %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
}

// TestCheckPinned: a process tree started under taskset, children and
// threads included, is pinned; one that is not, on a machine with more
// than one CPU, is named.
func TestCheckPinned(t *testing.T) {
	// sh forks the sleeps: the check covers the children.
	p, err := start("pinned", pinArgv(0, []string{"sh", "-c", "sleep 30 & sleep 30"}), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	time.Sleep(100 * time.Millisecond)
	if err := checkPinned(p.pid(), 0); err != nil {
		t.Errorf("a tree started under taskset: got %v, want pinned", err)
	}
	if err := checkPinned(p.pid(), 1); err == nil || !strings.Contains(err.Error(), "may run on CPUs 0, not only on CPU 1") {
		t.Errorf("checked against another CPU: got %v, want it named", err)
	}
	if runtime.NumCPU() < 2 {
		return
	}
	q, err := start("free", []string{"sleep", "30"}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer q.stop()
	if err := checkPinned(q.pid(), 0); err == nil || !strings.Contains(err.Error(), "(sleep)") {
		t.Errorf("a process free to run anywhere: got %v, want it named", err)
	}
}

func TestParseCPUTimes(t *testing.T) {
	tests := []struct {
		in          string
		busy, steal int64
		cpus        int
		ok          bool
	}{
		{"cpu  100 2 30 9999 5 4 6 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu1 1 2 3 4 5 6 7 8 0 0\nintr 5\n", 142, 7, 2, true},
		{"cpu 1 1 1 1 1 1 1 1", 5, 1, 0, true},            // a kernel without guest fields
		{"cpu 1 1 1 1 1 1 1", 5, 0, 0, true},              // nor steal
		{"cpu 1 1 1 1 1 1 1\ncpux 1\ncpu", 5, 0, 0, true}, // no CPU number: not a CPU
		{"cpu 1 1 1 1 1 1 1 -1", 0, 0, 0, false},          // a negative steal
		{"cpu0 1 2 3 4 5 6 7 8\n", 0, 0, 0, false},
		{"cpu 1 2 3 4 5 6\n", 0, 0, 0, false},
		{"cpu 1 -2 3 4 5 6 7 8\n", 0, 0, 0, false},
		{"cpu 1 x 3 4 5 6 7 8\n", 0, 0, 0, false},
		{"cpu 9223372036854775807 1 0 0 0 0 0 0\n", 0, 0, 0, false}, // overflow
		{"", 0, 0, 0, false},
	}
	for _, tt := range tests {
		got, err := parseCPUTimes([]byte(tt.in))
		if got.busy != tt.busy || got.steal != tt.steal || got.cpus != tt.cpus || (err == nil) != tt.ok {
			t.Errorf("parseCPUTimes(%q): got busy %d, steal %d, %d CPUs, %v; want %d, %d, %d, ok %v",
				tt.in, got.busy, got.steal, got.cpus, err, tt.busy, tt.steal, tt.cpus, tt.ok)
		}
	}
}

func FuzzParseCPUTimes(f *testing.F) {
	f.Add([]byte("cpu  1631114 1591 2091825 3553205 5035 0 372533 47288 0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseCPUTimes(b)
		if err == nil && (v.busy < 0 || v.steal < 0) {
			t.Fatalf("accepted a negative time %+v", v)
		}
		for n, one := range v.each {
			if err == nil && (n < 0 || one.busy < 0 || one.steal < 0) {
				t.Fatalf("accepted cpu%d with a negative time %+v", n, one)
			}
		}
	})
}

func TestStealShare(t *testing.T) {
	t0 := cpuTimes{steal: 100, cpus: 4}
	tests := []struct {
		name string
		t1   cpuTimes
		err  error
		wall time.Duration
		want float64
	}{
		{"a tenth of the CPUs' time", cpuTimes{steal: 140, cpus: 4}, nil, time.Second, 0.1},
		{"none", cpuTimes{steal: 100, cpus: 4}, nil, time.Second, 0},
		{"unreadable", cpuTimes{steal: 200, cpus: 4}, errCPUTimes, time.Second, -1},
		{"counter went back", cpuTimes{steal: 50, cpus: 4}, nil, time.Second, -1},
		{"no time passed", cpuTimes{steal: 200, cpus: 4}, nil, 0, -1},
		{"no CPUs counted", cpuTimes{steal: 200}, nil, time.Second, -1},
	}
	for _, tt := range tests {
		if got := stealShare(t0, tt.t1, nil, tt.err, tt.wall); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func FuzzParseIperf(f *testing.F) {
	f.Add([]byte(`{"end":{"sum_received":{"bytes":1e9,"bits_per_second":1.6e9}}}`), false)
	f.Add([]byte(`{"end":{"sum":{"bytes":1e9,"bits_per_second":2e9,"lost_percent":25}}}`), true)
	f.Add([]byte(`{"error":"x"}`), false)
	f.Fuzz(func(t *testing.T, b []byte, udp bool) {
		s, err := parseIperf(b, udp)
		if err == nil && (s.value <= 0 || s.amount <= 0) {
			t.Fatalf("accepted a non-positive result %+v", s)
		}
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (pasta) S 7 42 42 0 -1 4194560 100 0 0 0 150 25 0 0 20 0"))
	f.Add([]byte("1 ((x)) R"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, ticks, err := parseStat(b)
		if err == nil && ticks < 0 {
			t.Fatalf("accepted negative ticks %d", ticks)
		}
	})
}

func FuzzParseRR(f *testing.F) {
	f.Add([]byte(`{"mode":"rr","transactions":1000,"seconds":2,"rate":500}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseRR(b)
		if err == nil && s.amount <= 0 {
			t.Fatalf("accepted %+v", s)
		}
	})
}

func TestProcLifecycle(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		ready   string
		wantErr string
	}{
		{"ready", []string{"sh", "-c", "echo listening; exec sleep 30"}, "listening", ""},
		{"exits early", []string{"sh", "-c", "echo boom; exit 3"}, "listening", "exited before it was ready"},
		{"never ready", []string{"sleep", "30"}, "listening", "not ready within"},
		{"no binary", []string{"/nonexistent/bench-test"}, "", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := start(tt.name, tt.argv, tt.ready, 500*time.Millisecond)
			if !errorAsWanted(t, err, tt.wantErr) {
				return
			}
			if _, err := cpuTicks(p.pid()); err != nil {
				t.Errorf("cpuTicks of a live process: %v", err)
			}
			began := time.Now()
			p.stop()
			if !p.exited() {
				t.Errorf("process still running after stop")
			}
			if d := time.Since(began); d > 4*time.Second {
				t.Errorf("stop took %v, want under 4s (SIGTERM should do)", d)
			}
			if _, err := cpuTicks(p.pid()); err == nil {
				t.Errorf("cpuTicks of a reaped process succeeded, want an error")
			}
		})
	}
}

func TestRunTimeout(t *testing.T) {
	began := time.Now()
	_, err := run(300*time.Millisecond, "sh", "-c", "sleep 30 & sleep 30")
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("got error %v, want a timeout", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("run returned after %v, want about 300ms", d)
	}
}

// errorAsWanted fails the test unless err matches wantErr ("" for none,
// else a part of its text), and reports whether there is a result to check.
func errorAsWanted(t *testing.T, err error, wantErr string) bool {
	t.Helper()
	switch {
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		t.Fatalf("got error %v, want one containing %q", err, wantErr)
	case wantErr == "" && err != nil:
		t.Fatalf("got error %v, want none", err)
	}
	return wantErr == ""
}

// TestCaseLabels: each row's label names the forwarding option its traffic
// takes, so that a row is not read as another path's.
func TestCaseLabels(t *testing.T) {
	tests := []struct {
		c    testCase
		want string
	}{
		{testCase{kind: "tcp", dir: "out", path: "splice", fam: 4, mtu: mtuBig}, "TCP ns→host IPv4, splice, -T to 127.0.0.1"},
		{testCase{kind: "tcp", dir: "in", path: "splice", fam: 6, mtu: mtuBig}, "TCP host→ns IPv6, splice, -t from ::1"},
		{testCase{kind: "udp", dir: "out", path: "splice", fam: 4, mtu: mtuBig, size: 65000}, "UDP ns→host IPv4, splice, -U to 127.0.0.1, -l 65000"},
		{testCase{kind: "udp", dir: "in", path: "splice", fam: 6, mtu: mtuBig, size: 1400}, "UDP host→ns IPv6, splice, -u from ::1, -l 1400"},
		{testCase{kind: "udp", dir: "in", path: "tap", fam: 4, mtu: mtuBig, size: 1400}, "UDP host→ns IPv4, TAP, -u from 192.0.2.1, MTU 65520, -l 1400"},
		{testCase{kind: "crr", dir: "in", path: "splice", fam: 4, mtu: mtuBig}, "CRR host→ns IPv4, splice, -t from 127.0.0.1"},
		{testCase{kind: "crr", dir: "in", path: "splice", fam: 4, mtu: mtuBig, pinned: true}, "CRR host→ns IPv4, splice, -t from 127.0.0.1, pinned to one CPU"},
		{testCase{kind: "rr", dir: "out", path: "tap", fam: 4, mtu: mtuBig, pinned: true}, "RR ns→host IPv4, TAP, to 192.0.2.1, MTU 65520, pinned to one CPU"},
	}
	for _, tt := range tests {
		if got := tt.c.label(); got != tt.want {
			t.Errorf("label of %s: got %q, want %q", tt.c.id(), got, tt.want)
		}
	}
}

// TestStagePasta: a pasta that uid 65534 can run is used where it is; one
// under a directory only root can enter is copied out as "pasta", with its
// AVX2 build beside it; a missing one names itself.
func TestStagePasta(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs a check as uid 65534")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	tree := func(name string, mode os.FileMode) string {
		d := filepath.Join(root, name)
		for _, f := range []string{"passt", "passt.avx2"} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, f), []byte("#!/bin/sh\necho "+f+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("passt", filepath.Join(d, "pasta")); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(d, "pasta")
	}
	open, private := tree("open", 0o755), tree("private", 0o700)
	stage := filepath.Join(root, "stage")
	if err := os.Mkdir(stage, 0o777); err != nil {
		t.Fatal(err)
	}

	if got, err := stagePasta(open, stage); err != nil || got != open {
		t.Errorf("reachable pasta: got %q, %v; want %q used in place", got, err, open)
	}
	got, err := stagePasta(private, stage)
	if want := filepath.Join(stage, "pasta"); err != nil || got != want {
		t.Fatalf("pasta under a private directory: got %q, %v; want %q", got, err, want)
	}
	for name, from := range map[string]string{"pasta": "passt", "pasta.avx2": "passt.avx2"} {
		b, err := os.ReadFile(filepath.Join(stage, name))
		if want := "#!/bin/sh\necho " + from + "\n"; err != nil || string(b) != want {
			t.Errorf("staged %s: got %q, %v; want a copy of %s", name, b, err, from)
		}
	}
	if _, err := stagePasta(filepath.Join(root, "nonexistent", "pasta"), stage); err == nil || !strings.Contains(err.Error(), "nonexistent/pasta not found") {
		t.Errorf("missing pasta: got %v, want it named", err)
	}
}
