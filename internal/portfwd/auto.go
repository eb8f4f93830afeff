package portfwd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/sockdiag"
	"golang.org/x/sys/unix"
)

// Auto forwarding: every autoInterval, read which ports the other side
// listens on and open or close listeners to match (pasta's "auto").

func (pf *Forwarder) autoLoop(ctx context.Context) {
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
func (pf *Forwarder) openDiag() {
	var err error
	if pf.diagHost, err = sockdiag.Open(); err != nil {
		pf.log.Debug("auto forwarding: inet_diag unavailable on the host, reading /proc", "err", err)
	}
	err = pf.cfg.InNS(func() (err error) {
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

// ports reads the listening TCP and bound UDP ports of one side:
// Config.Listening if set, else inet_diag, else the /proc tables.
func (pf *Forwarder) ports(nsSide bool) (tcp, udp config.PortSet, err error) {
	if pf.cfg.Listening != nil {
		return pf.cfg.Listening(nsSide)
	}
	c := &pf.diagHost
	if nsSide {
		c = &pf.diagNS
	}
	if tcp, udp, ok := listening(c); ok {
		return tcp, udp, nil
	}
	if !nsSide {
		tcp, udp = readTables("/proc/self/net")
		return tcp, udp, nil
	}
	// /proc/self/net is the thread group leader's namespace; the
	// namespace thread's own tables are under thread-self.
	err = pf.cfg.InNS(func() error {
		tcp, udp = readTables("/proc/thread-self/net")
		return nil
	})
	return tcp, udp, err
}

// scan runs one auto forwarding round: the namespace's ports drive the
// host's auto listeners (-t, -u auto), the host's ports the namespace's
// (-T, -U auto).
func (pf *Forwarder) scan() {
	r := &pf.cfg.Rules
	eph := config.DefaultEphemeral
	if e, err := config.ReadEphemeralRange(); err == nil {
		eph = e
	}
	for _, s := range []struct {
		nsSide   bool // where the auto listeners are
		tcp, udp *config.PortSpec
	}{{false, &r.TCP, &r.UDP}, {true, &r.TCPNS, &r.UDPNS}} {
		if s.tcp.Mode != config.PortsAuto && s.udp.Mode != config.PortsAuto {
			continue
		}
		// The other side's ports include our own listeners there, which
		// must not be mirrored back; read them after the previous round,
		// which may have just opened some.
		pf.mu.Lock()
		own := *pf.own(!s.nsSide)
		pf.mu.Unlock()
		tcp, udp, err := pf.ports(!s.nsSide)
		if err != nil {
			continue
		}
		tcpW := without(&tcp, &own[0])
		udpAll := autoUDPSet(&udp, &tcp, eph)
		udpW := without(&udpAll, &own[1])
		f := pf.side(s.nsSide)
		pf.sync(s.nsSide, false, planAuto(s.tcp, false, f, &tcpW))
		pf.sync(s.nsSide, true, planAuto(s.udp, true, f, &udpW))
	}
}

// sync opens the auto listeners of want that are missing on one side and
// closes those no longer wanted.
func (pf *Forwarder) sync(nsSide, udp bool, want []listenPlan) {
	byPort := map[uint16][]listenPlan{}
	for _, p := range want {
		byPort[p.Port] = append(byPort[p.Port], p)
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
	own := pf.own(nsSide)
	for _, k := range stale {
		pf.mu.Lock()
		clearPort(&own[b2i(udp)], k.port)
		pf.mu.Unlock()
		pf.log.Debug("auto forwarding: port closed", "ns", nsSide, "udp", udp, "port", k.port)
	}
	for _, port := range fresh {
		var cs []closer
		for _, p := range byPort[port] {
			c, err := pf.open(p)
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

// TCP and UDP socket states in /proc/net/{tcp,udp}: listening TCP, and
// unconnected UDP (a server's socket).
const (
	procStateListen = 0x0a
	procStateUnconn = 0x07
)

// parseProcNet adds to set the local port of every socket in a
// /proc/net/{tcp,tcp6,udp,udp6} table whose state is state. Malformed lines
// are skipped: the kernel's format is fixed, but a bad line must not stop
// forwarding of the others.
func parseProcNet(content []byte, state uint8, set *config.PortSet) {
	sc := bufio.NewScanner(bytes.NewReader(content))
	sc.Buffer(make([]byte, 0, 512), 4096)
	first := true
	for sc.Scan() {
		if first { // header line
			first = false
			continue
		}
		f := bytes.Fields(sc.Bytes())
		if len(f) < 4 {
			continue
		}
		st, err := strconv.ParseUint(string(f[3]), 16, 8)
		if err != nil || uint8(st) != state {
			continue
		}
		local := f[1]
		i := bytes.LastIndexByte(local, ':')
		if i < 0 {
			continue
		}
		port, err := strconv.ParseUint(string(local[i+1:]), 16, 16)
		if err != nil || port == 0 {
			continue
		}
		set.Add(uint16(port))
	}
}
