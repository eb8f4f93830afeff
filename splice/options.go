package splice

// Options of a Forwarder and their defaults.

import (
	"log/slog"
	"time"

	"github.com/gopasta/gopasta/internal/limit"
)

// UDP flow timeouts, conntrack's defaults (nf_conntrack_udp_timeout and
// nf_conntrack_udp_timeout_stream): a flow that is not a stream (traffic
// one way, or one datagram and its answer) is dropped sooner than one
// that is.
const (
	DefaultUDPTimeout       = 30 * time.Second
	DefaultUDPStreamTimeout = 120 * time.Second
)

// Options configure a Forwarder. The zero value is usable.
type Options struct {
	// PipeSize is the F_SETPIPE_SZ target per direction (default 1 MiB);
	// NewForwarder probes downwards to what the kernel allows.
	PipeSize int
	// PipePool bounds how many idle pipes are kept for reuse (default 16).
	// Idle pipes still count against the per-user pipe page limit
	// (fs.pipe-user-pages-soft, 64 MiB by default), past which the kernel
	// hands out tiny pipes, so the pool stays small.
	PipePool int
	// MaxTCP bounds concurrent TCP connections (default: derived from
	// RLIMIT_NOFILE, each connection costing up to 6 fds).
	MaxTCP int
	// MaxUDP bounds concurrent UDP flows (default 4096, capped by RLIMIT_NOFILE).
	MaxUDP int
	// IdleTimeout closes a TCP connection with no bytes moved for this long;
	// 0 means never (spliced connections are ended by their peers).
	IdleTimeout time.Duration
	// UDPTimeout and UDPStreamTimeout are how long a UDP flow lives
	// without traffic, and how long once it is a stream: answered, and
	// either side sent more than once (a batch at a time on its own
	// sockets, a datagram at a time on a listener), as pasta counts.
	// They default to 30 s and 120 s; the caller passes the host's
	// conntrack timeouts.
	UDPTimeout, UDPStreamTimeout time.Duration
	// UDPBatch is how many datagrams one recvmmsg/sendmmsg moves at most
	// (default 32); a flow reads fewer while its datagrams are large: at
	// most 64 KiB of them, judged by the largest datagram of its last
	// batch (sock.Burst).
	UDPBatch int
	// Logger gets connection errors at debug level; nil discards.
	Logger *slog.Logger
	// Refusals counts the connections and flows refused at a limit
	// (descriptors, memory, MaxTCP, MaxUDP) and logs their episodes;
	// nil counts nothing. The process's other loops share it.
	Refusals *limit.Refusals
}
