// Package stress is gopasta's stress suite: the loads of docs/reliability.md against
// the real binary (internal/nstest.Binary), attached as uid 65534 under its
// sandbox to a namespace made as a user makes one (unshare -Urn), inside a
// throwaway host namespace (internal/nstest.HostNS: 192.0.2.1/24,
// 2001:db8::1/64), with the options
//
//	--config-net -a 192.0.2.2 -n 24 -g 192.0.2.254 -t 5401 -T 5302 -f --stats 1 PID
//
// and echo servers on both sides: the namespace's on 5401, the host's on
// 5302 (TCP and UDP; UDP is forwarded by -u auto and -U auto, the default
// when only -t and -T are given).
//
// The loads (TestStress, one fresh gopasta each):
//
//   - udp-flows: 60,000 UDP flows from the namespace, one datagram to each
//     of 60,000 ports of 192.0.2.1, paced so that each reaches gopasta (a
//     window the namespace's interface dropped is sent again);
//   - tcp-ns-to-host: 20,000 TCP connections from the namespace to
//     192.0.2.1:5302 over the TAP, each echoing, held 5 s, echoing again;
//   - tcp-host-to-ns-tap: 5,000 from the host's 192.0.2.1 to the
//     namespace through -t 5401 (over the TAP), held likewise;
//   - tcp-host-to-ns-splice: 5,000 from the host's 127.0.0.1 through -t
//     5401 (spliced), held likewise;
//   - churn: 90 s of connect, echo, close on the four TCP paths at once.
//
// Each load runs while an established connection on each of the four TCP
// paths, opened before it, echoes verified data in rounds: each must stay
// intact with no round slower than 5 s (at every limit, refuse the new and
// keep the established). After each load: gopasta is alive, its log holds
// no panic and no call outside the seccomp allowlist, fresh connections
// work on every path, TCP and UDP, with a byte-exact echo, and its
// descriptors (/proc/PID/fd) are back within 48 of the baseline measured
// before the load within 10 s.
//
// UDP flows end by timeout only: in gopasta 30 s over the TAP for a flow
// that never became a stream, 120 s spliced once answered; in pasta 180 s.
// The long form waits for them to expire; the short form checks instead
// that the descriptors above the baseline are no more than the flows can
// hold (those --stats reports alive after the spray; one per UDP
// transaction over the TAP and two per spliced one after the soak).
//
// A load that exceeds a limit (20,000 connections against a descriptor
// limit of 20,000, each costing gopasta one descriptor, or a spliced
// connection's six) is not expected to be held whole: every connection is
// counted held, refused (a reset or a close, without waiting) or failed
// (a timeout, wrong bytes, a held connection lost), and failed must be
// zero. A load within the limit must be held whole. Dials that took a
// second or more (a SYN sent again) are counted and noted.
//
// TestSoak then churns the four TCP paths and the four UDP paths for 30
// minutes, sampling gopasta's RSS (VmRSS) and descriptors every second:
// the RSS may grow by less than 5 MiB from just after a 3-minute warm-up
// to the end (medians of a minute each), and the descriptors come back to
// the baseline once the UDP flows have expired.
//
// The forms, chosen by GOPASTA_STRESS (unset: everything skips):
//
//	long    the sizes above with gopasta's RLIMIT_NOFILE as the machine
//	        gives it (make stress, about 40 minutes)
//	short   a tenth of each load (6,000 flows, 2,000 and 500 connections,
//	        20 s of churn, a 30 s soak whose RSS growth is reported, not
//	        checked: its UDP flows still accumulate when it ends) against a
//	        limit lowered to 2,000 with prlimit, so the same limits are hit
//	        (make stress-short, CI, about 3 minutes)
//
// GOPASTA_STRESS_SOAK overrides the soak's length (a Go duration),
// GOPASTA_STRESS_ARGS adds options to gopasta's command line (--debug, say),
// and GOPASTA_SECCOMP and GOPASTA_SECCOMP_REPORT, when set, are passed to
// gopasta (the seccomp report mode, make stress-short STRESS_SECCOMP=log).
// GOPASTA_BIN=PATH runs the same suite against a pasta (no --stats, its
// own UDP timeout): the suite reports, and pasta need not pass. The
// summary table (load, held, refused, failed, survived, descriptors and RSS
// before, at the peak and after) is printed at the end; docs/reliability.md
// has the results.
//
// The load generator is this test binary re-executed (gen_test.go), in the
// host namespace as root and in the test's namespace as uid 65534, spread
// over processes where a load needs more descriptors than one may have.
package stress
