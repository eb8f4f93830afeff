package portfwd

// Keeping the open sockets in step with the tables.
//
// A socket is identified by its key (side, protocol, family, address,
// port, interface); what the tables want is a set of plans by key. apply
// makes the open set equal to the wanted one in three steps: open the
// sockets of keys not open yet (and re-point, without closing it, an open
// socket whose target changed: its descriptor is duplicated and handed
// over before the old registration goes), then close the sockets no
// longer wanted. So a port that a new table still forwards never stops
// listening, a new port listens before an old one closes, and connections
// already accepted are never touched: they belong to the engine's or the
// splice forwarder's loop, not to a listener.
//
// Sockets that could not be bound stay wanted: static ones are retried
// every second (tick) until they bind, as pasta does; auto ones are not
// retried while their port stays in the scan (someone else holds it on our
// side; trying again every second would only repeat the failure).

import (
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/sock"
)

// lsock is an open socket and its registration with the loop serving it.
type lsock struct {
	plan  listenPlan
	fd    int // owned by the registration; valid until close
	close closer
}

// sockSet is the open sockets and what the tables want of them.
type sockSet struct {
	socks      map[sockKey]*lsock
	static     map[sockKey]listenPlan // wanted by non-auto rules
	scan       map[sockKey]listenPlan // wanted by auto rules, last scan
	pending    map[sockKey]listenPlan // static, could not be bound: retried
	scanFailed map[sockKey]bool       // auto, could not be bound: not retried
}

func newSockSet() sockSet {
	return sockSet{socks: map[sockKey]*lsock{}, static: map[sockKey]listenPlan{},
		scan: map[sockKey]listenPlan{}, pending: map[sockKey]listenPlan{}, scanFailed: map[sockKey]bool{}}
}

// maxRetries bounds the binds retried in one tick, so that thousands of
// ports someone else holds cost a bounded amount of work per second.
const maxRetries = 4096

// nsBatch is how many namespace sockets are made per trip to the
// namespace's thread, which spliced connections also need.
const nsBatch = 256

// apply makes next the tables and the open sockets what they want. At
// start (start), a strict socket that cannot be bound is an error and
// nothing is applied; later, failures are logged and retried.
func (pf *Forwarder) apply(next [2]fwdrule.Table, start bool) error {
	pf.opMu.Lock()
	defer pf.opMu.Unlock()
	if pf.isClosed() {
		return ErrClosed
	}
	set := &pf.set
	static := map[sockKey]listenPlan{}
	for i := range next {
		for _, p := range planStatic(&next[i], pf.side(i == tNS)) {
			static[p.key()] = p
		}
	}
	scan := pf.scanPlans(&next, set.scan)

	// 1. Open (or re-point) everything wanted.
	var fresh []listenPlan
	var moved []listenPlan
	consider := func(k sockKey, p listenPlan) {
		if s := set.socks[k]; s != nil {
			if s.plan.route() != p.route() {
				moved = append(moved, p)
			} else {
				s.plan = p
			}
			return
		}
		if p.scan && set.scanFailed[k] {
			return
		}
		fresh = append(fresh, p)
	}
	for k, p := range static {
		consider(k, p)
	}
	for k, p := range scan {
		if _, ok := static[k]; !ok {
			consider(k, p)
		}
	}
	sortPlans(fresh)
	var opened []*lsock
	var failedPlans []listenPlan
	var failedErrs []error
	var fatal error
	for i, r := range pf.openAll(fresh) {
		p := fresh[i]
		if r.err == nil {
			set.socks[p.key()] = r.s
			opened = append(opened, r.s)
			continue
		}
		if start && bindFailureFatal(p, r.err) && fatal == nil {
			fatal = r.err
		}
		failedPlans, failedErrs = append(failedPlans, p), append(failedErrs, r.err)
	}
	if fatal != nil {
		for _, s := range opened {
			delete(set.socks, s.plan.key())
			s.close()
		}
		return fatal
	}
	for _, p := range moved {
		pf.reroute(set.socks[p.key()], p)
	}

	// 2. Close what is no longer wanted.
	var gone []*lsock
	for k, s := range set.socks {
		_, st := static[k]
		_, sc := scan[k]
		if !st && !sc {
			gone = append(gone, s)
			delete(set.socks, k)
		}
	}
	for _, s := range gone {
		s.close()
	}
	// A socket that could not be bound because an old one held its port
	// (the same port, now bound to another address) binds now, rather
	// than at the next retry.
	if len(gone) > 0 && len(failedPlans) > 0 {
		retry := failedPlans
		failedPlans, failedErrs = nil, nil
		for i, r := range pf.openAll(retry) {
			if r.err == nil {
				set.socks[retry[i].key()] = r.s
				opened = append(opened, r.s)
				continue
			}
			failedPlans, failedErrs = append(failedPlans, retry[i]), append(failedErrs, r.err)
		}
	}
	var fails failures
	for i, p := range failedPlans {
		pf.failed(p, failedErrs[i], &fails)
	}
	for k := range set.pending {
		if _, ok := static[k]; !ok {
			delete(set.pending, k)
		}
	}
	for k := range set.scanFailed {
		if _, ok := scan[k]; !ok {
			delete(set.scanFailed, k)
		}
	}
	set.static, set.scan = static, scan
	fails.log(pf, start)

	pf.mu.Lock()
	pf.tables = next
	pf.mu.Unlock()
	pf.updateOwn()
	if !start {
		n := 0
		for i := range next {
			n += len(next[i].Rules)
		}
		pf.log.Debug("forwarding tables replaced", "rules", n, "opened", len(opened)+len(moved), "closed", len(gone),
			"retrying", len(set.pending))
	}
	return nil
}

// tick is the once-a-second round: follow the other side's listening
// ports for auto rules, and retry static sockets that could not be bound.
func (pf *Forwarder) tick() {
	pf.opMu.Lock()
	defer pf.opMu.Unlock()
	if pf.isClosed() {
		return
	}
	set := &pf.set
	pf.mu.Lock()
	tables := pf.tables
	pf.mu.Unlock()
	scan := pf.scanPlans(&tables, set.scan)
	changed := false

	var fresh []listenPlan
	for k, p := range scan {
		if _, open := set.socks[k]; open || set.scanFailed[k] {
			continue
		}
		if _, st := set.static[k]; st {
			continue
		}
		fresh = append(fresh, p)
	}
	for k, p := range set.pending {
		if len(fresh) >= maxRetries {
			break
		}
		if _, open := set.socks[k]; !open {
			fresh = append(fresh, p)
		}
	}
	sortPlans(fresh)
	for i, r := range pf.openAll(fresh) {
		p := fresh[i]
		k := p.key()
		if r.err != nil {
			if p.scan {
				set.scanFailed[k] = true
				pf.log.Debug("auto forwarding: cannot bind", "socket", p.String(), "err", r.err)
			} else if familyMissing(p, r.err) {
				delete(set.pending, k)
			}
			continue
		}
		set.socks[k] = r.s
		changed = true
		if p.scan {
			pf.log.Debug("auto forwarding: port opened", "socket", p.String())
		} else {
			delete(set.pending, k)
			pf.log.Info("forwarding " + p.String() + ": bound on retry")
		}
	}
	var gone []*lsock
	for k, s := range set.socks {
		if !s.plan.scan {
			continue
		}
		if _, sc := scan[k]; sc {
			continue
		}
		if _, st := set.static[k]; st {
			continue
		}
		gone = append(gone, s)
		delete(set.socks, k)
		pf.log.Debug("auto forwarding: port closed", "socket", s.plan.String())
	}
	for _, s := range gone {
		s.close()
		changed = true
	}
	for k := range set.scanFailed {
		if _, ok := scan[k]; !ok {
			delete(set.scanFailed, k)
		}
	}
	set.scan = scan
	if changed {
		pf.updateOwn()
	}
}

func (pf *Forwarder) isClosed() bool {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return pf.closed
}

// updateOwn recomputes the ports we listen on, per side and protocol.
func (pf *Forwarder) updateOwn() {
	var own [2][2]fwdrule.PortSet
	for k := range pf.set.socks {
		own[b2i(k.nsSide)][b2i(k.udp)].Add(k.port)
	}
	pf.mu.Lock()
	pf.ownHost, pf.ownNS = own[0], own[1]
	pf.mu.Unlock()
}

// sortPlans orders plans by side, protocol, port and address, so that
// sockets open in a predictable order (and logs read in order).
func sortPlans(ps []listenPlan) {
	slices.SortFunc(ps, func(a, b listenPlan) int {
		switch {
		case a.nsSide != b.nsSide:
			return b2i(a.nsSide) - b2i(b.nsSide)
		case a.UDP != b.UDP:
			return b2i(a.UDP) - b2i(b.UDP)
		case a.Port != b.Port:
			return int(a.Port) - int(b.Port)
		}
		return a.Addr.Compare(b.Addr)
	})
}

type openResult struct {
	s   *lsock
	err error
}

// openAll binds and registers ps: host sockets here, namespace ones on
// the namespace's thread in batches.
func (pf *Forwarder) openAll(ps []listenPlan) []openResult {
	out := make([]openResult, len(ps))
	fds := make([]int, len(ps))
	errs := make([]error, len(ps))
	var ns []int
	for i := range ps {
		if ps[i].nsSide {
			ns = append(ns, i)
			continue
		}
		p := ps[i].Listen
		p.Freebind = pf.cfg.Freebind
		fds[i], errs[i] = p.Open()
	}
	// Every host socket is bound: the any-address sockets and their
	// loopback companions that shared a port through SO_REUSEPORT stop
	// admitting others to it.
	for i := range ps {
		if ps[i].ReusePort && errs[i] == nil {
			sock.ClearReusePort(fds[i])
		}
	}
	for len(ns) > 0 {
		batch := ns[:min(len(ns), nsBatch)]
		ns = ns[len(batch):]
		err := pf.cfg.InNS(func() error {
			for _, i := range batch {
				fds[i], errs[i] = ps[i].Open()
			}
			return nil
		})
		if err != nil {
			for _, i := range batch {
				if errs[i] == nil && fds[i] > 0 {
					unix.Close(fds[i])
				}
				fds[i], errs[i] = -1, err
			}
		}
	}
	for i := range ps {
		if errs[i] != nil {
			out[i].err = ps[i].err(errs[i])
			continue
		}
		c, err := pf.register(ps[i], fds[i])
		if err != nil {
			out[i].err = ps[i].err(err)
			continue
		}
		out[i].s = &lsock{plan: ps[i], fd: fds[i], close: c}
	}
	return out
}

// reroute points open socket s at p's target without closing it: a
// duplicate of its descriptor is registered with the new target, then the
// old registration (and descriptor) goes. Connections waiting in the
// backlog meanwhile go to either target.
func (pf *Forwarder) reroute(s *lsock, p listenPlan) {
	nfd, err := unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		var c closer
		if c, err = pf.register(p, nfd); err == nil {
			s.close()
			s.plan, s.fd, s.close = p, nfd, c
			return
		}
	}
	pf.log.Warn("cannot change the target of "+s.plan.String()+", keeping it", "err", errText(err))
}

// failures collects sockets that could not be opened, so that thousands
// of them make a few log lines, not thousands.
type failures struct {
	byErr map[string][]string
	order []string
}

// failed records p's failure and, for a static socket, queues it for
// retry unless the machine lacks the family.
func (pf *Forwarder) failed(p listenPlan, err error, f *failures) {
	k := p.key()
	if p.companion {
		// Not something the user asked for: its twin serves loopback
		// peers too, through the engine. Not retried.
		if p.scan {
			pf.set.scanFailed[k] = true
		}
		pf.log.Debug("loopback companion not bound; the engine serves loopback peers", "socket", p.String(), "err", err)
		return
	}
	if p.scan {
		pf.set.scanFailed[k] = true
		pf.log.Debug("auto forwarding: cannot bind", "socket", p.String(), "err", err)
		return
	}
	if familyMissing(p, err) {
		return
	}
	pf.set.pending[k] = p
	if f.byErr == nil {
		f.byErr = map[string][]string{}
	}
	why := errText(err)
	if _, ok := f.byErr[why]; !ok {
		f.order = append(f.order, why)
	}
	f.byErr[why] = append(f.byErr[why], p.String())
}

func (f *failures) log(pf *Forwarder, start bool) {
	for _, why := range f.order {
		ps := f.byErr[why]
		shown := ps
		if len(shown) > 8 {
			shown = shown[:8]
		}
		msg := "cannot forward some ports, retrying every second"
		if !start {
			msg = "error switching to new forwarding rules: cannot forward some ports, retrying every second"
		}
		pf.log.Warn(msg, "reason", why, "count", len(ps), "ports", strings.Join(shown, ", "))
	}
}
