package main

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"time"
)

// A UDP row's received rate is what the receiving iperf3 took, and on two
// CPUs shared by sender, tool and receiver that is often less than what
// the tool delivered: the receiver's socket (208 KiB by default, three
// 64 KiB datagrams) overflows whenever the tool delivers faster than the
// receiver reads. A tool that forwards more then shows a higher drop
// share, not a higher rate. The receiving namespace's own UDP counters
// say which: the kernel counts a datagram in RcvbufErrors when the socket
// had no room for it, and in InDatagrams when the application reads it.
// The few still queued at the second reading (at most a buffer's worth)
// are in neither, which moves the share by a few datagrams in hundreds
// of thousands.

// udpCounts are a namespace's UDP counters for one address family.
type udpCounts struct {
	in, rcvbufErrors int64
}

var errUDPCounts = errors.New("no UDP counters")

// parseUDPCounts reads the IPv4 counters from /proc/net/snmp (a header
// line "Udp: InDatagrams ... RcvbufErrors ..." and a value line below it)
// or the IPv6 ones from /proc/net/snmp6 ("Udp6InDatagrams N" lines).
func parseUDPCounts(b []byte, fam int) (udpCounts, error) {
	var c udpCounts
	in, rcv := false, false
	set := func(name, val string) {
		v, err := strconv.ParseInt(val, 10, 64)
		if err != nil || v < 0 {
			return
		}
		switch name {
		case "InDatagrams":
			c.in, in = v, true
		case "RcvbufErrors":
			c.rcvbufErrors, rcv = v, true
		}
	}
	var hdr []string
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		f := strings.Fields(string(line))
		switch {
		case fam == 6 && len(f) == 2 && strings.HasPrefix(f[0], "Udp6"):
			set(strings.TrimPrefix(f[0], "Udp6"), f[1])
		case fam == 4 && len(f) > 1 && f[0] == "Udp:":
			if hdr == nil {
				hdr = f
				continue
			}
			if len(f) == len(hdr) {
				for i := 1; i < len(f); i++ {
					set(hdr[i], f[i])
				}
			}
			hdr = nil
		}
	}
	if !in || !rcv {
		return udpCounts{}, errUDPCounts
	}
	return c, nil
}

// readUDPCounts reads the counters of the namespace that wrap runs in.
func readUDPCounts(wrap func(argv ...string) []string, fam int) (udpCounts, error) {
	file := "/proc/net/snmp"
	if fam == 6 {
		file = "/proc/net/snmp6"
	}
	out, err := run(5*time.Second, wrap("cat", file)...)
	if err != nil {
		return udpCounts{}, err
	}
	return parseUDPCounts([]byte(out), fam)
}

// receiverDrops is the share of the datagrams that reached the receiving
// socket between two readings that it dropped, or -1 when the readings do
// not give one (unread, no datagram, or counters that went backwards).
func receiverDrops(a, b udpCounts, errA, errB error) float64 {
	if errA != nil || errB != nil {
		return -1
	}
	in, drops := b.in-a.in, b.rcvbufErrors-a.rcvbufErrors
	if in < 0 || drops < 0 || in+drops == 0 {
		return -1
	}
	return float64(drops) / float64(in+drops)
}
