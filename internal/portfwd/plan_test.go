package portfwd

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/sock"
)

// planStrings renders plans compactly for table tests.
func planStrings(ps []listenPlan) []string {
	var out []string
	for _, p := range ps {
		s := p.String()
		if p.strict {
			s += " strict"
		}
		out = append(out, s)
	}
	return out
}

// table builds the table of one option's values on the given side (host
// unless f.isNS), the other options "none", as Start does.
func table(t *testing.T, values []string, udp bool, f side) fwdrule.Table {
	t.Helper()
	none := []string{"none"}
	tcp, u, tcpns, udpns := none, none, none, none
	switch {
	case f.isNS && udp:
		udpns = values
	case f.isNS:
		tcpns = values
	case udp:
		u = values
	default:
		tcp = values
	}
	o := options(t, tcp, u, tcpns, udpns)
	host, splice, err := o.Tables(capsFor(f.v4, f.v6, false, false, true), testEph)
	if err != nil {
		t.Fatalf("building %q: %v", values, err)
	}
	if f.isNS {
		return splice
	}
	return host
}

// testEph is the ephemeral range of these tests.
var testEph = fwdrule.Range{First: 30000, Last: 65535}

// options parses the values of -t, -u, -T and -U (nil: not given).
func options(t *testing.T, tcp, udp, tcpns, udpns []string) fwdrule.Options {
	t.Helper()
	var o fwdrule.Options
	for _, opt := range []struct {
		letter byte
		values []string
		dst    *[]fwdrule.Spec
	}{{'t', tcp, &o.TCP}, {'u', udp, &o.UDP}, {'T', tcpns, &o.TCPNS}, {'U', udpns, &o.UDPNS}} {
		for _, v := range opt.values {
			s, err := fwdrule.Parse(opt.letter, v)
			if err != nil {
				t.Fatalf("parsing -%c %q: %v", opt.letter, v, err)
			}
			*opt.dst = append(*opt.dst, s)
		}
	}
	return o
}

// planSpec is planStatic on the table of one option's values.
func planSpec(t *testing.T, values []string, udp bool, f side) []listenPlan {
	t.Helper()
	tb := table(t, values, udp, f)
	return planStatic(&tb, f)
}

// planAutoSpec is planScan on the table of one option's values.
func planAutoSpec(t *testing.T, values []string, udp bool, f side, listening *fwdrule.PortSet) []listenPlan {
	t.Helper()
	tb := table(t, values, udp, f)
	return planScan(&tb, f, listening, listening)
}

func TestPlanStatic(t *testing.T) {
	both := side{v4: true, v6: true}
	tests := []struct {
		name  string
		specs []string
		udp   bool
		f     side
		want  []string // first entries (all when len(want) == count)
		count int
	}{
		{"single port, dual stack", []string{"8080"}, false, both,
			[]string{"TCP 0.0.0.0:8080->8080 strict", "TCP :::8080->8080 strict"}, 2},
		{"podman range", []string{"8080-8080:80-80"}, false, both,
			[]string{"TCP 0.0.0.0:8080->80 strict", "TCP :::8080->80 strict"}, 2},
		{"mapped range", []string{"22-23:32-33"}, false, side{v4: true},
			[]string{"TCP 0.0.0.0:22->32", "TCP 0.0.0.0:23->33"}, 2},
		{"address and interface", []string{"192.0.2.1%eth0/22"}, false, both,
			[]string{"TCP 192.0.2.1%eth0:22->22 strict"}, 1},
		{"interface only", []string{"%eth0/22"}, false, side{v4: true},
			[]string{"TCP 0.0.0.0%eth0:22->22 strict"}, 1},
		{"target address", []string{"0.0.0.0/5000:192.0.2.5/6000"}, false, both,
			[]string{"TCP 0.0.0.0:5000->192.0.2.5/6000 strict"}, 1},
		{"exclusion", []string{"2000-5000,~3000-3010"}, false, side{v4: true},
			[]string{"TCP 0.0.0.0:2000->2000"}, 3001 - 11},
		{"ipv6 only family", []string{"80"}, false, side{v6: true},
			[]string{"TCP :::80->80 strict"}, 1},
		{"v4 address with v6 only", []string{"192.0.2.1/80"}, false, side{v6: true}, nil, 0},
		{"loopback only (namespace side)", []string{"53"}, true, side{v4: true, v6: true, loopbackOnly: true},
			[]string{"UDP 127.0.0.1:53->53 strict", "UDP ::1:53->53 strict"}, 2},
		{"-T: any address on lo", []string{"8080"}, false, side{v4: true, v6: true, loopbackOnly: true, isNS: true},
			[]string{"TCP 0.0.0.0%lo:8080->8080 strict", "TCP ::%lo:8080->8080 strict"}, 2},
		{"-U: any address on lo", []string{"53"}, true, side{v4: true, loopbackOnly: true, isNS: true},
			[]string{"UDP 0.0.0.0%lo:53->53 strict"}, 1},
		{"-T with an address", []string{"127.0.0.6/8080"}, false, side{v4: true, loopbackOnly: true, isNS: true},
			[]string{"TCP 127.0.0.6:8080->8080 strict"}, 1},
		{"none", []string{"none"}, false, both, nil, 0},
		{"auto only", []string{"auto"}, false, both, nil, 0},
		{"ports with auto: none static", []string{"8000-8001,auto"}, false, side{v4: true}, nil, 0},
		{"auto and static", []string{"auto", "8000"}, false, side{v4: true},
			[]string{"TCP 0.0.0.0:8000->8000 strict"}, 1},
		{"all, weak", []string{"all"}, false, side{v4: true},
			[]string{"TCP 0.0.0.0:1->1", "TCP 0.0.0.0:2->2"}, 29999},
		{"exclusions only", []string{"~22"}, false, side{v4: true},
			[]string{"TCP 0.0.0.0:1->1"}, 29998},
		{"loopback companions", []string{"8080"}, false, side{v4: true, v6: true, loopbackSplice: true},
			[]string{"TCP 0.0.0.0:8080->8080 strict", "TCP 127.0.0.1:8080->8080 (spliced)",
				"TCP :::8080->8080 strict", "TCP ::1:8080->8080 (spliced)"}, 4},
		{"no companion for a bound address or device", []string{"192.0.2.1/80", "%eth0/81"}, false,
			side{v4: true, loopbackSplice: true},
			[]string{"TCP 192.0.2.1:80->80 strict", "TCP 0.0.0.0%eth0:81->81 strict"}, 2},
		{"UDP companion", []string{"53"}, true, side{v4: true, loopbackSplice: true},
			[]string{"UDP 0.0.0.0:53->53 strict", "UDP 127.0.0.1:53->53 (spliced)"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := planSpec(t, tc.specs, tc.udp, tc.f)
			if len(got) != tc.count {
				t.Fatalf("got %d sockets, want %d (first: %v)", len(got), tc.count, planStrings(got[:min(4, len(got))]))
			}
			if s := planStrings(got[:len(tc.want)]); !slices.Equal(s, tc.want) {
				t.Errorf("got %q, want %q", s, tc.want)
			}
		})
	}
}

func TestPlanStaticExclusionSkipsPorts(t *testing.T) {
	for _, p := range planSpec(t, []string{"2000-5000,~3000-3010"}, false, side{v4: true}) {
		if p.Port >= 3000 && p.Port <= 3010 {
			t.Fatalf("got a socket for excluded port %d", p.Port)
		}
	}
}

func TestPlanUDPFromTCP(t *testing.T) {
	f := side{v4: true}
	udpPlans := func(udp []string) []string {
		o := options(t, []string{"8080:80"}, udp, []string{"none"}, []string{"none"})
		host, _, err := o.Tables(capsFor(true, false, false, false, true), testEph)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range planStatic(&host, f) {
			if p.UDP {
				out = append(out, p.String())
			}
		}
		return out
	}
	// The copy keeps the port number (no translation) and is weak.
	if got, want := udpPlans(nil), []string{"UDP 0.0.0.0:8080->8080"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := udpPlans([]string{"none"}); len(got) != 0 {
		t.Errorf("got UDP sockets %q with -u none, want none", got)
	}
}

func TestPlanAuto(t *testing.T) {
	var listening fwdrule.PortSet
	for _, p := range []uint16{22, 80, 8000, 3005} {
		listening.Add(p)
	}
	tests := []struct {
		specs []string
		want  []string
	}{
		{[]string{"auto"}, []string{"TCP 0.0.0.0:22->22", "TCP 0.0.0.0:80->80", "TCP 0.0.0.0:3005->3005", "TCP 0.0.0.0:8000->8000"}},
		// Ports with auto: only those, while listening.
		{[]string{"8000-8010,auto"}, []string{"TCP 0.0.0.0:8000->8000"}},
		{[]string{"20-3004,auto"}, []string{"TCP 0.0.0.0:22->22", "TCP 0.0.0.0:80->80"}},
		// Static rules win: 8000 is forwarded statically, not by auto.
		{[]string{"auto", "8000"}, []string{"TCP 0.0.0.0:22->22", "TCP 0.0.0.0:80->80", "TCP 0.0.0.0:3005->3005"}},
		{[]string{"auto,~3000-3010,~22"}, []string{"TCP 0.0.0.0:80->80", "TCP 0.0.0.0:8000->8000"}},
		{[]string{"::1/auto"}, nil}, // v6 scope with a v4-only side
		{[]string{"127.0.0.1/auto"}, []string{"TCP 127.0.0.1:22->22", "TCP 127.0.0.1:80->80", "TCP 127.0.0.1:3005->3005", "TCP 127.0.0.1:8000->8000"}},
		{[]string{"80"}, nil},
	}
	for _, tc := range tests {
		got := planStrings(planAutoSpec(t, tc.specs, false, side{v4: true}, &listening))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.specs, got, tc.want)
		}
	}
}

const procTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12346 1 0000000000000000 100 0 0 10 0
   2: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 12347 1 0000000000000000 100 0 0 10 0
   3: garbage
`

const procTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 100 0 0 10 0
`

func TestParseProcNet(t *testing.T) {
	var s fwdrule.PortSet
	parseProcNet([]byte(procTCP), procStateListen, &s)
	parseProcNet([]byte(procTCP6), procStateListen, &s)
	for _, p := range []uint16{8080, 53, 22} {
		if !s.Has(p) {
			t.Errorf("port %d: got not listening, want listening", p)
		}
	}
	if s.Has(40000) {
		t.Errorf("port 40000 (an established connection): got listening, want not")
	}
	var u fwdrule.PortSet
	parseProcNet([]byte(procTCP), procStateUnconn, &u)
	if u != (fwdrule.PortSet{}) {
		t.Errorf("got ports in state 07 from a table without any")
	}
}

func FuzzParseProcNet(f *testing.F) {
	f.Add([]byte(procTCP))
	f.Add([]byte(procTCP6))
	f.Add([]byte("x\n 0: :FFFF 0:0 0A"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s fwdrule.PortSet
		parseProcNet(b, procStateListen, &s)
	})
}

func TestAutoUDPSet(t *testing.T) {
	var udp, tcp fwdrule.PortSet
	udp.Add(53)
	udp.Add(50000) // ephemeral: a client socket
	tcp.Add(80)
	got := autoUDPSet(&udp, &tcp)
	// The rules, not the scan, keep auto off the ephemeral range.
	if !got.Has(53) || !got.Has(80) || !got.Has(50000) || got.Has(81) {
		t.Errorf("got 53:%v 80:%v 50000:%v 81:%v, want true true true false", got.Has(53), got.Has(80), got.Has(50000), got.Has(81))
	}
}

func TestForwardErrorText(t *testing.T) {
	tests := []struct {
		err  *ForwardError
		want string
	}{
		{&ForwardError{Proto: "TCP", Addr: netip.IPv4Unspecified(), Port: 8080, Err: unix.EADDRINUSE},
			"cannot forward TCP port 8080: address already in use"},
		{&ForwardError{Proto: "UDP", Addr: netip.MustParseAddr("192.0.2.1"), Port: 53, Err: unix.EACCES},
			"cannot forward UDP port 53 on 192.0.2.1: permission denied (binding ports below 1024 needs"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("got %q, want it to start with %q", got, tc.want)
		}
		if !errors.Is(tc.err, tc.err.Err) {
			t.Errorf("errors.Is(%v, %v) = false, want true", tc.err, tc.err.Err)
		}
	}
}

func TestBindFailureFatal(t *testing.T) {
	strict := listenPlan{Listen: sock.Listen{V6: true}, strict: true, anyAddr: true}
	if bindFailureFatal(strict, unix.EAFNOSUPPORT) {
		t.Error("no IPv6 on the host for an unscoped port: got fatal, want a warning")
	}
	if !bindFailureFatal(strict, unix.EADDRINUSE) {
		t.Error("explicit port in use: got a warning, want fatal")
	}
	if bindFailureFatal(listenPlan{}, unix.EADDRINUSE) {
		t.Error("range port in use: got fatal, want a warning")
	}
}
