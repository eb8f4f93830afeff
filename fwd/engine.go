package fwd

// The Engine: its options, construction, and the flow life cycle every
// translator shares (newFlow, closeFlow, reap).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/epoll"
	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/internal/limit"
	"github.com/gopasta/gopasta/internal/logging"
	"github.com/gopasta/gopasta/internal/sock"
	"github.com/gopasta/gopasta/internal/yield"
)

// DefaultFlowCapacity is the flow table size when Options.FlowCapacity is
// 0: pasta's, 128 Ki flows less one. Only the flows in use take memory
// (flowTable), about 300 bytes each.
const DefaultFlowCapacity = 131071

// Options tune an Engine. The zero value forwards everything with pasta's
// defaults.
type Options struct {
	// FlowCapacity bounds the flow table (all protocols together);
	// 0 means DefaultFlowCapacity. New flows beyond it are dropped.
	FlowCapacity int
	// DatagramFlows bounds the UDP and ICMP echo flows among them, which
	// hold a host socket each until they time out (evict.go); 0 means half
	// the table, and at most half the descriptors the process may open.
	DatagramFlows int
	// Protocol switches (--no-tcp, --no-udp, --no-icmp).
	NoTCP, NoUDP, NoICMP bool
	// Pcap, when set, receives every frame both ways in pcap format
	// (-p/--pcap). The engine buffers and flushes it every second and
	// when Run returns; it does not close it.
	Pcap io.Writer
	// Logger for warnings and, at debug level, rate-limited drop reasons.
	// nil discards.
	Logger *slog.Logger
	// Refusals counts the connections and flows refused at a limit
	// (descriptors, memory, the flow table) and logs their episodes;
	// nil counts nothing. The process's other loops share it.
	Refusals *limit.Refusals

	// Address mapping (see NAT). MapHostLoopback defaults to the gateway
	// unless NoMapGW (--no-map-gw, or --map-host-loopback none).
	NoMapGW                            bool
	MapHostLoopback4, MapHostLoopback6 netip.Addr
	MapGuestAddr4, MapGuestAddr6       netip.Addr
	// DNSForward (--dns-forward): DNS to it (TCP and UDP ports 53 and
	// 853, DNSPort) goes to DNSHost (--dns-host, or the host's first
	// resolver, which the caller reads).
	DNSForward4, DNSForward6 netip.Addr
	DNSHost4, DNSHost6       netip.Addr
	// Outbound (-o/--outbound, --outbound-if4/6): the source address and
	// interface of host sockets, when set. Not applied to loopback
	// destinations, which only loopback can reach.
	Outbound4, Outbound6     netip.Addr
	OutboundIf4, OutboundIf6 string
	// MulticastIf6 is the host interface (its index) that UDP toward
	// IPv6 multicast groups leaves by: the template interface, which link
	// scope (ff02::/16) needs and which other scopes take rather than
	// whichever interface the first multicast route names. 0: routing
	// decides, and link-scope groups are unreachable.
	MulticastIf6 int
	// Neighbours, when set, is the host's neighbour table on the template
	// interfaces, which the engine mirrors (neigh.go): ARP and NDP answers
	// for the host's neighbours, and frames from them, carry their own
	// MAC addresses. The caller owns it (the engine does not close it).
	Neighbours NeighbourSource
	// Freebind (--freebind): UDP flow sockets bind with IP_FREEBIND, as
	// forwarded ports' listeners do: a host peer's reply socket binds the
	// address the peer sent to, and a flow the namespace opens binds
	// Outbound4/6, whether or not the host has that address configured.
	Freebind bool

	// VnetHdr: the link's frames carry a 12-byte virtio-net header (a TAP
	// opened with IFF_VNET_HDR and TUNSETVNETHDRSZ 12), and the TAP has
	// checksum and TSO offloads on (TUNSETOFFLOAD TUN_F_CSUM|TUN_F_TSO4|
	// TUN_F_TSO6). Frames then arrive up to 64 KiB whatever the MTU, with
	// partial checksums, and the engine hands the namespace 64 KiB GSO
	// frames with checksums left partial: no checksum is computed on
	// either side of the TAP for TCP and UDP.
	VnetHdr bool
	// Timeouts are the host's TCP and UDP timeout settings; nil means
	// the kernel's defaults (DefaultTimeouts).
	Timeouts *Timeouts
}

// translator is a protocol handler: UDP, ICMP echo, and TCP. The engine
// owns the flow table, the sockets' epoll registration and the link; a
// translator turns this cycle's frames of one flow into socket operations
// and socket events into frames (queued with txBuf/txCommit).
//
// Per-flow state beyond Flow lives in the translator, in an array indexed
// by flow index sized e.FlowCapacity() at construction, so Flow stays
// protocol-neutral and the TCP state machine costs nothing for UDP flows.
type translator interface {
	// open is called for a packet that matched no flow. It creates the
	// flow (e.newFlow), opens and registers its host socket (e.watch) and
	// returns its index, or -1 after counting a drop (a TCP segment that
	// is not a SYN, no socket...). The engine then passes p to frames.
	open(e *Engine, p *packet) int32
	// frames handles the packets of this cycle for flow idx, in arrival
	// order, all at once (one sendmmsg / sendmsg per batch).
	frames(e *Engine, idx int32, pkts []*packet)
	// sockEvent handles epoll events (EPOLLIN, EPOLLOUT, EPOLLERR...) on
	// the flow's host socket.
	sockEvent(e *Engine, idx int32, events uint32)
	// timer runs once the flow's Deadline (engine nanoseconds, see
	// e.Now) has passed: close the flow (e.closeFlow) or move the deadline.
	// Use e.wakeAt for deadlines sooner than the 1 s housekeeping tick.
	timer(e *Engine, idx int32)
	// closed is called once when the flow is closed, before its socket
	// is; release per-flow state here.
	closed(e *Engine, idx int32)
}

// A responder answers a frame the engine itself serves (ARP, NDP, DHCP,
// DHCPv6): it writes a reply frame into out and returns its length, or 0
// for no reply. They are pure functions of the parameters and the frame.
type responder func(p *NetParams, frame []byte, out []byte) int

// Engine forwards between one Link and host sockets. Create it with New,
// drive it with Run; Stats and FlowCount may be called from any goroutine.
type Engine struct {
	link  Link
	p     *NetParams
	opts  Options
	log   *slog.Logger
	debug bool
	trace bool // --trace: per-packet lines (trace.go)
	nat   NAT
	sys   sysOps

	mtu, frameMax int
	vnet          int // virtio-net header length on the link: 0 or 12
	// rxHdr is the virtio-net header of the frame being handled (nil
	// without one): a responder completes its partial checksum (respond).
	rxHdr header.VirtioNetHdr
	nsMAC [6]byte // learnt from the namespace's frames
	ipID  uint16

	ft *flowTable
	tr [numProtos]translator

	to          Timeouts // Options.Timeouts, or the defaults
	ctr         counters
	lastDropLog [NumDropReasons]int64
	warned      warnings

	clock func() time.Time
	start time.Time
	now   int64     // nanoseconds since start, as of this cycle
	nowT  time.Time // the same as a wall-clock time (pcap)

	// Frames from the link, and their parsed views.
	rxBufs   [][]byte
	rxSizes  []int
	rxFrames [][]byte
	pkts     []packet
	group    []*packet
	taken    []bool
	tx       txQueue
	pcap     *pcapWriter

	ep                    *epoll.Epoll // blocks or parks, by the processors the process has (package epoll)
	epfd, timerfd, wakefd int          // epfd: ep's, for epoll_ctl
	// reserve lets a listener refuse connections out of descriptors
	// (listen.go); listenRetryAt is when the earliest paused listener
	// is due back in epoll (0: none is paused).
	reserve       *sock.Spare
	listenRetryAt int64
	cycles        uint64        // event-loop cycles run (sock.AcceptBudget)
	yield         yield.Yielder // a Gosched every few ms, so sysmon leaves the loop's P alone
	pin           threadPin     // the loop's thread, held while the link is backlogged (loop.go)
	events        []unix.EpollEvent
	nextTick      int64 // next housekeeping tick
	timerAt       int64 // what the timerfd is armed for
	timerLost     bool  // arming it failed: Run sleeps no longer than timerAt
	nextRA        int64 // next unsolicited router advertisement (0: none scheduled yet)
	closing       []int32
	dgramMax      int       // the datagram flows' share of the table (evict.go)
	evictHand     int       // where the next eviction's sample starts in the active list
	batch         uint32    // batches of frames from the link handled (handleFrames)
	sa            sock.Addr // host sockets' bind and connect addresses, reused
	running       atomic.Bool
	closed        bool

	lst listenTable // forwarded-port listeners (listen.go)

	neigh neighTable // the host's neighbour table, mirrored (neigh.go)
}

// warnings that must be said once, not once per packet.
type warnings struct {
	ping, pcap, sendSpace bool
}

const (
	rxBatch = 64 // frames per ReadBatch
	// rxBatchesPerCycle bounds how long the link can monopolise a cycle
	// before host sockets get their turn.
	rxBatchesPerCycle = 4
	tickInterval      = int64(time.Second)
	maxFrameMTU       = 65520
	// gsoFrameMax: an IPv6 header, a 65535-byte payload and Ethernet.
	gsoFrameMax = header.EthernetMinimumSize + header.IPv6MinimumSize + 65535
)

// New prepares an engine for link with the namespace parameters p. It
// allocates everything the data path needs up front (buffers, flow table,
// epoll, timerfd, eventfd), so Run itself allocates nothing per frame. The
// caller keeps ownership of link (Run does not close it).
func New(link Link, p *NetParams, opts Options) (*Engine, error) {
	if link == nil || p == nil {
		return nil, errors.New("fwd: New needs a link and parameters")
	}
	if len(p.OurMAC) != 6 {
		return nil, fmt.Errorf("fwd: our MAC address %v is not 6 bytes", p.OurMAC)
	}
	if opts.FlowCapacity == 0 {
		opts.FlowCapacity = DefaultFlowCapacity
	}
	if opts.FlowCapacity < 1 || opts.FlowCapacity > 1<<20 {
		return nil, fmt.Errorf("fwd: flow capacity %d out of range 1..%d", opts.FlowCapacity, 1<<20)
	}
	if opts.DatagramFlows < 0 || opts.DatagramFlows > opts.FlowCapacity {
		return nil, fmt.Errorf("fwd: datagram flows %d out of range 0..%d", opts.DatagramFlows, opts.FlowCapacity)
	}
	e := &Engine{link: link, p: p, opts: opts, log: opts.Logger, clock: time.Now}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.debug = e.log.Enabled(context.Background(), slog.LevelDebug)
	e.to = DefaultTimeouts()
	if opts.Timeouts != nil {
		e.to = *opts.Timeouts
	}
	e.to = e.to.clamp()
	e.trace = e.log.Enabled(context.Background(), logging.LevelTrace)
	e.nat = NewNAT(p, &opts)
	e.mtu = p.MTU
	if e.mtu <= 0 || e.mtu > maxFrameMTU {
		// 0 leaves the kernel's MTU, which we do not know: size for
		// the largest.
		e.mtu = maxFrameMTU
	}
	e.frameMax = e.mtu + header.EthernetMinimumSize
	if opts.VnetHdr {
		// GSO frames are as large as an IP packet can be, at any MTU.
		e.vnet = header.VirtioNetHdrSize
		e.frameMax = max(e.frameMax, gsoFrameMax)
	}
	e.nsMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	e.pin = threadPin{lock: runtime.LockOSThread, unlock: runtime.UnlockOSThread}
	e.start = e.clock()
	e.nowT = e.start
	for i := range e.lastDropLog {
		e.lastDropLog[i] = -tickInterval
	}
	e.neigh.init(e)
	e.ft = newFlowTable(opts.FlowCapacity)
	e.dgramMax = datagramBudget(opts.FlowCapacity, opts.DatagramFlows)

	stride := e.vnet + e.frameMax
	backing := make([]byte, rxBatch*stride)
	e.rxBufs = make([][]byte, rxBatch)
	for i := range e.rxBufs {
		e.rxBufs[i] = backing[i*stride : (i+1)*stride : (i+1)*stride]
	}
	e.rxSizes = make([]int, rxBatch)
	e.rxFrames = make([][]byte, rxBatch)
	e.pkts = make([]packet, rxBatch)
	e.group = make([]*packet, 0, rxBatch)
	e.taken = make([]bool, rxBatch)
	e.initTx()
	e.closing = make([]int32, 0, opts.FlowCapacity)
	e.events = make([]unix.EpollEvent, 128)

	if opts.Pcap != nil {
		pw, err := newPcapWriter(opts.Pcap)
		if err != nil {
			return nil, fmt.Errorf("fwd: writing pcap header: %w", err)
		}
		e.pcap = pw
	}
	if err := e.initPoll(); err != nil {
		e.Close()
		return nil, err
	}
	e.sys = &kernelSys{epfd: e.epfd}
	e.reserve = sock.NewSpare(e.wakefd)
	if !opts.NoUDP {
		e.tr[protoUDP] = newUDP(e)
	}
	if !opts.NoICMP {
		e.tr[protoICMP] = newICMP(e)
	}
	if !opts.NoTCP {
		e.tr[protoTCP] = newTCPTranslator(e)
	}
	return e, nil
}

// Close releases the engine's descriptors and every flow's socket. Run
// calls it on return; calling it again is harmless.
func (e *Engine) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	e.closeListeners() // listen.go: before epfd closes
	if e.ft != nil {
		for len(e.ft.active) > 0 {
			idx := e.ft.active[len(e.ft.active)-1]
			if e.ft.flows[idx].state == flowActive {
				e.closeFlow(idx)
			}
			e.reap()
		}
	}
	if e.pcap != nil {
		e.pcap.flush()
	}
	if e.reserve != nil {
		e.reserve.Close()
	}
	if e.ep != nil {
		e.ep.Close()
	}
	for _, fd := range []int{e.timerfd, e.wakefd} {
		if fd > 0 {
			unix.Close(fd)
		}
	}
	return nil
}

// LoopFd is the engine loop's epoll descriptor, readable while the loop
// has events to serve: the splice loop watches it while it holds the
// processor (package epoll, "Holding the processor"). The engine's loop
// itself never holds: epoll sets cannot watch each other.
func (e *Engine) LoopFd() int { return e.ep.Fd() }

// FlowCapacity returns the flow table's size.
func (e *Engine) FlowCapacity() int { return len(e.ft.flows) }

// Now returns the engine's clock as of the current cycle, in nanoseconds
// since start; Flow.Deadline uses it.
func (e *Engine) Now() int64 { return e.now }

func (e *Engine) updateClock() {
	e.nowT = e.clock()
	e.now = int64(e.nowT.Sub(e.start))
}

// newFlow allocates a flow for p's tuple, counting DropTableFull when the
// table is full (with a rate-limited debug log via drop).
func (e *Engine) newFlow(p *packet, proto uint8) int32 {
	var k flowKey
	keyFor(p, &k)
	idx := e.allocFlow(&k, proto)
	if idx < 0 {
		return -1
	}
	f := &e.ft.flows[idx]
	f.v6 = p.v6
	f.NSPort, f.DstPort = p.sport, p.dport
	e.ctr.flows[proto].Add(1)
	e.ctr.opened.Add(1)
	return idx
}

// newFlowFor allocates a flow the host side opens (a forwarded port):
// nsSide is the namespace's address and port, peer what it sees as the
// other end.
func (e *Engine) newFlowFor(ipProto uint8, proto uint8, nsSide, peer netip.AddrPort) int32 {
	k := flowKey{proto: ipProto, nsPort: nsSide.Port(), dstPort: peer.Port(),
		ns: nsSide.Addr().As16(), dst: peer.Addr().As16()}
	if e.ft.lookup(&k) >= 0 {
		// Two host connections the NAT shows the namespace as the same
		// four-tuple: the namespace could not tell them apart.
		e.drop(DropHostSocket)
		return -1
	}
	idx := e.allocFlow(&k, proto)
	if idx < 0 {
		return -1
	}
	f := &e.ft.flows[idx]
	f.v6 = nsSide.Addr().Is6()
	f.NSPort, f.DstPort = nsSide.Port(), peer.Port()
	e.ctr.flows[proto].Add(1)
	e.ctr.opened.Add(1)
	return idx
}

// flow returns flow idx.
func (e *Engine) flow(idx int32) *Flow { return &e.ft.flows[idx] }

// closeFlow ends flow idx: it is unhashed now (a new packet with the same
// tuple starts a new flow), and its socket is closed and its slot freed at
// the end of the cycle, after every event of this cycle that may still
// name it has been seen (deferred cleanup, as pasta).
func (e *Engine) closeFlow(idx int32) {
	f := &e.ft.flows[idx]
	if f.state != flowActive {
		return
	}
	if t := e.tr[f.proto]; t != nil {
		t.closed(e, idx)
	}
	e.ft.unhash(idx)
	e.closing = append(e.closing, idx)
}

// reap finishes the closes of this cycle.
func (e *Engine) reap() {
	for _, idx := range e.closing {
		f := &e.ft.flows[idx]
		if f.Fd >= 0 {
			e.sys.close(f.Fd)
		}
		e.ctr.flows[f.proto].Add(-1)
		e.ctr.closed.Add(1)
		e.ft.release(idx)
	}
	if len(e.closing) > 0 && !e.reserve.Held() {
		e.reserve.Renew() // a descriptor was just freed
	}
	e.closing = e.closing[:0]
}
