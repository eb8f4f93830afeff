package fwd

import "time"

// Timeouts are the host's settings that time what the engine waits for:
// its TCP handshakes toward the namespace, its retransmissions, and its
// UDP flows. They are the host kernel's own settings for the same things
// (its sysctls, which internal/run reads at start), so a connection or
// flow through gopasta gives up or expires when one of the host's own
// would. DefaultTimeouts are the kernel's defaults.
type Timeouts struct {
	// SynRetries and SynLinear (net.ipv4.tcp_syn_retries and
	// tcp_syn_linear_timeouts): our SYN toward the namespace, for a
	// connection to a forwarded port, is sent again SynLinear times 1 s
	// apart, then SynRetries times at doubling intervals from 2 s, as the
	// host's connect() sends its SYNs; after the last goes unanswered as
	// long again, the host's peer gets a reset. A kernel without
	// tcp_syn_linear_timeouts has no linear phase: 0.
	SynRetries, SynLinear int
	// SynAckRetries (net.ipv4.tcp_synack_retries): our SYN-ACK to the
	// namespace's SYN is sent again this many times, 1 s after it and
	// doubling.
	SynAckRetries int
	// RTOMax (net.ipv4.tcp_rto_max_ms; a kernel without it has 120 s)
	// bounds every retransmission interval toward the namespace.
	RTOMax time.Duration
	// UDP and UDPStream (net.netfilter.nf_conntrack_udp_timeout and
	// nf_conntrack_udp_timeout_stream): how long a UDP flow lives without
	// traffic, and how long once it is a stream (its target answered and
	// either side sent more than once).
	UDP, UDPStream time.Duration
}

// DefaultTimeouts are the kernel's defaults, which a host without a
// setting (no conntrack module, an older kernel) has in effect.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		SynRetries: 6, SynLinear: 4, SynAckRetries: 5,
		RTOMax: 120 * time.Second,
		UDP:    30 * time.Second, UDPStream: 120 * time.Second,
	}
}

// Bounds the kernel itself puts on the settings.
const (
	maxSynCount = 127 // MAX_TCP_SYNCNT: tcp_syn_retries and tcp_syn_linear_timeouts
	maxSynAck   = 255 // tcp_synack_retries is a u8
	minRTOMax   = time.Second
	maxRTOMax   = 120 * time.Second
)

// clamp puts each setting within what the kernel allows (a value read
// from the host is within them already) and gives a missing UDP timeout
// its default.
func (t Timeouts) clamp() Timeouts {
	d := DefaultTimeouts()
	t.SynRetries = min(max(t.SynRetries, 1), maxSynCount)
	t.SynLinear = min(max(t.SynLinear, 0), maxSynCount)
	t.SynAckRetries = min(max(t.SynAckRetries, 0), maxSynAck)
	t.RTOMax = min(max(t.RTOMax, minRTOMax), maxRTOMax)
	if t.UDP <= 0 {
		t.UDP = d.UDP
	}
	if t.UDPStream <= 0 {
		t.UDPStream = d.UDPStream
	}
	return t
}

// handshakeRTO is how long the engine waits for an answer after the k-th
// retransmission of a SYN or SYN-ACK (k = 0: the first transmission): 1 s
// (RFC 6298's initial timeout, the kernel's TCP_TIMEOUT_INIT) up to k =
// linear, then doubling, never more than rtoMax.
func handshakeRTO(k, linear int, rtoMax int64) int64 {
	exp := k - linear
	switch {
	case exp <= 0:
		return min(int64(time.Second), rtoMax)
	case exp >= 32:
		return rtoMax
	}
	return min(int64(time.Second)<<exp, rtoMax)
}
