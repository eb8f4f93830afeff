package portfwd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/sockdiag"
	"golang.org/x/sys/unix"
)

// Auto forwarding: every autoInterval, read which ports the other side
// listens on and open or close listeners to match (pasta's "auto").

// loop runs tick every autoInterval until ctx ends or Close.
func (pf *Forwarder) loop(ctx context.Context) {
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
			pf.tick()
		}
	}
}

// openDiag opens an inet_diag socket on each side (the namespace's on its
// thread: the socket keeps the namespace it was made in), so that scans
// neither parse /proc text nor hop to the namespace thread. A side where
// it fails keeps reading /proc.
func (pf *Forwarder) openDiag() {
	if pf.diagOpened {
		return
	}
	pf.diagOpened = true
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
func listening(c **sockdiag.Conn) (tcp, udp fwdrule.PortSet, ok bool) {
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
		return fwdrule.PortSet{}, fwdrule.PortSet{}, false
	}
	return tcp, udp, true
}

// autoUDPSet is what UDP auto forwarding follows: bound UDP ports and, as
// pasta, the ports TCP listens on. Client sockets bound in the ephemeral
// range are left to the rules: auto without ports of its own leaves that
// range out.
func autoUDPSet(udp, tcp *fwdrule.PortSet) fwdrule.PortSet {
	out := *udp
	out.Union(tcp)
	return out
}

// without returns s minus own.
func without(s, own *fwdrule.PortSet) fwdrule.PortSet {
	var out fwdrule.PortSet
	for i := range out {
		out[i] = s[i] &^ own[i]
	}
	return out
}

// ports reads the listening TCP and bound UDP ports of one side:
// Config.Listening if set, else inet_diag, else the /proc tables.
func (pf *Forwarder) ports(nsSide bool) (tcp, udp fwdrule.PortSet, err error) {
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
	// The tables were opened at Start (procnet.go), each side's in its
	// namespace.
	if !nsSide {
		tcp, udp = pf.procHost.read()
		return tcp, udp, nil
	}
	tcp, udp = pf.procNS.read()
	return tcp, udp, nil
}

// scanPlans lists the sockets the auto rules of tables want now: the
// namespace's listening ports drive HOST's auto rules (-t, -u auto), the
// host's drive SPLICE's (-T, -U auto). A side whose ports cannot be read
// keeps what the previous scan (prev) wanted there.
func (pf *Forwarder) scanPlans(tables *[2]fwdrule.Table, prev map[sockKey]listenPlan) map[sockKey]listenPlan {
	out := map[sockKey]listenPlan{}
	for i := range tables {
		nsSide := i == tNS
		if !hasScan(&tables[i]) {
			continue
		}
		pf.openDiag()
		// The other side's ports include our own listeners there, which
		// must not be mirrored back; they are those of the previous round,
		// which may have just opened some.
		pf.mu.Lock()
		own := *pf.own(!nsSide)
		pf.mu.Unlock()
		tcp, udp, err := pf.ports(!nsSide)
		if err != nil {
			for k, p := range prev {
				if k.nsSide == nsSide {
					out[k] = p
				}
			}
			continue
		}
		tcpW := without(&tcp, &own[0])
		udpAll := autoUDPSet(&udp, &tcp)
		udpW := without(&udpAll, &own[1])
		for _, p := range planScan(&tables[i], pf.side(nsSide), &tcpW, &udpW) {
			out[p.key()] = p
		}
	}
	return out
}

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
func parseProcNet(content []byte, state uint8, set *fwdrule.PortSet) {
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
