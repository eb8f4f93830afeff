package fwd

// The host's neighbour table, mirrored: ARP and NDP answers, and the
// frames of host peers, carry the MAC addresses the host's neighbours
// really have.

import (
	"bytes"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/header"
)

// NeighbourSource is the host's neighbour table (ARP and NDP entries of
// the template interfaces) as the engine follows it: readable when Fd
// is, and Read delivers what changed to h without blocking. package ns
// has one (ns.Neighbours). An error from Read means the source failed
// for good; the engine stops following it.
type NeighbourSource interface {
	Fd() int
	Read(h NeighbourHandler) error
}

// NeighbourHandler takes the host's neighbour entries (the engine's
// mirror implements it).
type NeighbourHandler interface {
	// NeighbourSet: the host reaches addr at the unicast MAC address mac.
	NeighbourSet(addr netip.Addr, mac [6]byte)
	// NeighbourGone: the host has no usable entry for addr any more.
	NeighbourGone(addr netip.Addr)
	// NeighbourDumpBegin and NeighbourDumpEnd enclose a reading of the
	// whole table: an entry not set in between is gone, if complete.
	NeighbourDumpBegin()
	NeighbourDumpEnd(complete bool)
}

const (
	// neighMax bounds the mirror: the kernel's own tables hold 1024
	// entries per family by default (gc_thresh3). Beyond it new entries
	// are refused, and answered for with our MAC address, until others
	// go.
	neighMax = 4096
	// neighAnnounceMax bounds the announcements one reading of the source
	// sends: a host whose table churns cannot flood the namespace.
	neighAnnounceMax = 64
)

// neighEntry is one mirrored neighbour, by the address the namespace
// knows it as.
type neighEntry struct {
	key  [16]byte // the namespace's view of the address (IPv4 as v4-mapped)
	mac  [6]byte
	seen uint32 // the dump that last set it (neighTable.epoch)
}

// neighTable mirrors the host's neighbour table for the namespace
// (Options.Neighbours): for an address of the host's LAN, the MAC address
// the host knows it by; for any other address, that of the namespace's
// gateway if the host knows the gateway (with --no-map-gw the gateway is
// the host's own router), else ours. Addresses the engine itself answers
// for (the host-loopback and guest-address mappings, the --dns-forward
// address, the namespace's own addresses, our link-local address) keep
// ours whatever the host's table says.
//
// The entries are a sorted array, searched by bisection: the namespace
// may ask for any address at any rate, and a lookup allocates nothing
// and takes a dozen comparisons at neighMax. Changes come from the
// kernel a few at a time and move the array's tail.
//
// When an address the namespace may already have resolved changes hands
// (our MAC to a neighbour's, one neighbour's to another's), the namespace
// is told at once with an ARP announcement or an unsolicited neighbour
// advertisement, which updates the entry it has (and creates none):
// otherwise its stale entry would last until it probes again. A neighbour
// that goes away is not announced: the namespace's next probe gets the
// fallback.
type neighTable struct {
	e    *Engine
	ents []neighEntry
	// our is the engine's MAC address; gw the namespace's gateways' keys
	// (the fallback); blocked the keys never mirrored.
	our     [6]byte
	gw      [2][16]byte
	gwOK    [2]bool
	blocked [][16]byte
	epoch   uint32 // dumps begun
	// synced: the first dump is over, so changes are news to the
	// namespace and announced.
	synced bool
	// version changes with every change to the entries; cache is the
	// last writeHeaders lookup, valid while version is.
	version              uint32
	cacheKey             [16]byte
	cacheMAC             [6]byte
	cacheVersion         uint32
	cacheOK              bool
	announced            int  // announcements of the current reading
	full                 bool // refusing at neighMax (logged once per episode)
	readFailed, dumpWarn bool
}

// init prepares t for e (New).
func (t *neighTable) init(e *Engine) {
	t.e = e
	copy(t.our[:], e.p.OurMAC)
	for i, gw := range []netip.Addr{e.p.Gateway4, e.p.Gateway6} {
		if gw.IsValid() {
			t.gw[i], t.gwOK[i] = gw.As16(), true
		}
	}
	n := &e.nat
	for _, a := range []netip.Addr{n.MapHostLoopback4, n.MapHostLoopback6, n.MapGuestAddr4, n.MapGuestAddr6,
		n.DNSMatch4, n.DNSMatch6, e.p.Addr4, e.p.Addr6, e.p.OurLL6} {
		if a.IsValid() {
			t.blocked = append(t.blocked, a.As16())
		}
	}
	if e.opts.Neighbours != nil {
		t.ents = make([]neighEntry, 0, 64)
	}
}

func cmpNeigh(e neighEntry, k [16]byte) int { return bytes.Compare(e.key[:], k[:]) }

// find returns where key is, or would be, in the entries.
func (t *neighTable) find(key [16]byte) (int, bool) {
	return slices.BinarySearchFunc(t.ents, key, cmpNeigh)
}

// macFor is the MAC address the namespace should see for addr (the
// namespace's view of it): the neighbour's, the gateway's, or ours. A nil
// table answers ours (responders' unit tests).
func (t *neighTable) macFor(addr netip.Addr, our []byte) (mac [6]byte) {
	copy(mac[:], our)
	if t == nil || len(t.ents) == 0 {
		return mac
	}
	if i, ok := t.find(addr.As16()); ok {
		return t.ents[i].mac
	}
	g := 0
	if addr.Is6() {
		g = 1
	}
	if t.gwOK[g] {
		if i, ok := t.find(t.gw[g]); ok {
			return t.ents[i].mac
		}
	}
	return mac
}

// srcMAC is macFor for the frames the engine builds (writeHeaders): the
// source address of a run of frames is mostly the same, so the last
// answer is kept until the entries change.
func (t *neighTable) srcMAC(addr netip.Addr) [6]byte {
	if len(t.ents) == 0 {
		return t.our
	}
	k := addr.As16()
	if t.cacheOK && t.cacheVersion == t.version && t.cacheKey == k {
		return t.cacheMAC
	}
	m := t.macFor(addr, t.our[:])
	t.cacheKey, t.cacheMAC, t.cacheVersion, t.cacheOK = k, m, t.version, true
	return m
}

// view maps a host neighbour's address to the namespace's view of it
// (NAT.FromHost), or reports that it is not mirrored.
func (t *neighTable) view(addr netip.Addr) (netip.Addr, bool) {
	a, ok := t.e.nat.FromHost(addr)
	if !ok {
		return a, false
	}
	k := a.As16()
	if slices.Contains(t.blocked, k) {
		return a, false
	}
	return a, true
}

// NeighbourSet mirrors a host entry (NeighbourHandler).
func (t *neighTable) NeighbourSet(addr netip.Addr, mac [6]byte) {
	a, ok := t.view(addr)
	if !ok {
		return
	}
	k := a.As16()
	i, found := t.find(k)
	switch {
	case found && t.ents[i].mac == mac:
		t.ents[i].seen = t.epoch
		return
	case found:
		t.ents[i].mac, t.ents[i].seen = mac, t.epoch
	case len(t.ents) >= neighMax:
		if !t.full {
			t.full = true
			t.e.log.Warn("neighbour table mirror full: further host neighbours are answered for with our MAC address", "entries", neighMax)
		}
		return
	default:
		t.ents = slices.Insert(t.ents, i, neighEntry{key: k, mac: mac, seen: t.epoch})
	}
	t.version++
	t.announce(a, mac)
}

// NeighbourGone drops a host entry (NeighbourHandler).
func (t *neighTable) NeighbourGone(addr netip.Addr) {
	a, ok := t.view(addr)
	if !ok {
		return
	}
	if i, found := t.find(a.As16()); found {
		t.remove(i)
	}
}

func (t *neighTable) remove(i int) {
	t.ents = slices.Delete(t.ents, i, i+1)
	t.version++
	if len(t.ents) < neighMax {
		t.full = false
	}
}

// NeighbourDumpBegin starts a new epoch (NeighbourHandler).
func (t *neighTable) NeighbourDumpBegin() { t.epoch++ }

// NeighbourDumpEnd drops, after a complete dump, the entries it did not
// set: they went while notifications were lost (NeighbourHandler).
func (t *neighTable) NeighbourDumpEnd(complete bool) {
	if complete {
		for i := len(t.ents) - 1; i >= 0; i-- {
			if t.ents[i].seen != t.epoch {
				t.remove(i)
			}
		}
	} else if !t.dumpWarn {
		t.dumpWarn = true
		t.e.log.Warn("host neighbour table: a dump was cut short; entries follow notifications until the next one")
	}
	t.synced = true
}

// announce tells the namespace that addr (its view) is at mac now, once
// the first dump is over and the namespace has spoken (before that it has
// no entry to update: the announcement would create none).
func (t *neighTable) announce(addr netip.Addr, mac [6]byte) {
	e := t.e
	if !t.synced || e.nsMAC == [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} || t.announced >= neighAnnounceMax {
		return
	}
	out := e.txBuf()
	var n int
	if addr.Is4() {
		n = arpAnnouncement(addr, mac, out)
	} else {
		n = unsolicitedNA(e.p, addr, mac, out)
	}
	if n > 0 {
		t.announced++
		e.txCommit(n)
	}
}

// readNeighbours takes what the neighbour source has (its descriptor is
// readable).
func (e *Engine) readNeighbours() {
	t := &e.neigh
	if t.readFailed {
		return
	}
	t.announced = 0
	if err := e.opts.Neighbours.Read(t); err != nil {
		t.readFailed = true
		unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, e.opts.Neighbours.Fd(), nil)
		e.log.Warn("host neighbour table: stopped following it; the namespace's neighbours keep the MAC addresses they have", "err", err)
	}
}

// arpAnnouncement writes an ARP announcement (RFC 5227 section 2.3) that
// addr is at mac into out: a broadcast request from mac with addr as
// both sender and target. A namespace that has an entry for addr updates
// it. It returns the frame's length, 0 if out is too short.
func arpAnnouncement(addr netip.Addr, mac [6]byte, out []byte) int {
	if len(out) < arpFrameLen {
		return 0
	}
	a := addr.As4()
	var zero [6]byte // the target's hardware address, ignored (RFC 5227)
	o := header.Ethernet(out[:arpFrameLen])
	o.Encode(header.EthernetBroadcast[:], mac[:], header.EtherTypeARP)
	header.ARP(o.Payload()).Encode(header.ARPRequest, mac[:], a[:], zero[:], a[:])
	return arpFrameLen
}

// unsolicitedNA writes an unsolicited neighbour advertisement (RFC 4861
// section 7.2.6) that addr is at mac into out: to all nodes, from addr,
// Override set and Solicited clear (the namespace's kernel drops a
// solicited one sent to a group), Router set as in every advertisement
// the engine sends, so that an entry of a router stays one. It returns
// the frame's length, 0 if out is too short.
func unsolicitedNA(p *NetParams, addr netip.Addr, mac [6]byte, out []byte) int {
	const naLen = header.NDPNeighborMinimumSize + 8
	if len(out) < l2l3v6+naLen {
		return 0
	}
	writeIPv6Frame(out, allNodesMAC, mac[:], addr, allNodes6, header.ProtocolICMPv6, naLen)
	na := header.NDPNeighbor(out[l2l3v6 : l2l3v6+naLen])
	t16 := addr.As16()
	na.Encode(header.ICMPv6NeighborAdvertisement, header.NDPFlagRouter|header.NDPFlagOverride, t16[:])
	header.EncodeNDPLinkAddrOption(na[header.NDPNeighborMinimumSize:], header.NDPOptionTargetLinkAddr, mac[:])
	finishICMPv6(out, naLen)
	return l2l3v6 + naLen
}
