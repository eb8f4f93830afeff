package run

// The engine's parameters from the command line and the network plan, the
// engine started on the link, and its --stats lines.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/ns"
)

// engineSetup is everything the engine needs, derived from the command line
// and the network plan.
type engineSetup struct {
	params fwd.NetParams
	opts   fwd.Options
}

// planEngine fills the engine's parameters: what it impersonates on the
// link (gateway, our MAC and link-local address), what the namespace gets
// from DHCP, DHCPv6 and router advertisements, and pasta's address mapping.
func planEngine(cfg *config.Config, p *netPlan, rc resolvConf) engineSetup {
	mac := cfg.OurMAC
	if mac == nil {
		mac = config.DefaultMAC
	}
	np := fwd.NetParams{
		OurMAC:   mac,
		MTU:      p.MTU,
		NoDHCP:   cfg.NoDHCP || !p.IPv4,
		NoDHCPv6: cfg.NoDHCPv6 || !p.IPv6,
		NoNDP:    cfg.NoNDP || !p.IPv6,
		NoRA:     cfg.NoRA || cfg.NoNDP || !p.IPv6 || cfg.ConfigNet,
		Hostname: cfg.Hostname,
		FQDN:     cfg.FQDN,
	}
	if p.IPv4 {
		np.Addr4, np.Prefix4, np.Gateway4 = p.Addr4.Addr(), p.Addr4.Bits(), p.Gateway4
	}
	if p.IPv6 {
		np.Addr6, np.Gateway6 = p.Addr6.Addr(), p.Gateway6
		np.Prefix6 = 64
		if p.Addr6.IsValid() {
			np.Prefix6 = p.Addr6.Bits()
		}
		np.OurLL6 = linkLocalFromMAC(mac)
		if p.Gateway6.IsLinkLocalUnicast() {
			// Router advertisements come from the gateway the namespace
			// routes through, so that its default route stays valid.
			np.OurLL6 = p.Gateway6
		}
	}

	o := fwd.Options{
		NoTCP: cfg.NoTCP, NoUDP: cfg.NoUDP, NoICMP: cfg.NoICMP,
		NoMapGW:          cfg.NoMapGW || cfg.NoMapHostLoopback,
		MapHostLoopback4: cfg.MapHostLoopback4, MapHostLoopback6: cfg.MapHostLoopback6,
		MapGuestAddr4: cfg.MapGuestAddr4, MapGuestAddr6: cfg.MapGuestAddr6,
		Outbound4: cfg.Outbound4, Outbound6: cfg.Outbound6,
		OutboundIf4: cfg.OutboundIf4, OutboundIf6: cfg.OutboundIf6,
		Freebind: cfg.Freebind,
	}
	// The address whose traffic goes to host loopback: DNS on it may need
	// to reach a loopback resolver.
	nat := fwd.NewNAT(&np, &o)
	d := planDNS(dnsInput{
		DNS: cfg.DNS, NoDNS: cfg.NoDNS, Search: cfg.Search, NoSearch: cfg.NoSearch,
		Forward4: cfg.DNSForward4, Forward6: cfg.DNSForward6,
		Host4: cfg.DNSHost4, Host6: cfg.DNSHost6,
		MapLo4: nat.MapHostLoopback4, MapLo6: nat.MapHostLoopback6,
		Resolv: rc,
	})
	if !cfg.NoDHCPDNS {
		np.DNS4, np.DNS6 = d.DNS4, d.DNS6
	}
	if !cfg.NoDHCPSearch {
		np.Search = d.Search
	}
	o.DNSForward4, o.DNSHost4 = d.Forward4, d.ForwardTo4
	o.DNSForward6, o.DNSHost6 = d.Forward6, d.ForwardTo6
	return engineSetup{params: np, opts: o}
}

// linkLocalFromMAC is the modified EUI-64 link-local address of mac
// (RFC 4291 appendix A).
func linkLocalFromMAC(mac net.HardwareAddr) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	if len(mac) == 6 {
		a[8], a[9], a[10] = mac[0]^0x02, mac[1], mac[2]
		a[11], a[12] = 0xff, 0xfe
		a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	}
	return netip.AddrFrom16(a)
}

// startEngine runs the engine on link until ctx ends; the returned channel
// yields Run's error once it has stopped. The engine reads its first frame
// once gate closes (the sandbox is on by then).
func startEngine(ctx context.Context, cfg *config.Config, dl *dataLink, es engineSetup, log *slog.Logger, gate <-chan struct{}) (*fwd.Engine, *engineRun, func(), error) {
	link := dl.link()
	opts := es.opts
	opts.Logger = log
	opts.VnetHdr = dl.vnet
	closePcap := func() {}
	if cfg.PcapFile != "" {
		f, err := os.OpenFile(cfg.PcapFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("opening the capture file: %w", err)
		}
		opts.Pcap = f
		closePcap = func() { f.Close() }
		log.Info("capturing frames", "file", cfg.PcapFile)
	}
	params := es.params
	e, err := fwd.New(link, &params, opts)
	if err != nil {
		closePcap()
		return nil, nil, nil, err
	}
	done := &engineRun{done: make(chan struct{})}
	go func() {
		select {
		case <-gate:
			done.err = e.Run(ctx)
		case <-ctx.Done():
			done.err = ctx.Err()
		}
		close(done.done)
	}()
	if cfg.Stats > 0 {
		go every(ctx, cfg.Stats, func() { logStats(e, es.opts.Refusals, log) })
	}
	return e, done, closePcap, nil
}

// neighbourSource is the host's neighbour table (ns.Neighbours) as the
// engine follows it (fwd.NeighbourSource).
type neighbourSource struct{ *ns.Neighbours }

func (s neighbourSource) Read(h fwd.NeighbourHandler) error { return s.Neighbours.Read(h) }

// engineRun is a running engine: done closes when Run returns, and err is
// Run's result from then on (any number of goroutines may wait).
type engineRun struct {
	done chan struct{}
	err  error
}

// logStats prints the engine's counters (--stats), and what every loop
// refused at a limit since the start.
func logStats(e *fwd.Engine, r *limit.Refusals, log *slog.Logger) {
	s := e.Stats()
	var drops uint64
	for _, d := range s.Drops {
		drops += d
	}
	ref := r.Totals()
	log.Info("stats", "frames_in", s.FramesIn, "frames_out", s.FramesOut,
		"bytes_in", s.BytesIn, "bytes_out", s.BytesOut, "drops", drops,
		"tcp", s.FlowsTCP, "udp", s.FlowsUDP, "icmp", s.FlowsICMP, "evicted", s.Evicted,
		"refused_tcp", ref[limit.TCP], "refused_udp", ref[limit.UDP], "refused_icmp", ref[limit.ICMP])
}

// every calls fn every interval until ctx ends (--stats).
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
