package stress

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStress runs the five loads of the table, each against a fresh
// gopasta, and checks what comes after each (runLoad).
func TestStress(t *testing.T) {
	f := formFor(t)
	loads := []struct {
		name string
		row  string
		run  func(t *testing.T, s *suite, r *row)
	}{
		{"udp-flows", fmt.Sprintf("%d UDP flows ns->host", f.udpFlows), loadUDPFlows},
		{"tcp-ns-to-host", fmt.Sprintf("%d TCP ns->host (tap), held %v", f.nsToHost, f.hold),
			func(t *testing.T, s *suite, r *row) { s.hold(t, r, nsToHostTAP, f.nsToHost, 1) }},
		{"tcp-host-to-ns-tap", fmt.Sprintf("%d TCP host 192.0.2.1->ns (-t, tap), held %v", f.hostToNS, f.hold),
			func(t *testing.T, s *suite, r *row) { s.hold(t, r, hostToNSTAP, f.hostToNS, 1) }},
		// A spliced connection costs gopasta its two sockets and two
		// pipes of two descriptors each.
		{"tcp-host-to-ns-splice", fmt.Sprintf("%d TCP host 127.0.0.1->ns (-t, spliced), held %v", f.hostToNS, f.hold),
			func(t *testing.T, s *suite, r *row) { s.hold(t, r, hostToNSSplice, f.hostToNS, 6) }},
		{"churn", fmt.Sprintf("%v TCP churn, four paths", f.churn), loadChurn},
	}
	for _, l := range loads {
		t.Run(l.name, func(t *testing.T) {
			s := newSuite(t, f, l.row)
			s.runLoad(t, l.row, time.Second, func(r *row) { l.run(t, s, r) }, nil)
		})
	}
}

// TestSoak churns the four TCP paths and the four UDP paths for the
// form's soak, sampling gopasta every second: its RSS may grow by less
// than 5 MiB after the warm-up, and its descriptors come back to the
// baseline once the UDP flows have expired.
func TestSoak(t *testing.T) {
	f := formFor(t)
	name := fmt.Sprintf("soak %v: TCP and UDP churn, eight paths", f.soak)
	s := newSuite(t, f, name)
	s.runLoad(t, name, time.Second, func(r *row) {
		args := []string{"-d", f.soak.String(), "-conc", "2", "-udprate", strconv.Itoa(f.udpRate)}
		gens := []*gen{
			s.nsGen("churn", append(args, targets(true, "tcp", "udp")...)...),
			s.hostGen("churn", append(args, targets(false, "tcp", "udp")...)...),
		}
		udp := s.churnResults(t, r, gens, f.soak+2*time.Minute)
		// Spliced flows live longer than those over the TAP, and each
		// holds two sockets: one per side.
		r.udpExpiry = s.udpTimeout(true)
		extra := 0
		for tg, n := range udp {
			if strings.Contains(tg, "127.0.0.1") {
				extra += 2 * n
			} else {
				extra += n
			}
		}
		r.udpBound = func() (int, string) {
			return extra, "the UDP transactions' flows: one descriptor over the TAP, two spliced"
		}
	}, func(ss []sample, r *row) {
		var after []sample
		for _, x := range ss {
			if x.at >= f.warm {
				after = append(after, x)
			}
		}
		if len(after) < 2*f.window {
			t.Errorf("soak: got %d samples after the warm-up, want at least %d", len(after), 2*f.window)
			return
		}
		first, last := medianRSS(after[:f.window]), medianRSS(after[len(after)-f.window:])
		growth := last - first
		minFDs, maxFDs := after[0].fds, after[0].fds
		for _, x := range after {
			minFDs, maxFDs = min(minFDs, x.fds), max(maxFDs, x.fds)
		}
		r.Note = fmt.Sprintf("RSS %+.2f MiB after the %v warm-up; fds %d-%d", float64(growth)/1024, f.warm, minFDs, maxFDs)
		t.Logf("soak: %d samples; RSS median %d KiB just after the %v warm-up, %d KiB at the end (%+d KiB); descriptors %d-%d after the warm-up",
			len(ss), first, f.warm, last, growth, minFDs, maxFDs)
		if f.rssLimit > 0 && growth >= f.rssLimit {
			t.Errorf("soak: RSS grew by %d KiB after the warm-up, want less than %d KiB", growth, f.rssLimit)
		}
	})
}

// loadUDPFlows sprays one datagram to each of the form's ports of the
// host's address from one namespace socket: as many UDP flows.
func loadUDPFlows(t *testing.T, s *suite, r *row) {
	g := s.nsGen("spray", "-n", strconv.Itoa(s.f.udpFlows), "-first", "1024", "-rate", "20000", nsToHostTAP.dst[:strings.LastIndexByte(nsToHostTAP.dst, ':')])
	var res sprayResult
	if err := g.wait(5*time.Minute, &res); err != nil {
		t.Errorf("spray: %v", err)
		return
	}
	r.udpExpiry = s.udpTimeout(false)
	r.udpBound = func() (int, string) { return res.Sent, "every datagram sent" }
	// Lost datagrams (ENOBUFS from the namespace's own stack) are not
	// gopasta's failures; anything else is the generator's.
	failed := 0
	for c, n := range res.Errors {
		if c != "ENOBUFS" {
			failed += n
		}
	}
	r.Failed = failed
	t.Logf("spray: %d datagrams to %d ports in %dms (%d sent again after the namespace's interface dropped %d; pace down to %d/s); send errors: %s",
		res.Sent, s.f.udpFlows, res.TookMS, res.Resent, res.Dropped, res.MinRate, sortedClasses(res.Errors))
	if s.gopasta {
		// Wait for a --stats line after the spray: the flows it counts.
		time.Sleep(1500 * time.Millisecond)
		peak, evicted := 0, 0
		for _, st := range s.stats() {
			peak, evicted = max(peak, st.udp), max(evicted, st.evicted)
		}
		r.Held, r.Refused = peak, evicted
		r.Note = "held: peak live UDP flows (--stats); refused: flows evicted"
		t.Logf("--stats: at most %d live UDP flows, %d evicted:\n%s", peak, evicted, clipLines(s.statsLines(), 5))
		r.udpBound = func() (int, string) {
			st := s.stats()
			if len(st) == 0 {
				return 0, "no --stats line yet"
			}
			last := st[len(st)-1]
			return last.udp + last.icmp, fmt.Sprintf("the %d UDP and %d ICMP flows alive (--stats)", last.udp, last.icmp)
		}
	}
	if failed > 0 {
		t.Errorf("spray: %d datagrams not sent for other reasons than a full queue: %s", failed, sortedClasses(res.Errors))
	}
}

// hold makes n connections on p, each held and echoing (genHold), spread
// over processes, each costing gopasta about cost descriptors. Failures
// (anything but held or refused cleanly) fail the test; a load within
// gopasta's descriptor limit must be held whole.
func (s *suite) hold(t *testing.T, r *row, p path, n, cost int) {
	procs := (n + perHoldProc - 1) / perHoldProc
	var gens []*gen
	for i := range procs {
		share := n / procs
		if i < n%procs {
			share++
		}
		args := []string{"-n", strconv.Itoa(share), "-conc", "64", "-hold", s.f.hold.String(),
			"-timeout", "10s", "-deadline", "2m", "-seed", strconv.Itoa(i), p.dst}
		if p.ns {
			gens = append(gens, s.nsGen("hold", args...))
		} else {
			gens = append(gens, s.hostGen("hold", args...))
		}
	}
	var tot holdResult
	tot.Classes = map[string]int{}
	for _, g := range gens {
		var res holdResult
		if err := g.wait(2*time.Minute+s.f.hold+3*time.Minute, &res); err != nil {
			t.Errorf("%s: %v", p.name, err)
			continue
		}
		tot.Conns += res.Conns
		tot.Held += res.Held
		tot.Refused += res.Refused
		tot.Failed += res.Failed
		tot.Lost += res.Lost
		tot.SlowDials += res.SlowDials
		tot.DialMaxMS = max(tot.DialMaxMS, res.DialMaxMS)
		tot.TookMS = max(tot.TookMS, res.TookMS)
		for k, v := range res.Classes {
			tot.Classes[k] += v
		}
	}
	r.Held, r.Refused, r.Failed = tot.Held, tot.Refused, tot.Failed
	need := n*cost + r.FDsBefore + fdSlack
	within := need <= s.limit
	t.Logf("%s: %d connections from %d processes: %d held, %d refused, %d failed (%d lost while held); refusals and failures: %s; %d dials took 1 s or more, the slowest that worked %dms; %dms in all",
		p.name, tot.Conns, procs, tot.Held, tot.Refused, tot.Failed, tot.Lost, sortedClasses(tot.Classes), tot.SlowDials, tot.DialMaxMS, tot.TookMS)
	if tot.SlowDials > 0 {
		r.Note = fmt.Sprintf("%d dials took 1 s or more (a SYN sent again), the slowest %.1f s", tot.SlowDials, float64(tot.DialMaxMS)/1000)
	}
	t.Logf("%s: %d connections at about %d descriptors each need about %d of %s's %d: %s",
		p.name, n, cost, need, s.binName(), s.limit, map[bool]string{true: "within the limit", false: "beyond the limit"}[within])
	if tot.Failed > 0 {
		t.Errorf("%s: %d of %d connections failed, want every one held or refused cleanly (a reset or a close, without a timeout): %s",
			p.name, tot.Failed, n, sortedClasses(tot.Classes))
	}
	if within && tot.Held != n {
		t.Errorf("%s: %d connections within %s's descriptor limit: got %d held, want all", p.name, n, s.binName(), tot.Held)
	}
}

// loadChurn churns the four TCP paths at once for the form's churn time.
func loadChurn(t *testing.T, s *suite, r *row) {
	args := []string{"-d", s.f.churn.String(), "-conc", "4"}
	gens := []*gen{
		s.nsGen("churn", append(args, targets(true, "tcp")...)...),
		s.hostGen("churn", append(args, targets(false, "tcp")...)...),
	}
	s.churnResults(t, r, gens, s.f.churn+2*time.Minute)
	r.Note = "held: transactions"
}

// churnResults collects churn generators' results into r: every
// transaction must succeed, none refused, none failed. It returns the UDP
// transactions by target.
func (s *suite) churnResults(t *testing.T, r *row, gens []*gen, timeout time.Duration) map[string]int {
	r.Held, r.Refused, r.Failed = 0, 0, 0
	udp := map[string]int{}
	for _, g := range gens {
		var res churnResult
		if err := g.wait(timeout, &res); err != nil {
			t.Errorf("churn: %v", err)
			continue
		}
		for _, tg := range res.Targets {
			if strings.HasPrefix(tg.Target, "udp:") {
				udp[tg.Target] += tg.Tx + tg.Refused + tg.Failed
			}
			r.Held += tg.Tx
			r.Refused += tg.Refused
			r.Failed += tg.Failed
			t.Logf("churn %s %s: %d transactions, %d refused, %d failed: %s", g.what, tg.Target, tg.Tx, tg.Refused, tg.Failed, sortedClasses(tg.Classes))
			if tg.Refused+tg.Failed > 0 {
				t.Errorf("churn %s %s: got %d refused and %d failed of %d, want none: %s",
					g.what, tg.Target, tg.Refused, tg.Failed, tg.Tx+tg.Refused+tg.Failed, sortedClasses(tg.Classes))
			}
			if tg.Tx == 0 {
				t.Errorf("churn %s %s: got no transaction, want many", g.what, tg.Target)
			}
		}
	}
	return udp
}

// runLoad measures gopasta's baseline, starts the established connections
// and a sampler (every), runs the load, then checks: the established
// connections intact throughout, gopasta alive with a clean log, fresh
// connections on every path, descriptors back near the baseline (for a
// load that leaves UDP flows: once they expire in the long form, within
// the load's bound in the short one). after, if not nil, gets the samples.
// The row goes to the summary.
func (s *suite) runLoad(t *testing.T, name string, every time.Duration, run func(*row), after func([]sample, *row)) {
	t.Helper()
	start := time.Now()
	r := row{Load: name, Held: -1, Refused: -1, Failed: -1, FDsAfter: -1, RSSAfter: -1}
	defer func() { r.Took = time.Since(start); record(r) }()
	pid := s.gp.PID()
	var err error
	if r.FDsBefore, err = s.settledFDs(2*time.Second, 15*time.Second); err != nil {
		s.failWithLog(t, "%s before the load: %v", s.binName(), err)
	}
	r.RSSBefore, _ = procRSS(pid)
	_, stderr := s.gp.Output()
	s.logStart = len(stderr)
	t.Logf("%s: %s (pid %d) before the load: %d descriptors of %d, RSS %d KiB", name, s.binName(), pid, r.FDsBefore, s.limit, r.RSSBefore)
	st := s.startSteady(t)
	sm := s.sampler(every)
	run(&r)
	ss := sm.end()
	r.FDsPeak, r.RSSPeak = peaks(ss)
	r.Established = st.stop(t)
	if after != nil {
		after(ss, &r)
	}

	if how := s.exited(); how != "" {
		r.Survived = "no: " + how
		t.Errorf("%s: %s during the load, want it alive", s.binName(), how)
		s.checkLog(t)
		return
	}
	r.Survived = "yes"
	if err := s.probe(t, probeTimeout, 1, "tcp", "udp"); err != nil {
		t.Errorf("after the load: %v", err)
	}

	bound := func() (int, string) { return r.FDsBefore + fdSlack, "the baseline and the pools' slack" }
	wait := settleTCP
	switch {
	case r.udpExpiry > 0 && s.f.expiry:
		// The UDP flows' timeout, with a tick of the timers and some
		// margin.
		wait = r.udpExpiry + 15*time.Second
		t.Logf("waiting up to %v for the UDP flows to expire", wait)
	case r.udpExpiry > 0:
		bound = func() (int, string) {
			n, why := r.udpBound()
			return r.FDsBefore + fdSlack + n, "the baseline, the pools' slack and " + why
		}
	}
	fds, err := s.waitFDs(wait, bound)
	r.FDsAfter = fds
	if err != nil {
		t.Errorf("after the load: %v", err)
	}
	r.RSSAfter, _ = procRSS(pid)
	t.Logf("%s: %s after the load: %d descriptors (%+d), RSS %d KiB (peak %d descriptors, %d KiB)",
		name, s.binName(), fds, fds-r.FDsBefore, r.RSSAfter, r.FDsPeak, r.RSSPeak)
	if how := s.exited(); how != "" {
		r.Survived = "no: " + how + " after the load"
		t.Errorf("%s: %s after the load, want it alive", s.binName(), how)
	}
	s.checkLog(t)
}

// settledFDs is the baseline: gopasta's descriptors once the count has
// held still for quiet (its pools refill after the start-up probes, at
// their own pace in pasta), or the last count after timeout.
func (s *suite) settledFDs(quiet, timeout time.Duration) (int, error) {
	last, since := -1, time.Now()
	for deadline := time.Now().Add(timeout); ; time.Sleep(250 * time.Millisecond) {
		n, err := procFDs(s.gp.PID())
		if err != nil {
			return 0, fmt.Errorf("gone: %v", err)
		}
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) >= quiet || time.Now().After(deadline) {
			return n, nil
		}
	}
}

// udpTimeout is how long an idle UDP flow with one datagram each way
// lives: in gopasta 30 s over the TAP (fwd: 120 s only once both sides
// sent more than once) and 120 s spliced (splice: once answered); in
// pasta 180 s.
func (s *suite) udpTimeout(spliced bool) time.Duration {
	switch {
	case !s.gopasta:
		return 180 * time.Second
	case spliced:
		return 120 * time.Second
	}
	return 30 * time.Second
}
