package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/sockdiag"
	"golang.org/x/sys/unix"
)

// Auto forwarding: every autoInterval, read which ports the other side
// listens on and open or close listeners to match (pasta's "auto").

func (pf *portFwd) autoLoop(ctx context.Context) {
	defer pf.wg.Done()
	t := time.NewTicker(autoInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pf.stop:
			return
		case <-t.C:
			pf.scan()
		}
	}
}

// openDiag opens an inet_diag socket on each side (the namespace's on its
// thread: the socket keeps the namespace it was made in), so that scans
// neither parse /proc text nor hop to the namespace thread. A side where
// it fails keeps reading /proc.
func (pf *portFwd) openDiag() {
	var err error
	if pf.diagHost, err = sockdiag.Open(); err != nil {
		pf.log.Debug("auto forwarding: inet_diag unavailable on the host, reading /proc", "err", err)
	}
	err = pf.th.Do(func() (err error) {
		pf.diagNS, err = sockdiag.Open()
		return err
	})
	if err != nil {
		pf.log.Debug("auto forwarding: inet_diag unavailable in the namespace, reading /proc", "err", err)
	}
}

// listening returns the listening TCP and bound UDP ports of *c's
// namespace, or false when it cannot tell (no *c, or a failed dump). A
// kernel without tcp_diag or udp_diag will not grow them: *c is closed and
// cleared so later scans go straight to /proc.
func listening(c **sockdiag.Conn) (tcp, udp config.PortSet, ok bool) {
	if *c == nil {
		return tcp, udp, false
	}
	err := (*c).Ports(unix.IPPROTO_TCP, sockdiag.StateListen, func(p uint16) { tcp.Add(p) })
	if err == nil {
		err = (*c).Ports(unix.IPPROTO_UDP, sockdiag.StateClose, func(p uint16) { udp.Add(p) })
	}
	if err != nil {
		if errors.Is(err, sockdiag.ErrNotSupported) {
			(*c).Close()
			*c = nil
		}
		return config.PortSet{}, config.PortSet{}, false
	}
	return tcp, udp, true
}

// readTables reads /proc net tables under dir into TCP listening and UDP
// bound port sets.
func readTables(dir string) (tcp, udp config.PortSet) {
	for _, n := range []string{"tcp", "tcp6"} {
		if b, err := os.ReadFile(dir + "/" + n); err == nil {
			parseProcNet(b, procStateListen, &tcp)
		}
	}
	for _, n := range []string{"udp", "udp6"} {
		if b, err := os.ReadFile(dir + "/" + n); err == nil {
			parseProcNet(b, procStateUnconn, &udp)
		}
	}
	return tcp, udp
}

// autoUDPSet is what UDP auto forwarding follows: bound UDP ports outside
// the ephemeral range (client sockets live there), and, as pasta, the
// ports TCP listens on.
func autoUDPSet(udp, tcp *config.PortSet, eph config.PortRange) config.PortSet {
	var out config.PortSet
	for i := range out {
		out[i] = tcp[i]
	}
	for p := 1; p <= 65535; p++ {
		if udp.Has(uint16(p)) && (p < int(eph.First) || p > int(eph.Last)) {
			out.Add(uint16(p))
		}
	}
	return out
}

// without returns s minus own.
func without(s, own *config.PortSet) config.PortSet {
	var out config.PortSet
	for i := range out {
		out[i] = s[i] &^ own[i]
	}
	return out
}

// scan runs one auto forwarding round.
func (pf *portFwd) scan() {
	needNS := pf.tcp.Mode == config.PortsAuto || pf.udp.Mode == config.PortsAuto
	needHost := pf.tcpNS.Mode == config.PortsAuto || pf.udpNS.Mode == config.PortsAuto
	eph := config.DefaultEphemeral
	if r, err := config.ReadEphemeralRange(); err == nil {
		eph = r
	}
	pf.mu.Lock()
	ownNS := pf.ownNS
	pf.mu.Unlock()
	if needNS {
		tcp, udp, ok := listening(&pf.diagNS)
		var err error
		if !ok {
			// /proc/self/net is the thread group leader's namespace;
			// the namespace thread's own tables are under thread-self.
			err = pf.th.Do(func() error {
				tcp, udp = readTables("/proc/thread-self/net")
				return nil
			})
		}
		if err == nil {
			tcpW := without(&tcp, &ownNS[0])
			udpAll := autoUDPSet(&udp, &tcp, eph)
			udpW := without(&udpAll, &ownNS[1])
			pf.sync(false, false, planAuto(&pf.tcp, false, pf.host, &tcpW))
			pf.sync(false, true, planAuto(&pf.udp, true, pf.host, &udpW))
		}
	}
	if needHost {
		// Read after the namespace round: it may have just opened host
		// listeners, which must not be mirrored back.
		pf.mu.Lock()
		ownHost := pf.ownHost
		pf.mu.Unlock()
		tcp, udp, ok := listening(&pf.diagHost)
		if !ok {
			tcp, udp = readTables("/proc/self/net")
		}
		tcpW := without(&tcp, &ownHost[0])
		udpAll := autoUDPSet(&udp, &tcp, eph)
		udpW := without(&udpAll, &ownHost[1])
		pf.sync(true, false, planAuto(&pf.tcpNS, false, pf.nsSide, &tcpW))
		pf.sync(true, true, planAuto(&pf.udpNS, true, pf.nsSide, &udpW))
	}
}

// sync opens the auto listeners of want that are missing on one side and
// closes those no longer wanted.
func (pf *portFwd) sync(nsSide, udp bool, want []listenPlan) {
	byPort := map[uint16][]listenPlan{}
	for _, p := range want {
		byPort[p.port] = append(byPort[p.port], p)
	}
	pf.mu.Lock()
	if pf.closed {
		pf.mu.Unlock()
		return
	}
	var stale []autoKey
	for k := range pf.auto {
		if k.nsSide == nsSide && k.udp == udp {
			if _, ok := byPort[k.port]; !ok {
				stale = append(stale, k)
			}
		}
	}
	var gone []closer
	for _, k := range stale {
		gone = append(gone, pf.auto[k]...)
		delete(pf.auto, k)
	}
	var fresh []uint16
	for port := range byPort {
		if _, ok := pf.auto[autoKey{nsSide, udp, port}]; !ok {
			fresh = append(fresh, port)
		}
	}
	pf.mu.Unlock()

	for _, c := range gone {
		c()
	}
	own := &pf.ownHost
	if nsSide {
		own = &pf.ownNS
	}
	for _, k := range stale {
		pf.mu.Lock()
		clearPort(&own[b2i(udp)], k.port)
		pf.mu.Unlock()
		pf.log.Debug("auto forwarding: port closed", "ns", nsSide, "udp", udp, "port", k.port)
	}
	for _, port := range fresh {
		var cs []closer
		for _, p := range byPort[port] {
			c, err := pf.open(p, nsSide)
			if err != nil {
				pf.log.Debug("auto forwarding: cannot bind", "port", port, "err", err)
				continue
			}
			cs = append(cs, c)
		}
		pf.mu.Lock()
		if pf.closed {
			pf.mu.Unlock()
			for _, c := range cs {
				c()
			}
			return
		}
		// Remember the port even if nothing bound, so a port someone
		// else holds is not retried (and warned about) every second.
		pf.auto[autoKey{nsSide, udp, port}] = cs
		pf.mu.Unlock()
		if len(cs) > 0 {
			pf.log.Debug("auto forwarding: port opened", "ns", nsSide, "udp", udp, "port", port)
		}
	}
}

// clearPort removes p from s (PortSet has no Remove).
func clearPort(s *config.PortSet, p uint16) { s[p>>6] &^= 1 << (p & 63) }
