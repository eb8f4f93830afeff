package portfwd

import (
	"errors"
	"slices"
	"testing"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/fwdrule"
)

func listing(ts [2]fwdrule.Table) []string {
	var out []string
	for _, t := range ts {
		out = append(out, "  "+t.Pif.String())
		for _, r := range t.Rules {
			out = append(out, "    "+r.String())
		}
	}
	return out
}

// rulesFromArgs parses command line values the way run does.
func rulesFromArgs(t *testing.T, tcp, udp, tcpns, udpns []string) Rules {
	t.Helper()
	var cfg config.Config
	for _, o := range []struct {
		vals []string
		dst  *config.PortSpec
	}{{tcp, &cfg.TCPPorts}, {udp, &cfg.UDPPorts}, {tcpns, &cfg.TCPNSPorts}, {udpns, &cfg.UDPNSPorts}} {
		if o.vals == nil {
			continue
		}
		*o.dst = mustSpec(t, o.vals...)
	}
	return RulesFrom(&cfg)
}

// TestTablesFrom: the command line's options as tables, listed as pesto
// lists them. The first case is the reference transcript's pasta command
// line ("-t 8080"); the listing differs from pasta's in two documented
// ways: UDP also forwards the TCP ports (pasta before 2025, and
// gopasta's config), and auto keeps the ephemeral range.
func TestTablesFrom(t *testing.T) {
	dual := capsFor(true, true, false, false, true)
	tests := []struct {
		name                   string
		tcp, udp, tcpns, udpns []string
		caps                   fwdrule.Caps
		want                   []string
	}{
		{"-t 8080 (pasta's defaults for the rest)", []string{"8080"}, nil, nil, nil, dual, []string{
			"  HOST",
			"    TCP [*]:8080  =>  8080 ",
			"    UDP [*]:8080  =>  8080  (best effort)",
			"    UDP [*]:1-8079  =>  1-8079  (best effort) (auto-scan)",
			"    UDP [*]:8081-65535  =>  8081-65535  (best effort) (auto-scan)",
			"  SPLICE",
			"    TCP [*]%lo:1-65535  =>  1-65535  (best effort) (auto-scan)",
			"    UDP [*]%lo:1-65535  =>  1-65535  (best effort) (auto-scan)",
		}},
		{"ranges, exclusions, auto", []string{"8000-8010,auto", "~9000-9999"}, []string{"none"}, []string{"none"}, []string{"none"}, dual, []string{
			"  HOST",
			"    TCP [*]:8000-8010  =>  8000-8010 ",
			"    TCP [*]:1-7999  =>  1-7999  (best effort) (auto-scan)",
			"    TCP [*]:8011-8999  =>  8011-8999  (best effort) (auto-scan)",
			"    TCP [*]:10000-65535  =>  10000-65535  (best effort) (auto-scan)",
			"  SPLICE",
		}},
		{"address, interface, target", []string{"192.0.2.1%eth0/22", "5000:192.0.2.5/6000", "[::1]/8443:443"}, []string{"none"}, []string{"none"}, []string{"none"}, dual, []string{
			"  HOST",
			"    TCP [192.0.2.1]%eth0:22  =>  22 ",
			"    TCP [0.0.0.0]:5000  =>  192.0.2.5:6000 ",
			"    TCP [::1]:8443  =>  443 ",
			"  SPLICE",
		}},
		{"IPv4 only", []string{"80", "::1/81"}, []string{"none"}, []string{"53"}, []string{"none"}, capsFor(true, false, false, false, true), []string{
			"  HOST",
			"    TCP [0.0.0.0]:80  =>  80 ",
			"  SPLICE",
			"    TCP [0.0.0.0]%lo:53  =>  53 ",
		}},
		{"no SO_BINDTODEVICE", []string{"none"}, []string{"none"}, []string{"53"}, []string{"auto"}, capsFor(true, true, false, false, false), []string{
			"  HOST",
			"  SPLICE",
			"    TCP [127.0.0.1]:53  =>  53 ",
			"    TCP [::1]:53  =>  53 ",
			"    UDP [127.0.0.1]:1-65535  =>  1-65535  (best effort) (auto-scan)",
			"    UDP [::1]:1-65535  =>  1-65535  (best effort) (auto-scan)",
		}},
		{"all, ephemeral range left out", []string{"all"}, []string{"none"}, []string{"none"}, []string{"none"}, dual, []string{
			"  HOST",
			"    TCP [*]:1-29999  =>  1-29999  (best effort)",
			"  SPLICE",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rulesFromArgs(t, tc.tcp, tc.udp, tc.tcpns, tc.udpns)
			ts, err := tablesFrom(&r, tc.caps)
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			if got := listing(ts); !slices.Equal(got, tc.want) {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
			for i := range ts {
				if err := ts[i].Validate(); err != nil {
					t.Errorf("%s table does not validate: %v", ts[i].Pif, err)
				}
			}
		})
	}
}

// TestTablesFromConflict: the same port on two interfaces without an
// address is two overlapping rules to pasta; gopasta refuses it at start
// rather than hold a table its control socket would not take back.
func TestTablesFromConflict(t *testing.T) {
	r := rulesFromArgs(t, []string{"%eth0/80", "%eth1/80"}, []string{"none"}, []string{"none"}, []string{"none"})
	_, err := tablesFrom(&r, capsFor(true, true, false, false, true))
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, fwdrule.ErrConflict) {
		t.Errorf("got %v, want a ConfigError for a conflict", err)
	}
}

func TestCapsFor(t *testing.T) {
	if got, want := capsFor(true, true, false, false, true), fwdrule.Caps(0x3f); got != want {
		t.Errorf("everything: got %#x, want %#x (pasta's)", got, want)
	}
	if got, want := capsFor(true, false, true, false, false), fwdrule.CapIPv4|fwdrule.CapUDP|fwdrule.CapScan; got != want {
		t.Errorf("IPv4, --no-tcp, no device binding: got %#x, want %#x", got, want)
	}
}
