package run

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gopasta/gopasta/fwd"
)

// procSys is where the kernel's sysctls are.
const procSys = "/proc/sys"

// hostTimeouts reads the host's TCP and UDP timeout settings from the
// sysctls under root (procSys), at start: /proc/sys/net is the reading
// thread's network namespace's, which is the host's on every thread but
// the namespace's, and the sandbox takes the file system away later. A
// setting the host lacks keeps the value the host kernel then uses: the
// conntrack timeouts exist only with the nf_conntrack module loaded, and
// tcp_rto_max_ms and tcp_syn_linear_timeouts only on recent kernels (one
// without the second has no linear phase, so 0). A file that cannot be
// read as a number counts as missing.
func hostTimeouts(root string) fwd.Timeouts {
	t := fwd.DefaultTimeouts()
	read := func(name string) (int64, bool) {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v, err == nil
	}
	if v, ok := read("net/ipv4/tcp_syn_retries"); ok {
		t.SynRetries = int(min(max(v, 0), 1<<16))
	}
	t.SynLinear = 0
	if v, ok := read("net/ipv4/tcp_syn_linear_timeouts"); ok {
		t.SynLinear = int(min(max(v, 0), 1<<16))
	}
	if v, ok := read("net/ipv4/tcp_synack_retries"); ok {
		t.SynAckRetries = int(min(max(v, 0), 1<<16))
	}
	if v, ok := read("net/ipv4/tcp_rto_max_ms"); ok {
		t.RTOMax = time.Duration(min(max(v, 0), 1<<31)) * time.Millisecond
	}
	if v, ok := read("net/netfilter/nf_conntrack_udp_timeout"); ok && v > 0 {
		t.UDP = time.Duration(min(v, 1<<31)) * time.Second
	}
	if v, ok := read("net/netfilter/nf_conntrack_udp_timeout_stream"); ok && v > 0 {
		t.UDPStream = time.Duration(min(v, 1<<31)) * time.Second
	}
	return t
}

// logTimeouts says at debug level which timeouts are in force.
func logTimeouts(log *slog.Logger, t fwd.Timeouts) {
	log.Debug("host timeouts", "tcp_syn_retries", t.SynRetries, "tcp_syn_linear_timeouts", t.SynLinear,
		"tcp_synack_retries", t.SynAckRetries, "tcp_rto_max", t.RTOMax,
		"udp", t.UDP, "udp_stream", t.UDPStream)
}
