package main

// The rows (testCase) and one run of a row through a tool: iperf3 or rr, and
// their output parsed.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// testCase is one row of the table.
type testCase struct {
	kind string // tcp, udp, rr, crr
	dir  string // out: namespace -> host; in: host -> namespace
	path string // tap: to/from the host's address; gw: to the gateway mapped to host loopback; splice: loopback <-> loopback
	fam  int    // 4 or 6
	mtu  int    // the namespace interface's MTU
	size int    // UDP datagram size (iperf3 -l)
	// pinned: the tool (every process and thread of it), the client and
	// the server all run on one CPU (-pin-cpu), so that the rate is
	// transactions per second of that one CPU.
	pinned bool
}

func (c testCase) id() string {
	id := fmt.Sprintf("%s/%s/%s/v%d/%d/%d", c.kind, c.dir, c.path, c.fam, c.mtu, c.size)
	if c.pinned {
		id += "/pinned"
	}
	return id
}

func (c testCase) label() string {
	dir := "ns→host"
	if c.dir == "in" {
		dir = "host→ns"
	}
	var path string
	switch {
	case c.path == "tap" && c.dir == "out":
		path = "TAP, to " + hostAddr(c.fam)
	case c.path == "tap" && c.kind == "udp":
		path = "TAP, -u from " + hostAddr(c.fam)
	case c.path == "tap":
		path = "TAP, -t from " + hostAddr(c.fam)
	case c.path == "gw":
		path = "TAP, to gateway → host lo"
	case c.dir == "out" && c.kind == "udp":
		path = "splice, -U to " + loAddr(c.fam)
	case c.dir == "out":
		path = "splice, -T to " + loAddr(c.fam)
	case c.kind == "udp":
		path = "splice, -u from " + loAddr(c.fam)
	default:
		path = "splice, -t from " + loAddr(c.fam)
	}
	s := fmt.Sprintf("%s %s IPv%d, %s", strings.ToUpper(c.kind), dir, c.fam, path)
	if c.path != "splice" {
		s += fmt.Sprintf(", MTU %d", c.mtu)
	}
	if c.kind == "udp" {
		s += fmt.Sprintf(", -l %d", c.size)
	}
	if c.pinned {
		s += ", pinned to one CPU"
	}
	return s
}

func (c testCase) isRR() bool { return c.kind == "rr" || c.kind == "crr" }

func hostAddr(fam int) string {
	if fam == 6 {
		return hostAddr6
	}
	return hostAddr4
}

func loAddr(fam int) string {
	if fam == 6 {
		return "::1"
	}
	return "127.0.0.1"
}

func gwAddr(fam int) string {
	if fam == 6 {
		return hostGW6
	}
	return hostGW4
}

// sample is one measurement.
type sample struct {
	value    float64 // Gbit/s, or transactions/s
	amount   float64 // bytes received, or transactions
	cpuTicks int64   // the tool's CPU time meanwhile (-1: no tool process)
	// machineTicks is every CPU's busy time meanwhile (-1: not read): the
	// whole cost of the run, client and server included.
	machineTicks int64
	// steal is the share of the CPUs' time that the hypervisor took
	// meanwhile (-1: not read; 0 on bare metal); of the one CPU's time
	// for a pinned row.
	steal float64
	// pinTicks is, for a pinned row, the busy time of the CPU that the
	// tool, the client and the server shared (-1: not pinned, or not
	// read): what the row's transactions cost that CPU.
	pinTicks int64
	// worst is the slowest whole-second interval of a TCP transfer, in
	// Gbit/s (0: not measured): a stall or dip shows here even when the
	// run's average hides it.
	worst float64
	// rcvDrops is, for UDP, the share of the datagrams reaching the
	// receiving socket that it dropped for want of buffer (-1: not read).
	rcvDrops float64
}

// errNA marks a combination a tool does not offer (as opposed to one that
// failed).
type errNA struct{ why string }

func (e errNA) Error() string { return e.why }

// endpoints works out where the server listens and where the client goes.
func endpoints(in *instance, c testCase) (bind, dst string, err error) {
	path := c.path
	if in.kernel && path != "tap" {
		path = "tap" // the veth reference has no mapping: same route as the TAP row
	}
	switch path {
	case "gw":
		if in.noGW != "" {
			return "", "", errNA{in.noGW}
		}
	case "splice":
		if in.noSplice != "" {
			return "", "", errNA{in.noSplice}
		}
	}
	if c.dir == "in" && c.fam == 6 && in.noIn6 != "" {
		return "", "", errNA{in.noIn6}
	}
	switch {
	case c.dir == "out" && path == "tap":
		return hostAddr(c.fam), hostAddr(c.fam), nil
	case c.dir == "out" && path == "gw":
		return loAddr(c.fam), gwAddr(c.fam), nil
	case c.dir == "out":
		return loAddr(c.fam), loAddr(c.fam), nil
	case path == "tap" && in.kernel:
		return in.addr(c.fam), in.addr(c.fam), nil
	case path == "tap":
		if in.addr(c.fam) == "" {
			return "", "", errNA{fmt.Sprintf("%s: no IPv%d address in the namespace", in.tool, c.fam)}
		}
		return in.addr(c.fam), hostAddr(c.fam), nil
	default:
		// Host loopback into the namespace: pasta up to 2023 connects to
		// the namespace's loopback, current pasta and gopasta to its own
		// address (the old way is --host-lo-to-ns-lo). A server on the
		// any-address inside the test namespace serves both.
		return anyAddr(c.fam), loAddr(c.fam), nil
	}
}

func anyAddr(fam int) string {
	if fam == 6 {
		return "::"
	}
	return "0.0.0.0"
}

// measure runs one workload once through one instance.
func measure(in *instance, h *hostNS, c testCase, secs int, rrBin string) (sample, error) {
	bind, dst, err := endpoints(in, c)
	if err != nil {
		return sample{}, err
	}
	if why := in.dead(); why != "" {
		return sample{}, errors.New(why)
	}
	srvWrap, cliWrap := h.cmd, in.nsWrap
	port := portOut
	if c.isRR() {
		port = portOutRR
	}
	if c.dir == "in" {
		srvWrap, cliWrap = in.nsWrap, h.cmd
		port += portIn - portOut
	}
	p := itoa(port)
	var srvArgv, cliArgv []string
	var ready string
	if c.isRR() {
		srvArgv = srvWrap(rrBin, "-server", "-listen", net.JoinHostPort(bind, p))
		cliArgv = cliWrap(rrBin, "-mode", c.kind, "-connect", net.JoinHostPort(dst, p), "-time", fmt.Sprintf("%ds", secs))
		ready = "listening"
	} else {
		srvArgv = srvWrap("iperf3", "-s", "-1", "-B", bind, "-p", p, "--forceflush")
		cliArgv = cliWrap("iperf3", "-c", dst, "-p", p, "-t", itoa(secs), "-J", "--connect-timeout", "3000")
		if c.kind == "udp" {
			cliArgv = append(cliArgv, "-u", "-b", "0", "-l", itoa(c.size))
		}
		ready = "Server listening"
	}
	if in.pinned {
		srvArgv, cliArgv = pinArgv(in.cpu, srvArgv), pinArgv(in.cpu, cliArgv)
	}
	srv, err := start("server", srvArgv, ready, 5*time.Second)
	if err != nil {
		return sample{}, err
	}
	defer srv.stop()

	udp := c.kind == "udp"
	var u0, u1 udpCounts
	var uErr0, uErr1 error
	if udp {
		u0, uErr0 = readUDPCounts(srvWrap, c.fam)
	}
	m0, mErr := readCPUTimes()
	began := time.Now()
	t0 := int64(-1)
	if in.main != nil {
		if t0, err = cpuTicks(in.main.pid()); err != nil {
			return sample{}, err
		}
	}
	out, runErr := run(time.Duration(secs+20)*time.Second, cliArgv...)
	m1, mErr1 := readCPUTimes()
	wall := time.Since(began)
	var t1 int64 = -1
	if in.main != nil {
		var err error
		if t1, err = cpuTicks(in.main.pid()); err != nil {
			if why := in.dead(); why != "" {
				return sample{}, fmt.Errorf("during the test: %s", why)
			}
			return sample{}, err
		}
	}
	// A tool that moved one of its threads off the CPU (or started one
	// elsewhere) would make the row's figure a two-CPU one.
	if in.pinned && in.main != nil {
		if err := checkPinned(in.main.pid(), in.cpu); err != nil {
			return sample{}, fmt.Errorf("%s not pinned: %w", in.tool, err)
		}
	}
	// Read after the run's CPU readings, so that its own processes are
	// not counted in them.
	if udp {
		u1, uErr1 = readUDPCounts(srvWrap, c.fam)
	}
	var s sample
	if c.isRR() {
		s, err = parseRR([]byte(out))
	} else {
		s, err = parseIperf([]byte(out), udp)
	}
	if err != nil {
		if runErr != nil && strings.TrimSpace(out) == "" {
			err = runErr // timed out, or could not start: say that
		}
		if why := in.dead(); why != "" {
			err = fmt.Errorf("%v (%s)", err, why)
		}
		return sample{}, err
	}
	if t0 >= 0 {
		s.cpuTicks = t1 - t0
	} else {
		s.cpuTicks = -1
	}
	s.machineTicks = -1
	if mErr == nil && mErr1 == nil && m1.busy >= m0.busy {
		s.machineTicks = m1.busy - m0.busy
	}
	s.steal = stealShare(m0, m1, mErr, mErr1, wall)
	s.pinTicks = -1
	if in.pinned {
		p0, pErr := m0.cpuOf(in.cpu)
		p1, pErr1 := m1.cpuOf(in.cpu)
		if mErr == nil && mErr1 == nil && pErr == nil && pErr1 == nil && p1.busy >= p0.busy {
			s.pinTicks = p1.busy - p0.busy
		}
		// The share of the one CPU's time, not of the machine's: the
		// hypervisor taking the other CPU does not slow this row.
		s.steal = stealShare(p0, p1, errors.Join(mErr, pErr), errors.Join(mErr1, pErr1), wall)
	}
	s.rcvDrops = -1
	if udp {
		s.rcvDrops = receiverDrops(u0, u1, uErr0, uErr1)
	}
	srv.wait(3 * time.Second)
	return s, nil
}

// pinArgv runs argv, and everything it starts, on CPU cpu only.
func pinArgv(cpu int, argv []string) []string {
	return append([]string{"taskset", "--cpu-list", itoa(cpu)}, argv...)
}

// iperfResult is the part of `iperf3 -J` output the harness reads.
type iperfResult struct {
	Error     string `json:"error"`
	Intervals []struct {
		Sum iperfSum `json:"sum"`
	} `json:"intervals"`
	End struct {
		Sum         *iperfSum `json:"sum"`
		SumSent     *iperfSum `json:"sum_sent"`
		SumReceived *iperfSum `json:"sum_received"`
	} `json:"end"`
}

type iperfSum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         float64 `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	LostPercent   float64 `json:"lost_percent"`
}

// parseIperf turns iperf3 -J client output into what the receiver got: for
// TCP the receiver's sum, for UDP the sender's rate less the datagrams the
// server reported lost (iperf3 3.12 has no receiver sum for UDP).
func parseIperf(b []byte, udp bool) (sample, error) {
	var r iperfResult
	if err := json.Unmarshal(b, &r); err != nil {
		return sample{}, fmt.Errorf("iperf3: unreadable output (%v): %s", err, lastLine(string(b)))
	}
	if r.Error != "" {
		return sample{}, fmt.Errorf("iperf3: %s", r.Error)
	}
	var bytes, bps float64
	switch {
	case !udp && r.End.SumReceived != nil:
		bytes, bps = r.End.SumReceived.Bytes, r.End.SumReceived.BitsPerSecond
	case udp && r.End.SumReceived != nil && r.End.SumReceived.Bytes > 0:
		bytes, bps = r.End.SumReceived.Bytes, r.End.SumReceived.BitsPerSecond
	case udp && r.End.Sum != nil:
		keep := 1 - r.End.Sum.LostPercent/100
		if keep < 0 || keep > 1 {
			return sample{}, fmt.Errorf("iperf3: lost_percent %v out of range", r.End.Sum.LostPercent)
		}
		bytes, bps = r.End.Sum.Bytes*keep, r.End.Sum.BitsPerSecond*keep
	default:
		return sample{}, errors.New("iperf3: no summary in the output")
	}
	if bytes <= 0 || bps <= 0 {
		return sample{}, errors.New("iperf3: nothing received")
	}
	return sample{value: bps / 1e9, amount: bytes, worst: worstInterval(&r)}, nil
}

// worstInterval is the lowest rate of the client's whole-second intervals
// (iperf3 reports one a second; a last partial one is left out), in Gbit/s.
func worstInterval(r *iperfResult) float64 {
	worst := 0.0
	for _, iv := range r.Intervals {
		if iv.Sum.Seconds < 0.9 {
			continue
		}
		if g := iv.Sum.BitsPerSecond / 1e9; worst == 0 || g < worst {
			worst = g
		}
	}
	return worst
}

type rrResult struct {
	Transactions int64   `json:"transactions"`
	Rate         float64 `json:"rate"`
	Error        string  `json:"error"`
	Warning      string  `json:"warning"`
}

func parseRR(b []byte) (sample, error) {
	var r rrResult
	if err := json.Unmarshal(b, &r); err != nil {
		return sample{}, fmt.Errorf("rr: unreadable output (%v): %s", err, lastLine(string(b)))
	}
	if r.Error != "" {
		return sample{}, fmt.Errorf("rr: %s", r.Error)
	}
	if r.Transactions <= 0 {
		return sample{}, errors.New("rr: no transaction completed")
	}
	return sample{value: r.Rate, amount: float64(r.Transactions)}, nil
}
