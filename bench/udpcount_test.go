package main

import (
	"errors"
	"strings"
	"testing"
)

const snmp4 = `Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 100
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 391655 0 33 391694 27 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
`

const snmp6 = "Ip6InReceives                   \t5\n" +
	"Udp6InDatagrams                 \t54283\n" +
	"Udp6NoPorts                     \t0\n" +
	"Udp6InErrors                    \t33\n" +
	"Udp6RcvbufErrors                \t12\n" +
	"UdpLite6InDatagrams             \t7\n"

func TestParseUDPCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		fam  int
		want udpCounts
		err  bool
	}{
		{"snmp", snmp4, 4, udpCounts{in: 391655, rcvbufErrors: 27}, false},
		{"snmp6", snmp6, 6, udpCounts{in: 54283, rcvbufErrors: 12}, false},
		{"snmp6 read as IPv4", snmp6, 4, udpCounts{}, true},
		{"snmp read as IPv6", snmp4, 6, udpCounts{}, true},
		{"empty", "", 4, udpCounts{}, true},
		{"header only", "Udp: InDatagrams RcvbufErrors\n", 4, udpCounts{}, true},
		{"value line short", "Udp: InDatagrams RcvbufErrors\nUdp: 5\n", 4, udpCounts{}, true},
		{"no RcvbufErrors", "Udp: InDatagrams NoPorts\nUdp: 5 0\n", 4, udpCounts{}, true},
		{"negative", "Udp: InDatagrams RcvbufErrors\nUdp: -5 0\n", 4, udpCounts{}, true},
		{"not a number", "Udp6InDatagrams x\nUdp6RcvbufErrors 0\n", 6, udpCounts{}, true},
		{"minimal", "Udp: RcvbufErrors InDatagrams\nUdp: 3 9\n", 4, udpCounts{in: 9, rcvbufErrors: 3}, false},
	} {
		got, err := parseUDPCounts([]byte(tc.in), tc.fam)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParseUDPCounts(f *testing.F) {
	f.Add([]byte(snmp4), 4)
	f.Add([]byte(snmp6), 6)
	f.Fuzz(func(t *testing.T, b []byte, fam int) {
		c, err := parseUDPCounts(b, fam)
		if err == nil && (c.in < 0 || c.rcvbufErrors < 0) {
			t.Fatalf("negative counters %+v from %q", c, b)
		}
		if err == nil && fam != 4 && fam != 6 {
			t.Fatalf("counters %+v for address family %d", c, fam)
		}
	})
}

func TestReceiverDrops(t *testing.T) {
	bad := errors.New("unread")
	for _, tc := range []struct {
		name       string
		a, b       udpCounts
		errA, errB error
		want       float64
	}{
		{"a third dropped", udpCounts{10, 5}, udpCounts{210, 105}, nil, nil, 1.0 / 3},
		{"none dropped", udpCounts{0, 0}, udpCounts{50, 0}, nil, nil, 0},
		{"nothing arrived", udpCounts{7, 1}, udpCounts{7, 1}, nil, nil, -1},
		{"went backwards", udpCounts{70, 1}, udpCounts{7, 1}, nil, nil, -1},
		{"first unread", udpCounts{}, udpCounts{50, 0}, bad, nil, -1},
		{"second unread", udpCounts{}, udpCounts{50, 0}, nil, bad, -1},
	} {
		if got := receiverDrops(tc.a, tc.b, tc.errA, tc.errB); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRenderReportDrops(t *testing.T) {
	c := testCase{kind: "udp", dir: "in", path: "tap", fam: 4, mtu: mtuBig, size: 65000}
	r := newResults([]string{"gopasta", "pasta"})
	for _, d := range []float64{0.30, 0.34, -1} {
		r.add(c, "gopasta", sample{value: 15, amount: 1e9, cpuTicks: 1, rcvDrops: d})
	}
	r.add(c, "pasta", sample{value: 16, amount: 1e9, cpuTicks: 1, rcvDrops: -1})
	out := renderReport(options{runs: 3, secs: 1, steal: -1}, []testCase{c}, r, "m", "v", 0)
	// The median of the runs that read it; a tool with none shows a dash.
	for _, want := range []string{"| receiver dropped gopasta | receiver dropped pasta |", "| 32% | – |"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	tcp := testCase{kind: "tcp", dir: "in", path: "tap", fam: 4, mtu: mtuBig}
	r.add(tcp, "gopasta", sample{value: 15, amount: 1e9, cpuTicks: 1, rcvDrops: -1})
	out = renderReport(options{runs: 1, secs: 1, steal: -1}, []testCase{tcp}, r, "m", "v", 0)
	if strings.Contains(out, "receiver dropped") {
		t.Errorf("a TCP table shows receiver drops:\n%s", out)
	}
}
