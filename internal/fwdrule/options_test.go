package fwdrule

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testEph is Linux's default ip_local_port_range, so tests do not depend
// on this machine's setting.
var testEph = Range{32768, 60999}

// parseOptions parses the values of -t, -u, -T and -U (nil: not given).
func parseOptions(tcp, udp, tcpns, udpns []string) (Options, error) {
	var o Options
	for _, opt := range []struct {
		letter byte
		values []string
		dst    *[]Spec
	}{{'t', tcp, &o.TCP}, {'u', udp, &o.UDP}, {'T', tcpns, &o.TCPNS}, {'U', udpns, &o.UDPNS}} {
		for _, v := range opt.values {
			s, err := Parse(opt.letter, v)
			if err != nil {
				return o, err
			}
			*opt.dst = append(*opt.dst, s)
		}
	}
	return o, nil
}

// listing is the rules of t without the listing's trailing spaces.
func listing(t *Table, proto uint8) []string {
	var out []string
	for _, r := range t.Rules {
		if proto == 0 || r.Proto == proto {
			out = append(out, strings.TrimSpace(r.String()))
		}
	}
	return out
}

// TestCommandLine: values of -t in the command line's dialect, as the
// HOST table lists them (-u, -T and -U none).
func TestCommandLine(t *testing.T) {
	none := []string{"none"}
	tests := []struct {
		values []string
		want   []string
	}{
		{[]string{"none"}, nil},
		{[]string{"none", "none"}, nil},
		// As pasta: "none" first only ends the default (auto).
		{[]string{"none", "80"}, []string{"TCP [*]:80  =>  80"}},
		{[]string{"22"}, []string{"TCP [*]:22  =>  22"}},
		{[]string{"22:23"}, []string{"TCP [*]:22  =>  23"}},
		{[]string{"22,25"}, []string{"TCP [*]:22  =>  22", "TCP [*]:25  =>  25"}},
		{[]string{"22-80:32-90"}, []string{"TCP [*]:22-80  =>  32-90"}},
		{[]string{"192.0.2.1%eth0/22"}, []string{"TCP [192.0.2.1]%eth0:22  =>  22"}},
		{[]string{"%eth0/22"}, []string{"TCP [*]%eth0:22  =>  22"}},
		{[]string{"fe80::1%eth0/22"}, []string{"TCP [fe80::1]%eth0:22  =>  22"}},
		{[]string{"[::1]/8080"}, []string{"TCP [::1]:8080  =>  8080"}},
		// "*", or no address before the '/': any address of both
		// families (pasta 296d7e3).
		{[]string{"*/8080", "/8081"}, []string{"TCP [*]:8080  =>  8080", "TCP [*]:8081  =>  8081"}},
		{[]string{"*%eth0/22", "*/80:192.0.2.5/8080", "*/auto"}, []string{"TCP [*]%eth0:22  =>  22", "TCP [0.0.0.0]:80  =>  192.0.2.5:8080",
			"TCP [*]:1-21  =>  1-21  (best effort) (auto-scan)", "TCP [*]:23-79  =>  23-79  (best effort) (auto-scan)",
			"TCP [*]:81-32767  =>  81-32767  (best effort) (auto-scan)", "TCP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)"}},
		{[]string{"*/~22"}, []string{"TCP [*]:1-21  =>  1-21  (best effort)",
			"TCP [*]:23-32767  =>  23-32767  (best effort)", "TCP [*]:61000-65535  =>  61000-65535  (best effort)"}},
		{[]string{"0.0.0.0/5000:192.0.2.5/6000"}, []string{"TCP [0.0.0.0]:5000  =>  192.0.2.5:6000"}},
		// A target address without a listening address listens on its
		// family's any address, not dual-stack (pasta refuses it).
		{[]string{"80:192.0.2.5/8080"}, []string{"TCP [0.0.0.0]:80  =>  192.0.2.5:8080"}},
		{[]string{"1:[2::3]/4"}, []string{"TCP [::]:1  =>  2::3:4"}},
		{[]string{"22-23:192.0.2.5"}, []string{"TCP [0.0.0.0]:22-23  =>  192.0.2.5:22-23"}},
		{[]string{"22:[127.0.0.1],80:8080"}, []string{"TCP [0.0.0.0]:22  =>  127.0.0.1:22", "TCP [*]:80  =>  8080"}},
		{[]string{"1:2::3/4"}, []string{"TCP [1:2::3]:4  =>  4"}},
		{[]string{"2000-5000,~3000-3010"}, []string{"TCP [*]:2000-2999  =>  2000-2999", "TCP [*]:3011-5000  =>  3011-5000"}},
		// Exclusions apply to every value of the option, and a value of
		// exclusions only adds nothing beside one that names ports.
		{[]string{"2000-5000", "~3000-3010"}, []string{"TCP [*]:2000-2999  =>  2000-2999", "TCP [*]:3011-5000  =>  3011-5000"}},
		{[]string{"80", "~22"}, []string{"TCP [*]:80  =>  80"}},
		{[]string{"all", "~22"}, []string{"TCP [*]:1-21  =>  1-21  (best effort)",
			"TCP [*]:23-32767  =>  23-32767  (best effort)", "TCP [*]:61000-65535  =>  61000-65535  (best effort)"}},
		{[]string{"~22", "~23"}, []string{"TCP [*]:1-21  =>  1-21  (best effort)",
			"TCP [*]:24-32767  =>  24-32767  (best effort)", "TCP [*]:61000-65535  =>  61000-65535  (best effort)"}},
		// A scoped value of exclusions only keeps its meaning.
		{[]string{"::1/80", "127.0.0.1/~22"}, []string{"TCP [::1]:80  =>  80", "TCP [127.0.0.1]:1-21  =>  1-21  (best effort)",
			"TCP [127.0.0.1]:23-32767  =>  23-32767  (best effort)", "TCP [127.0.0.1]:61000-65535  =>  61000-65535  (best effort)"}},
		{[]string{"22-80:32-90,~50"}, []string{"TCP [*]:22-49  =>  32-59", "TCP [*]:51-80  =>  61-90"}},
		{[]string{"all:192.0.2.9"}, []string{"TCP [0.0.0.0]:1-32767  =>  192.0.2.9:1-32767  (best effort)",
			"TCP [0.0.0.0]:61000-65535  =>  192.0.2.9:61000-65535  (best effort)"}},
		// "all" beside ports is moot, as in pasta.
		{[]string{"all,80"}, []string{"TCP [*]:80  =>  80"}},
		{[]string{"~0"}, []string{"TCP [*]:1-32767  =>  1-32767  (best effort)", "TCP [*]:61000-65535  =>  61000-65535  (best effort)"}},
		// auto alone: every port but the ephemeral ones, while bound in
		// the namespace (pasta 4e09ddf).
		{[]string{"auto"}, []string{"TCP [*]:1-32767  =>  1-32767  (best effort) (auto-scan)",
			"TCP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)"}},
		{[]string{"::1/auto"}, []string{"TCP [::1]:1-32767  =>  1-32767  (best effort) (auto-scan)",
			"TCP [::1]:61000-65535  =>  61000-65535  (best effort) (auto-scan)"}},
		{[]string{"auto,~22"}, []string{"TCP [*]:1-21  =>  1-21  (best effort) (auto-scan)",
			"TCP [*]:23-32767  =>  23-32767  (best effort) (auto-scan)", "TCP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)"}},
		{[]string{"127.0.0.1/auto", "::1/auto"}, []string{"TCP [127.0.0.1]:1-32767  =>  1-32767  (best effort) (auto-scan)",
			"TCP [127.0.0.1]:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
			"TCP [::1]:1-32767  =>  1-32767  (best effort) (auto-scan)", "TCP [::1]:61000-65535  =>  61000-65535  (best effort) (auto-scan)"}},
		// auto with ports: those ports, and only those, while bound;
		// named ephemeral ports included, others never.
		{[]string{"8000-8010,auto"}, []string{"TCP [*]:8000-8010  =>  8000-8010  (auto-scan)"}},
		{[]string{"auto,8000-8010,~8005"}, []string{"TCP [*]:8000-8004  =>  8000-8004  (auto-scan)", "TCP [*]:8006-8010  =>  8006-8010  (auto-scan)"}},
		{[]string{"40000,auto"}, []string{"TCP [*]:40000  =>  40000  (auto-scan)"}},
		{[]string{"127.0.0.1/80-82:8080-8082,auto"}, []string{"TCP [127.0.0.1]:80-82  =>  8080-8082  (auto-scan)"}},
		{[]string{"8000-8010,auto", "9000"}, []string{"TCP [*]:9000  =>  9000", "TCP [*]:8000-8010  =>  8000-8010  (auto-scan)"}},
		// Other values win over auto's ports, whatever their address.
		{[]string{"auto", "127.0.0.1/80"}, []string{"TCP [127.0.0.1]:80  =>  80",
			"TCP [*]:1-79  =>  1-79  (best effort) (auto-scan)", "TCP [*]:81-32767  =>  81-32767  (best effort) (auto-scan)",
			"TCP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)"}},
		{[]string{"8000-8010,auto", "8005"}, []string{"TCP [*]:8005  =>  8005",
			"TCP [*]:8000-8004  =>  8000-8004  (auto-scan)", "TCP [*]:8006-8010  =>  8006-8010  (auto-scan)"}},
		// podman's forms.
		{[]string{"8080-8080:80-80"}, []string{"TCP [*]:8080  =>  80"}},
		{[]string{"127.0.0.1/8080-8080:80-80", "::1/8080-8080:80-80"}, []string{"TCP [127.0.0.1]:8080  =>  80", "TCP [::1]:8080  =>  80"}},
		{[]string{"080", "65535"}, []string{"TCP [*]:80  =>  80", "TCP [*]:65535  =>  65535"}},
		{[]string{"+22,\t80- 81:+90-+91"}, []string{"TCP [*]:22  =>  22", "TCP [*]:80-81  =>  90-91"}},
		// Listening addresses that cannot receive the same connection
		// share ports; IPv6 sockets are IPV6_V6ONLY, so :: and 127.0.0.1
		// are two.
		{[]string{"127.0.0.1/80", "::1/80"}, []string{"TCP [127.0.0.1]:80  =>  80", "TCP [::1]:80  =>  80"}},
		{[]string{"0.0.0.0/80", "::1/80"}, []string{"TCP [0.0.0.0]:80  =>  80", "TCP [::1]:80  =>  80"}},
		{[]string{"::/80", "127.0.0.1/80"}, []string{"TCP [::]:80  =>  80", "TCP [127.0.0.1]:80  =>  80"}},
		{[]string{"192.0.2.1/80", "192.0.2.2/80:81"}, []string{"TCP [192.0.2.1]:80  =>  80", "TCP [192.0.2.2]:80  =>  81"}},
	}
	for _, tc := range tests {
		o, err := parseOptions(tc.values, none, none, none)
		if err != nil {
			t.Errorf("%q: got error %v", tc.values, err)
			continue
		}
		host, splice, err := o.Tables(AllCaps, testEph)
		if err != nil {
			t.Errorf("%q: got error %v, want %q", tc.values, err, tc.want)
			continue
		}
		if got := listing(&host, 0); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.values, got, tc.want)
		}
		if len(splice.Rules) != 0 {
			t.Errorf("%q: got SPLICE rules %q, want none", tc.values, listing(&splice, 0))
		}
	}
}

// TestCommandLineErrors: values that parse but cannot be forwarded
// together, and how the command line says so: the value, and gopasta's
// reason (ApplyError.Reason) or pasta's for what pasta refuses too.
func TestCommandLineErrors(t *testing.T) {
	tests := []struct {
		values []string
		kind   error
		value  string // the value named
		reason string
	}{
		{[]string{"80", "none"}, ErrOption, "none", "conflicts with the ports given before it"},
		{[]string{"~22", "none"}, ErrOption, "none", "conflicts with the ports given before it"},
		{[]string{"auto", "none"}, ErrOption, "none", "conflicts with the ports given before it"},
		{[]string{"80,~80"}, ErrRange, "80,~80", "every port it forwards is excluded"},
		{[]string{"80", "~80"}, ErrRange, "~80", "every port it forwards is excluded"},
		{[]string{"auto", "::1/auto"}, ErrConflict, "::1/auto", "auto given twice for overlapping addresses"},
		{[]string{"80,80:81"}, ErrConflict, "80,80:81", `port 80 is already forwarded by "80,80:81"`},
		{[]string{"70-90", "80:81"}, ErrConflict, "80:81", `port 80 is already forwarded by "70-90"`},
		{[]string{"0.0.0.0/80", "127.0.0.1/80"}, ErrConflict, "127.0.0.1/80", `port 80 is already forwarded by "0.0.0.0/80"`},
		{[]string{"%eth0/80", "80"}, ErrConflict, "80", `port 80 is already forwarded by "%eth0/80"`},
		{[]string{"%eth0/80", "%eth1/80"}, ErrConflict, "%eth1/80", `port 80 is already forwarded by "%eth0/80"`},
		{[]string{"80", "127.0.0.1/~22"}, ErrConflict, "127.0.0.1/~22", `port 80 is already forwarded by "80"`},
		{[]string{"22", "0"}, ErrInvalid, "0", "Forwarding rule attempts to map from port 0"},
		{[]string{"80:0"}, ErrInvalid, "80:0", "Forwarding rule attempts to map to port 0"},
		{[]string{"0.0.0.0/80:[::1]"}, ErrInvalid, "0.0.0.0/80:[::1]", "Forward from IPv4 (0.0.0.0) to IPv6 (::1) unsupported"},
		{[]string{"80:224.0.0.1"}, ErrInvalid, "80:224.0.0.1", "Multicast target address 224.0.0.1 for forwarding rule"},
	}
	none := []string{"none"}
	for _, tc := range tests {
		o, err := parseOptions(tc.values, none, none, none)
		if err != nil {
			t.Errorf("%q: got parse error %v", tc.values, err)
			continue
		}
		host, _, err := o.Tables(AllCaps, testEph)
		var value, reason string
		var se *SpecError
		var ae *ApplyError
		switch {
		case err == nil:
			t.Errorf("%q: got %q, want error %q", tc.values, listing(&host, 0), tc.reason)
			continue
		case errors.As(err, &se):
			value, reason = se.Value, se.Reason
		case errors.As(err, &ae):
			value, reason = ae.Spec.Value, ae.Reason()
		default:
			t.Errorf("%q: got error type %T, want *SpecError or *ApplyError", tc.values, err)
			continue
		}
		if !errors.Is(err, tc.kind) {
			t.Errorf("%q: got error %v, want kind %v", tc.values, err, tc.kind)
		}
		if value != tc.value || reason != tc.reason {
			t.Errorf("%q: got %q: %s, want %q: %s", tc.values, value, reason, tc.value, tc.reason)
		}
	}
}

// TestTables: the four options, pasta's defaults applied, for several
// sides. The first case is the reference transcript's pasta command line
// ("-t 8080"); the listing differs from pasta's in one documented way: UDP
// also forwards the TCP ports.
func TestTables(t *testing.T) {
	dual := AllCaps
	v4 := CapIPv4 | CapTCP | CapUDP | CapScan | CapIfname
	none := []string{"none"}
	tests := []struct {
		name                   string
		tcp, udp, tcpns, udpns []string
		caps                   Caps
		want                   []string
	}{
		{"-t 8080 (pasta's defaults for the rest)", []string{"8080"}, nil, nil, nil, dual, []string{
			"HOST",
			"TCP [*]:8080  =>  8080",
			"UDP [*]:8080  =>  8080  (best effort)",
			"UDP [*]:1-8079  =>  1-8079  (best effort) (auto-scan)",
			"UDP [*]:8081-32767  =>  8081-32767  (best effort) (auto-scan)",
			"UDP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
			"SPLICE",
			"TCP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)",
			"TCP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
			"UDP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)",
			"UDP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
		}},
		{"UDP copies: address and target kept, port number kept, exclusions not carried to auto",
			[]string{"127.0.0.1/80:8080", "2000-2010,~2005"}, nil, none, none, dual, []string{
				"HOST",
				"TCP [127.0.0.1]:80  =>  8080",
				"TCP [*]:2000-2004  =>  2000-2004",
				"TCP [*]:2006-2010  =>  2006-2010",
				"UDP [127.0.0.1]:80  =>  80  (best effort)",
				"UDP [*]:2000-2004  =>  2000-2004  (best effort)",
				"UDP [*]:2006-2010  =>  2006-2010  (best effort)",
				"UDP [*]:1-79  =>  1-79  (best effort) (auto-scan)",
				"UDP [*]:81-1999  =>  81-1999  (best effort) (auto-scan)",
				"UDP [*]:2005  =>  2005  (best effort) (auto-scan)",
				"UDP [*]:2011-32767  =>  2011-32767  (best effort) (auto-scan)",
				"UDP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
				"SPLICE",
			}},
		{"-u given: no copies", []string{"80:8080"}, []string{"53"}, none, none, dual, []string{
			"HOST", "TCP [*]:80  =>  8080", "UDP [*]:53  =>  53", "SPLICE",
		}},
		// Ports and auto, in each of the four options (pasta 4e09ddf): the
		// ports named, only while bound on the other side; auto alone,
		// every port but the ephemeral ones.
		{"ports and auto, every option", []string{"8000-8010,auto", "~8005"}, []string{"5000-5001,auto"},
			[]string{"9000-9001,auto"}, []string{"auto,~1-60000"}, dual, []string{
				"HOST",
				"TCP [*]:8000-8004  =>  8000-8004  (auto-scan)",
				"TCP [*]:8006-8010  =>  8006-8010  (auto-scan)",
				"UDP [*]:5000-5001  =>  5000-5001  (auto-scan)",
				"SPLICE",
				"TCP [*]%lo:9000-9001  =>  9000-9001  (auto-scan)",
				"UDP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
			}},
		{"address, interface, target", []string{"192.0.2.1%eth0/22", "5000:192.0.2.5/6000", "[::1]/8443:443"}, none, none, none, dual, []string{
			"HOST",
			"TCP [192.0.2.1]%eth0:22  =>  22",
			"TCP [0.0.0.0]:5000  =>  192.0.2.5:6000",
			"TCP [::1]:8443  =>  443",
			"SPLICE",
		}},
		{"IPv4 only: IPv6 rules left out", []string{"80", "::1/81"}, none, []string{"53"}, none, v4, []string{
			"HOST",
			"TCP [0.0.0.0]:80  =>  80",
			"SPLICE",
			"TCP [0.0.0.0]%lo:53  =>  53",
		}},
		{"no SO_BINDTODEVICE: -T and -U on each loopback address", none, none, []string{"53,80"}, []string{"auto"}, dual &^ CapIfname, []string{
			"HOST",
			"SPLICE",
			"TCP [127.0.0.1]:53  =>  53",
			"TCP [127.0.0.1]:80  =>  80",
			"TCP [::1]:53  =>  53",
			"TCP [::1]:80  =>  80",
			"UDP [127.0.0.1]:1-32767  =>  1-32767  (best effort) (auto-scan)",
			"UDP [127.0.0.1]:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
			"UDP [::1]:1-32767  =>  1-32767  (best effort) (auto-scan)",
			"UDP [::1]:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
		}},
		{"-T with an address", none, none, []string{"127.0.0.1/53", "%lo/80"}, none, dual, []string{
			"HOST",
			"SPLICE",
			"TCP [127.0.0.1]:53  =>  53",
			"TCP [*]%lo:80  =>  80",
		}},
		{"* in every option", []string{"*/80"}, []string{"*/53"}, []string{"*/8080"}, []string{"*/5353"}, dual, []string{
			"HOST",
			"TCP [*]:80  =>  80",
			"UDP [*]:53  =>  53",
			"SPLICE",
			"TCP [*]%lo:8080  =>  8080",
			"UDP [*]%lo:5353  =>  5353",
		}},
		{"* with one family", []string{"*/80"}, none, none, none, v4, []string{
			"HOST",
			"TCP [0.0.0.0]:80  =>  80",
			"SPLICE",
		}},
		{"all, ephemeral range left out", []string{"all"}, none, none, none, dual, []string{
			"HOST",
			"TCP [*]:1-32767  =>  1-32767  (best effort)",
			"TCP [*]:61000-65535  =>  61000-65535  (best effort)",
			"SPLICE",
		}},
		{"--no-tcp: no TCP rules, UDP's default", nil, nil, nil, none, dual &^ CapTCP, []string{
			"HOST",
			"UDP [*]:1-32767  =>  1-32767  (best effort) (auto-scan)",
			"UDP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
			"SPLICE",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOptions(tc.tcp, tc.udp, tc.tcpns, tc.udpns)
			if err != nil {
				t.Fatal(err)
			}
			host, splice, err := o.Tables(tc.caps, testEph)
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			got := append(append([]string{"HOST"}, listing(&host, 0)...), append([]string{"SPLICE"}, listing(&splice, 0)...)...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
			for _, tb := range []*Table{&host, &splice} {
				if err := tb.Validate(); err != nil {
					t.Errorf("%s table does not validate: %v", tb.Pif, err)
				}
			}
		})
	}
}

// TestManyExclusions: exclusions that cut a value into tens of thousands
// of runs stay cheap (command lines are user input), and the table's
// limit refuses them.
func TestManyExclusions(t *testing.T) {
	var b strings.Builder
	for p := 2; p < 65535; p += 2 {
		b.WriteString("~" + strconv.Itoa(p) + ",")
	}
	b.WriteString("1-65535")
	start := time.Now()
	o, err := parseOptions([]string{"127.0.0.1/" + b.String(), "::1/" + b.String()}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = o.Tables(AllCaps, testEph)
	if !errors.Is(err, ErrFull) {
		t.Errorf("got %v, want ErrFull", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v, want well under 5s", d)
	}
}

func BenchmarkTablesPodman(b *testing.B) {
	o, err := parseOptions([]string{"127.0.0.1/8080-8080:80-80", "::1/8443-8443:443-443", "2000-5000,~3000-3010"}, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := o.Tables(AllCaps, testEph); err != nil {
			b.Fatal(err)
		}
	}
}
