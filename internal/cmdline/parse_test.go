package cmdline

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/fwdrule"
)

func mustParse(t *testing.T, args ...string) *config.Config {
	t.Helper()
	cfg, err := Parse(args)
	if err != nil {
		t.Fatalf("Parse(%q): got error %v, want nil", args, err)
	}
	return cfg
}

var pid = fmt.Sprint(os.Getpid())

// TestCallers: the exact argument lists podman and rootlesskit pass to pasta
// must parse unchanged.
func TestCallers(t *testing.T) {
	netnsFile := filepath.Join(t.TempDir(), "netns-123")
	if err := os.WriteFile(netnsFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		check func(*testing.T, *config.Config)
	}{
		{
			name: "podman",
			args: strings.Fields("--config-net -t 8080-8080:80-80 --dns-forward 169.254.1.1 -u none -T none -U none --no-map-gw --quiet --map-guest-addr 169.254.1.2 --pid /tmp/x.pid --netns " + netnsFile),
			check: func(t *testing.T, c *config.Config) {
				want := config.Config{Mode: config.ModeAttach, NetNS: netnsFile, NetNSOnly: true, ConfigNet: true, NoMapGW: true, Quiet: true, PidFile: "/tmp/x.pid",
					DNSForward4: netip.MustParseAddr("169.254.1.1"), MapGuestAddr4: netip.MustParseAddr("169.254.1.2")}
				got := config.Config{Mode: c.Mode, NetNS: c.NetNS, NetNSOnly: c.NetNSOnly, ConfigNet: c.ConfigNet, NoMapGW: c.NoMapGW, Quiet: c.Quiet, PidFile: c.PidFile,
					DNSForward4: c.DNSForward4, MapGuestAddr4: c.MapGuestAddr4}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("got %+v, want %+v", got, want)
				}
				if c.UserNS != "" || len(c.Command) != 0 {
					t.Errorf("got UserNS %q Command %q, want both empty", c.UserNS, c.Command)
				}
			},
		},
		{
			name: "podman with host IP and IPv6 dns-forward",
			args: strings.Fields("--config-net -t 127.0.0.1/8080-8080:80-80 -t 8443-8443:443-443 --dns-forward 169.254.1.1 --dns-forward fd00::1 -u none -T none -U none --no-map-gw --quiet --map-guest-addr 169.254.1.2 --pid /tmp/x.pid --netns " + netnsFile),
			check: func(t *testing.T, c *config.Config) {
				if got, want := c.DNSForward6, netip.MustParseAddr("fd00::1"); got != want {
					t.Errorf("DNSForward6: got %v, want %v", got, want)
				}
			},
		},
		{
			name: "rootlesskit",
			args: strings.Fields("--stderr --ns-ifname=tap0 --mtu=65520 --config-net --address=10.0.2.100 --netmask=24 --gateway=10.0.2.2 --dns-forward=10.0.2.3 --no-map-gw --ipv4-only --tcp-ports=auto --udp-ports=auto " + pid),
			check: func(t *testing.T, c *config.Config) {
				want := config.Config{Mode: config.ModeAttach, PID: os.Getpid(), NetNS: "/proc/" + pid + "/ns/net", UserNS: "/proc/" + pid + "/ns/user",
					NSIfName: "tap0", MTU: 65520, ConfigNet: true, Addr4: netip.MustParsePrefix("10.0.2.100/24"), Addr4LenGiven: true, Prefix4Len: 24,
					Gateway4: netip.MustParseAddr("10.0.2.2"), DNSForward4: netip.MustParseAddr("10.0.2.3"), NoMapGW: true, IPv4Only: true}
				got := config.Config{Mode: c.Mode, PID: c.PID, NetNS: c.NetNS, UserNS: c.UserNS,
					NSIfName: c.NSIfName, MTU: c.MTU, ConfigNet: c.ConfigNet, Addr4: c.Addr4, Addr4LenGiven: c.Addr4LenGiven, Prefix4Len: c.Prefix4Len,
					Gateway4: c.Gateway4, DNSForward4: c.DNSForward4, NoMapGW: c.NoMapGW, IPv4Only: c.IPv4Only}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("got %+v, want %+v", got, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustParse(t, tt.args...))
		})
	}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t)
	if c.Mode != config.ModeSpawn || len(c.Command) != 0 {
		t.Errorf("got mode %v command %q, want spawn with no command", c.Mode, c.Command)
	}
	if c.MTU != -1 {
		t.Errorf("MTU: got %d, want -1 (not given)", c.MTU)
	}
	if c.OurMAC.String() != "9a:55:9a:55:9a:55" {
		t.Errorf("OurMAC: got %v, want 9a:55:9a:55:9a:55", c.OurMAC)
	}
	if !c.NoDHCPDNS || !c.NoDHCPSearch {
		t.Errorf("NoDHCPDNS, NoDHCPSearch: got %v %v, want true true (pasta mode)", c.NoDHCPDNS, c.NoDHCPSearch)
	}
	if c.Vhost != config.VhostOff || c.TapNAPI {
		t.Errorf("Vhost %v TapNAPI %v: want off, false", c.Vhost, c.TapNAPI)
	}
	// The default MAC must be a copy: a caller changing it must not change
	// the package default.
	c.OurMAC[0] = 0
	if config.DefaultMAC[0] != 0x9a {
		t.Error("Config.OurMAC aliases config.DefaultMAC")
	}
}

// TestPositional: pasta's rules for what follows the options.
func TestPositional(t *testing.T) {
	tests := []struct {
		args     []string
		wantMode config.Mode
		wantCmd  []string
		wantPID  int
	}{
		{[]string{"sh", "-c", "exit 7"}, config.ModeSpawn, []string{"sh", "-c", "exit 7"}, 0},
		{[]string{"--", "sh", "-c", "exit 7"}, config.ModeSpawn, []string{"sh", "-c", "exit 7"}, 0},
		{[]string{"-q", "sh", "-q", "--mtu", "60"}, config.ModeSpawn, []string{"sh", "-q", "--mtu", "60"}, 0},
		{[]string{"--", "-x"}, config.ModeSpawn, []string{"-x"}, 0},
		{[]string{"-", "x"}, config.ModeSpawn, []string{"-", "x"}, 0},
		{[]string{"help"}, config.ModeSpawn, []string{"help"}, 0},
		{[]string{pid}, config.ModeAttach, nil, os.Getpid()},
		{[]string{"--", pid}, config.ModeAttach, nil, os.Getpid()},
		{[]string{pid, "x"}, config.ModeSpawn, []string{pid, "x"}, 0},
		{[]string{"echo", pid}, config.ModeSpawn, []string{"echo", pid}, 0},
	}
	for _, tt := range tests {
		c := mustParse(t, tt.args...)
		if c.Mode != tt.wantMode || !reflect.DeepEqual(c.Command, tt.wantCmd) || c.PID != tt.wantPID {
			t.Errorf("%q: got mode %v command %q pid %d, want mode %v command %q pid %d",
				tt.args, c.Mode, c.Command, c.PID, tt.wantMode, tt.wantCmd, tt.wantPID)
		}
	}
}

func TestNamespaces(t *testing.T) {
	dir := t.TempDir()
	nsPath := filepath.Join(dir, "ns")
	// --userns must name a user namespace (NS_GET_NSTYPE); --netns is
	// only checked to exist.
	const userPath = "/proc/self/ns/user"
	if err := os.WriteFile(nsPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, "--netns", nsPath)
	if c.Mode != config.ModeAttach || c.NetNS != nsPath || !c.NetNSOnly || c.UserNS != "" {
		t.Errorf("--netns PATH: got %v %q netnsOnly=%v userns=%q", c.Mode, c.NetNS, c.NetNSOnly, c.UserNS)
	}
	c = mustParse(t, "--netns", nsPath, "--userns", userPath, "--no-netns-quit")
	if c.NetNSOnly || c.UserNS != userPath || !c.NoNetNSQuit {
		t.Errorf("--netns --userns: got netnsOnly=%v userns=%q noquit=%v, want false %q true", c.NetNSOnly, c.UserNS, c.NoNetNSQuit, userPath)
	}
	c = mustParse(t, "--userns", userPath, pid)
	if c.UserNS != userPath || c.NetNS != "/proc/"+pid+"/ns/net" {
		t.Errorf("--userns PID: got userns %q netns %q", c.UserNS, c.NetNS)
	}
	c = mustParse(t, "--netns-only", pid)
	if !c.NetNSOnly || c.UserNS != "" {
		t.Errorf("--netns-only PID: got netnsOnly=%v userns=%q, want true, empty", c.NetNSOnly, c.UserNS)
	}
	// With a command (pasta since ffa5cee): the command's namespaces
	// belong to --userns, or with --netns-only to gopasta's own.
	c = mustParse(t, "--userns", userPath, "sh")
	if c.Mode != config.ModeSpawn || c.UserNS != userPath || c.NetNSOnly || !reflect.DeepEqual(c.Command, []string{"sh"}) {
		t.Errorf("--userns PATH sh: got %v userns %q netnsOnly=%v command %q, want spawn, %q, false, [sh]", c.Mode, c.UserNS, c.NetNSOnly, c.Command, userPath)
	}
	c = mustParse(t, "--netns-only", "sh")
	if c.Mode != config.ModeSpawn || c.UserNS != "" || !c.NetNSOnly {
		t.Errorf("--netns-only sh: got %v userns %q netnsOnly=%v, want spawn, empty, true", c.Mode, c.UserNS, c.NetNSOnly)
	}
	c = mustParse(t, "--netns-only", "--userns", userPath, "sh")
	if c.UserNS != "" || !c.NetNSOnly {
		t.Errorf("--netns-only --userns PATH sh: got userns %q netnsOnly=%v, want --netns-only to win", c.UserNS, c.NetNSOnly)
	}
	// --fd: read as pasta reads numbers, 0 included.
	for _, tc := range []struct {
		v    string
		want int
	}{{"0", 0}, {"3", 3}, {"0x10", 16}, {"010", 8}, {"2147483647", 2147483647}} {
		c = mustParse(t, "--fd", tc.v, pid)
		if !c.TapFDSet || c.TapFD != tc.want || c.Mode != config.ModeAttach {
			t.Errorf("--fd %s PID: got set=%v fd %d mode %v, want %d in attach mode", tc.v, c.TapFDSet, c.TapFD, c.Mode, tc.want)
		}
	}
	if c = mustParse(t, pid); c.TapFDSet {
		t.Errorf("no --fd: got TapFDSet, want unset")
	}
	// A relative path is made absolute: the run code may change directory.
	t.Chdir(dir)
	c = mustParse(t, "--netns", "./ns")
	if c.NetNS != nsPath {
		t.Errorf("--netns ./ns: got %q, want %q", c.NetNS, nsPath)
	}
	// NAME means /run/netns/NAME.
	name := fmt.Sprintf("cmdline-test-%d", os.Getpid())
	if err := os.MkdirAll("/run/netns", 0o755); err == nil {
		if f, err := os.Create("/run/netns/" + name); err == nil {
			f.Close()
			t.Cleanup(func() { os.Remove("/run/netns/" + name) })
			c = mustParse(t, "--netns", name)
			if c.NetNS != "/run/netns/"+name {
				t.Errorf("--netns NAME: got %q, want /run/netns/%s", c.NetNS, name)
			}
		}
	}
}

// TestOptions: every option's accepted spellings and values.
func TestOptions(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "log")
	confPath := filepath.Join(t.TempDir(), "ctl")
	staleSock := staleSocket(t) // replaced at start, so accepted
	tests := []struct {
		args  string
		check func(c *config.Config) (got, want any)
	}{
		{"-d", func(c *config.Config) (any, any) { return c.Debug, true }},
		{"--debug -q", func(c *config.Config) (any, any) { return c.Quiet, false }},
		{"--trace", func(c *config.Config) (any, any) { return [2]bool{c.Trace, c.Debug}, [2]bool{true, true} }},
		{"--stats 5", func(c *config.Config) (any, any) { return c.Stats, 5 * time.Second }},
		{"-q", func(c *config.Config) (any, any) { return c.Quiet, true }},
		{"--quiet", func(c *config.Config) (any, any) { return c.Quiet, true }},
		{"-f", func(c *config.Config) (any, any) { return c.Foreground, true }},
		{"-fq", func(c *config.Config) (any, any) { return [2]bool{c.Foreground, c.Quiet}, [2]bool{true, true} }},
		{"-e", func(c *config.Config) (any, any) { return c.Quiet, false }},
		{"--stderr", func(c *config.Config) (any, any) { return c.Quiet, false }},
		{"--chroot-fallback", func(c *config.Config) (any, any) { return c.Quiet, false }},
		{"-t none -t 8080", func(c *config.Config) (any, any) { return tcpRules(c), "8080->8080" }},
		{"-l " + logFile, func(c *config.Config) (any, any) { return c.LogFile, logFile }},
		{"--log-file=" + logFile, func(c *config.Config) (any, any) { return c.LogFile, logFile }},
		{"--log-size 1048576", func(c *config.Config) (any, any) { return c.LogSize, int64(1 << 20) }},
		{"--log-size 2M", func(c *config.Config) (any, any) { return c.LogSize, int64(2 << 20) }},
		{"--log-size 64k", func(c *config.Config) (any, any) { return c.LogSize, int64(64 << 10) }},
		{"--runas 0", func(c *config.Config) (any, any) { return *c.RunAs, config.RunAs{UID: 0, GID: 0} }},
		{"--runas 1234:5678", func(c *config.Config) (any, any) { return *c.RunAs, config.RunAs{UID: 1234, GID: 5678} }},
		{"--runas root:root", func(c *config.Config) (any, any) { return *c.RunAs, config.RunAs{UID: 0, GID: 0} }},
		{"-p /tmp/x.pcap", func(c *config.Config) (any, any) { return c.PcapFile, "/tmp/x.pcap" }},
		{"--pcap=/tmp/x.pcap", func(c *config.Config) (any, any) { return c.PcapFile, "/tmp/x.pcap" }},
		{"-P /tmp/x.pid", func(c *config.Config) (any, any) { return c.PidFile, "/tmp/x.pid" }},
		{"-c " + confPath, func(c *config.Config) (any, any) { return c.ConfPath, confPath }},
		{"--conf-path=" + confPath, func(c *config.Config) (any, any) { return c.ConfPath, confPath }},
		{"-c " + staleSock, func(c *config.Config) (any, any) { return c.ConfPath, staleSock }},
		{"-m 1500", func(c *config.Config) (any, any) { return c.MTU, 1500 }},
		{"-m1500", func(c *config.Config) (any, any) { return c.MTU, 1500 }},
		{"-m 0", func(c *config.Config) (any, any) { return c.MTU, 0 }},
		{"-m 68 -4", func(c *config.Config) (any, any) { return c.MTU, 68 }},
		{"-m 1280", func(c *config.Config) (any, any) { return c.MTU, 1280 }},
		{"-m 65520", func(c *config.Config) (any, any) { return c.MTU, 65520 }},
		{"-m 1500 -m 9000", func(c *config.Config) (any, any) { return c.MTU, 9000 }},
		{"--mt 1500", func(c *config.Config) (any, any) { return c.MTU, 1500 }}, // getopt_long abbreviation
		// Numbers read as pasta's strtoul(3) with base 0 reads them:
		// 0x hexadecimal, a leading 0 octal, leading white space and a sign.
		{"-m 0x5dc", func(c *config.Config) (any, any) { return c.MTU, 1500 }},
		{"-m 0X5DC", func(c *config.Config) (any, any) { return c.MTU, 1500 }},
		{"-m 02734", func(c *config.Config) (any, any) { return c.MTU, 1500 }},
		{"-m +1500", func(c *config.Config) (any, any) { return c.MTU, 1500 }},
		{"-m -0", func(c *config.Config) (any, any) { return c.MTU, 0 }},
		{"-m 00", func(c *config.Config) (any, any) { return c.MTU, 0 }},
		{"-n 0x10", func(c *config.Config) (any, any) { return c.Prefix4Len, 16 }},
		{"-n 024", func(c *config.Config) (any, any) { return c.Prefix4Len, 20 }},
		{"--log-size 0x100000", func(c *config.Config) (any, any) { return c.LogSize, int64(1 << 20) }},
		{"--log-size 0100k", func(c *config.Config) (any, any) { return c.LogSize, int64(64 << 10) }},
		{"--runas 0x4d2:0x162e", func(c *config.Config) (any, any) { return *c.RunAs, config.RunAs{UID: 1234, GID: 5678} }},
		{"--runas 02322", func(c *config.Config) (any, any) { return c.RunAs.UID, 1234 }},
		{"-a 192.0.2.5", func(c *config.Config) (any, any) {
			return [2]any{c.Addr4, c.Addr4LenGiven}, [2]any{netip.MustParsePrefix("192.0.2.5/24"), false}
		}},
		{"-a 10.1.2.3", func(c *config.Config) (any, any) { return c.Addr4, netip.MustParsePrefix("10.1.2.3/8") }},
		{"-a 192.0.2.5/28", func(c *config.Config) (any, any) { return c.Addr4, netip.MustParsePrefix("192.0.2.5/28") }},
		{"-a 192.0.2.5 -n 255.255.255.240", func(c *config.Config) (any, any) { return c.Addr4, netip.MustParsePrefix("192.0.2.5/28") }},
		{"-n 16 -a 192.0.2.5", func(c *config.Config) (any, any) { return c.Addr4, netip.MustParsePrefix("192.0.2.5/16") }},
		{"-n 20", func(c *config.Config) (any, any) { return c.Prefix4Len, 20 }},
		{"-a 2001:db8::5 -a 192.0.2.5", func(c *config.Config) (any, any) {
			return [2]netip.Prefix{c.Addr4, c.Addr6}, [2]netip.Prefix{netip.MustParsePrefix("192.0.2.5/24"), netip.MustParsePrefix("2001:db8::5/64")}
		}},
		{"-a [2001:db8::5]/96", func(c *config.Config) (any, any) { return c.Addr6, netip.MustParsePrefix("2001:db8::5/96") }}, // as pasta
		{"-a [192.0.2.5]", func(c *config.Config) (any, any) { return c.Addr4, netip.MustParsePrefix("192.0.2.5/24") }},
		{"-M 02:00:00:00:00:01", func(c *config.Config) (any, any) { return c.OurMAC.String(), "02:00:00:00:00:01" }},
		{"--ns-mac-addr 02:00:00:00:00:02", func(c *config.Config) (any, any) { return c.NSMAC.String(), "02:00:00:00:00:02" }},
		{"-g 192.0.2.1 -g fe80::1", func(c *config.Config) (any, any) {
			return [2]netip.Addr{c.Gateway4, c.Gateway6}, [2]netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("fe80::1")}
		}},
		{"-i lo", func(c *config.Config) (any, any) { return c.Interface, "lo" }},
		{"-o 192.0.2.9 -o 2001:db8::9", func(c *config.Config) (any, any) {
			return [2]netip.Addr{c.Outbound4, c.Outbound6}, [2]netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::9")}
		}},
		{"--outbound-if4 lo --outbound-if6 lo", func(c *config.Config) (any, any) { return c.OutboundIf4 + c.OutboundIf6, "lolo" }},
		{"-H box", func(c *config.Config) (any, any) { return c.Hostname, "box" }},
		{"--fqdn box.example.org", func(c *config.Config) (any, any) { return c.FQDN, "box.example.org" }},
		{"-D 192.0.2.53 -D ::1", func(c *config.Config) (any, any) {
			return c.DNS, []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("::1")}
		}},
		{"-D 192.0.2.53 -D none", func(c *config.Config) (any, any) { return [2]any{c.DNS, c.NoDNS}, [2]any{[]netip.Addr(nil), true} }},
		{"-D none -D 192.0.2.53", func(c *config.Config) (any, any) {
			return [2]any{c.DNS, c.NoDNS}, [2]any{[]netip.Addr{netip.MustParseAddr("192.0.2.53")}, false}
		}},
		{"--dns-host 127.0.0.53", func(c *config.Config) (any, any) { return c.DNSHost4, netip.MustParseAddr("127.0.0.53") }},
		{"--dns-forward 2001:db8::53", func(c *config.Config) (any, any) { return c.DNSForward6, netip.MustParseAddr("2001:db8::53") }},
		{"-S example.org", func(c *config.Config) (any, any) { return c.Search, []string{"example.org"} }},
		{"-S none", func(c *config.Config) (any, any) { return c.NoSearch, true }},
		{"-S none.", func(c *config.Config) (any, any) { return c.Search, []string{"none."} }},
		{"--dhcp-dns --dhcp-search", func(c *config.Config) (any, any) { return [2]bool{c.NoDHCPDNS, c.NoDHCPSearch}, [2]bool{false, false} }},
		{"--no-dhcp-dns --no-dhcp-search", func(c *config.Config) (any, any) { return [2]bool{c.NoDHCPDNS, c.NoDHCPSearch}, [2]bool{true, true} }},
		{"--no-tcp --no-udp --no-icmp", func(c *config.Config) (any, any) {
			return [3]bool{c.NoTCP, c.NoUDP, c.NoICMP}, [3]bool{true, true, true}
		}},
		{"--no-dhcp --no-ndp --no-dhcpv6 --no-ra", func(c *config.Config) (any, any) {
			return [4]bool{c.NoDHCP, c.NoNDP, c.NoDHCPv6, c.NoRA}, [4]bool{true, true, true, true}
		}},
		{"--freebind", func(c *config.Config) (any, any) { return c.Freebind, true }},
		{"-4", func(c *config.Config) (any, any) { return c.IPv4Only, true }},
		{"-6", func(c *config.Config) (any, any) { return c.IPv6Only, true }},
		{"--ipv6-only", func(c *config.Config) (any, any) { return c.IPv6Only, true }},
		{"--map-host-loopback 192.0.2.100", func(c *config.Config) (any, any) { return c.MapHostLoopback4, netip.MustParseAddr("192.0.2.100") }},
		{"--map-host-loopback none", func(c *config.Config) (any, any) { return [2]bool{c.NoMapHostLoopback, c.NoMapGW}, [2]bool{true, true} }},
		{"--no-map-gw", func(c *config.Config) (any, any) { return c.NoMapGW, true }},
		{"--map-guest-addr fd00::2", func(c *config.Config) (any, any) { return c.MapGuestAddr6, netip.MustParseAddr("fd00::2") }},
		{"--map-guest-addr none", func(c *config.Config) (any, any) { return c.NoMapGuestAddr, true }},
		{"-t 22-80:32-90", func(c *config.Config) (any, any) { return tcpRules(c), "22->32" }},
		{"-t 192.0.2.1%eth0/22", func(c *config.Config) (any, any) { return hostRules(c)[0], "TCP [192.0.2.1]%eth0:22  =>  22" }},
		{"-t %eth0/22", func(c *config.Config) (any, any) { return hostRules(c)[0], "TCP [*]%eth0:22  =>  22" }},
		{"-t 0.0.0.0/5000:192.0.2.5/6000", func(c *config.Config) (any, any) { return hostRules(c)[0], "TCP [0.0.0.0]:5000  =>  192.0.2.5:6000" }},
		{"-t 2000-5000,~3000-3010", func(c *config.Config) (any, any) { return tcpRules(c), "2000->2000 3011->3011" }},
		{"-t ::1/auto", func(c *config.Config) (any, any) {
			return hostRules(c)[0], "TCP [::1]:1-49151  =>  1-49151  (best effort) (auto-scan)"
		}},
		{"-t 8000-8010,auto -u none", func(c *config.Config) (any, any) {
			return hostRules(c), []string{"TCP [*]:8000-8010  =>  8000-8010  (auto-scan)"}
		}},
		{"-t 22 -t 80", func(c *config.Config) (any, any) { return tcpRules(c), "22->22 80->80" }},
		{"-t */8080 -u none", func(c *config.Config) (any, any) { return hostRules(c), []string{"TCP [*]:8080  =>  8080"} }},
		{"-T */53 -T *%lo/54", func(c *config.Config) (any, any) {
			return [2]string{c.Ports.TCPNS[0].Value, c.Ports.TCPNS[1].Ifname}, [2]string{"*/53", "lo"}
		}},
		{"-t none -u none -T none -U none", func(c *config.Config) (any, any) {
			host, splice, err := c.Ports.Tables(fwdrule.AllCaps, fwdrule.DefaultEphemeral)
			return [3]any{len(host.Rules), len(splice.Rules), err}, [3]any{0, 0, nil}
		}},
		{"", func(c *config.Config) (any, any) {
			return [4]bool{c.Ports.TCP == nil, c.Ports.UDP == nil, c.Ports.TCPNS == nil, c.Ports.UDPNS == nil}, [4]bool{true, true, true, true}
		}},
		{"--no-tcp", func(c *config.Config) (any, any) { return c.Ports.TCP == nil, true }},
		{"--tcp-ports 22 --udp-ports 53 --tcp-ns 8080 --udp-ns 5353", func(c *config.Config) (any, any) {
			p := &c.Ports
			return [4]uint16{p.TCP[0].Includes[0].First, p.UDP[0].Includes[0].First, p.TCPNS[0].Includes[0].First, p.UDPNS[0].Includes[0].First},
				[4]uint16{22, 53, 8080, 5353}
		}},
		{"-I tap0", func(c *config.Config) (any, any) { return c.NSIfName, "tap0" }},
		{"--config-net --no-copy-routes --no-copy-addrs", func(c *config.Config) (any, any) {
			return [3]bool{c.ConfigNet, c.NoCopyRoutes, c.NoCopyAddrs}, [3]bool{true, true, true}
		}},
		{"--host-lo-to-ns-lo", func(c *config.Config) (any, any) { return c.HostLoToNSLo, true }},
		{"--no-splice", func(c *config.Config) (any, any) { return c.NoSplice, true }},
		{"--splice-only", func(c *config.Config) (any, any) { return c.SpliceOnly, true }},
		{"--vhost auto", func(c *config.Config) (any, any) { return c.Vhost, config.VhostAuto }},
		{"--vhost=on", func(c *config.Config) (any, any) { return c.Vhost, config.VhostOn }},
		{"--vhost off", func(c *config.Config) (any, any) { return c.Vhost, config.VhostOff }},
		{"--tap-napi", func(c *config.Config) (any, any) { return c.TapNAPI, true }},
	}
	for _, tt := range tests {
		c := mustParse(t, strings.Fields(tt.args)...)
		if got, want := tt.check(c); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %v, want %v", tt.args, got, want)
		}
	}
}

// TestBadInput: every option's error path gives exit status 1, exactly one
// line on stderr naming the option or the problem, and nothing on stdout.
// staleSocket is a socket file no one listens on, as a killed run leaves.
func staleSocket(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "stale")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	return p
}

// liveSocket is a socket file something listens on.
func liveSocket(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "live")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return p
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	live := liveSocket(t)
	tests := []struct {
		args string
		want string // substring of the stderr line
	}{
		{"--foo", "gopasta: unknown option --foo"},
		{"-x", "unknown option -x"},
		{"-fx", "unknown option -x"},
		{"--=1", "unknown option --"},
		{"--no-d", "ambiguous"},
		{"--quiet=1", "option --quiet takes no value"},
		{"--mtu", "option --mtu needs a value"},
		{"-m", "option -m (--mtu) needs a value"},
		{"--stats x", `invalid --stats value "x"`},
		{"--stats -1", `invalid --stats value "-1"`},
		{"-l ''", `invalid --log-file value "": empty path`},
		{"-p ''", `invalid --pcap value "": empty path`},
		{"-P ''", `invalid --pid value "": empty path`},
		{"-P /nonexistent/gopasta-cmdline/pid", `invalid --pid value "/nonexistent/gopasta-cmdline/pid": cannot use directory /nonexistent/gopasta-cmdline: no such file or directory`},
		{"-l /nonexistent/gopasta-cmdline/log", `invalid --log-file value "/nonexistent/gopasta-cmdline/log": cannot use directory /nonexistent/gopasta-cmdline`},
		{"--pcap=/nonexistent/gopasta-cmdline/pcap", `invalid --pcap value "/nonexistent/gopasta-cmdline/pcap": cannot use directory /nonexistent/gopasta-cmdline`},
		{"-P " + file + "/pid", `invalid --pid value "` + file + `/pid": cannot use directory ` + file + `: not a directory`},
		{"-P " + dir, `invalid --pid value "` + dir + `": is a directory`},
		{"-l " + dir + "/", `invalid --log-file value "` + dir + `/": is a directory`},
		{"-p " + strings.Repeat("x", 4096), `invalid --pcap value "xxx`},
		{"--log-size x", `invalid --log-size value "x"`},
		{"--log-size 100", "at least 40960"},
		{"--log-size 99999999999G", `invalid --log-size value`},
		{"--runas gopasta-cmdline-no-such-user", `invalid --runas value "gopasta-cmdline-no-such-user": no such user`},
		{"--runas root:gopasta-cmdline-no-such-group", "no such group"},
		{"--runas :0", `invalid --runas value ":0"`},
		{"--runas 0:", `invalid --runas value "0:"`},
		{"--runas 70000000000", `invalid --runas value "70000000000": user ids are 0 to 4294967294`},
		{"--runas 4294967295", `invalid --runas value "4294967295": user ids are 0 to 4294967294`},
		{"--runas 0:4294967295", `invalid --runas value "0:4294967295": group ids are 0 to 4294967294`},
		{"--runas 0:x-gopasta-no-such-group", `invalid --runas value "0:x-gopasta-no-such-group": no such group`},
		{"-m 60", `gopasta: invalid --mtu value "60": must be 0 or between 68 and 65520`},
		{"-m 70000", `invalid --mtu value "70000": must be 0 or between 68 and 65520`},
		{"-m 65521", `invalid --mtu value "65521"`},
		{"-m x", `invalid --mtu value "x"`},
		{"-m 0x", `invalid --mtu value "0x"`},
		{"-m 08", `invalid --mtu value "08"`}, // not octal
		{"-m -1", `invalid --mtu value "-1"`},
		{"-m 1_500", `invalid --mtu value "1_500"`},
		{"-m 0b101", `invalid --mtu value "0b101"`},
		{"-m 0o2734", `invalid --mtu value "0o2734"`},
		{"-m 1500x", `invalid --mtu value "1500x"`},
		{"-m 0x10000000000000000", `invalid --mtu value "0x10000000000000000"`},
		{"-m 01500", `invalid --mtu value "01500": read as 832, and IPv6 needs an MTU of at least 1280`},
		{"-n 0x21", `invalid --netmask value "0x21"`},
		{"--log-size 0x", `invalid --log-size value "0x"`},
		{"--log-size -0x100000", `invalid --log-size value "-0x100000"`},
		{"--runas 0x", `invalid --runas value "0x": no such user "0x"`},
		{"--runas -1", `invalid --runas value "-1": user ids are 0 to 4294967294`},
		{"--runas 0xffffffff", `invalid --runas value "0xffffffff": user ids are 0 to 4294967294`},
		{"--runas 0:-2", `invalid --runas value "0:-2": group ids are 0 to 4294967294`},
		{"-m 1000", "IPv6 needs an MTU of at least 1280"},
		{"-4 -6", "-4/--ipv4-only and -6/--ipv6-only cannot be used together"},
		{"-a notanip", `invalid --address value "notanip": not an IPv4 or IPv6 address`},
		{"-a 0.0.0.0", "unspecified"},
		{"-a 127.0.0.1", "loopback"},
		{"-a ::1", "loopback"},
		{"-a 224.0.0.1", "multicast"},
		{"-a 255.255.255.255", "broadcast"},
		{"-a ::ffff:192.0.2.1", "IPv4-mapped"},
		{"-a fe80::1%eth0", "not an IPv4 or IPv6 address"},
		{"-a 192.0.2.1/33", "prefix length must be between 1 and 32"},
		{"-a 192.0.2.1/x", `invalid --address value "192.0.2.1/x"`},
		{"-a [192.0.2.1", `invalid --address value "[192.0.2.1": not an IPv4 or IPv6 address`},
		{"-a []", `invalid --address value "[]": not an IPv4 or IPv6 address`},
		{"-a [[::1]]", `invalid --address value "[[::1]]": not an IPv4 or IPv6 address`},
		{"-a [2001:db8::5/64]", `invalid --address value "[2001:db8::5/64]"`},
		{"-n 33", `invalid --netmask value "33"`},
		{"-n 0", `invalid --netmask value "0"`},
		{"-n 255.0.255.0", "not a contiguous netmask"},
		{"-n foo", `invalid --netmask value "foo"`},
		// pasta refuses a prefix length given twice; taking one silently
		// would ignore the other.
		{"-a 192.0.2.5/24 -n 16", `-n/--netmask cannot be used with a prefix length in -a/--address (got "192.0.2.5/24")`},
		{"-n 16 -a 192.0.2.5/24", `-n/--netmask cannot be used with a prefix length in -a/--address (got "192.0.2.5/24")`},
		{"-n 255.255.0.0 -a 2001:db8::5 -a 192.0.2.5/24", `-n/--netmask cannot be used with a prefix length`},
		{"-M 9a:55:9a:55:9a", `invalid --mac-addr value "9a:55:9a:55:9a"`},
		{"-M 01:00:5e:00:00:01", "multicast MAC"},
		{"-M 00:00:00:00:00:00", "all-zero"},
		{"-M 9a-55-9a-55-9a-55", `invalid --mac-addr value`},
		{"--ns-mac-addr zz:55:9a:55:9a:55", `invalid --ns-mac-addr value "zz:55:9a:55:9a:55"`},
		{"-g notanip", `invalid --gateway value "notanip"`},
		{"-g 127.0.0.1", "loopback"},
		{"-i gpnosuchif0", `invalid --interface value "gpnosuchif0": no such interface`},
		{"-i a/b", `invalid --interface value "a/b"`},
		{"--outbound-if4 gpnosuchif0", `invalid --outbound-if4 value`},
		{"--outbound-if6 0123456789abcdef", `invalid --outbound-if6 value`},
		{"-o 0.0.0.0", `invalid --outbound value "0.0.0.0"`},
		{"-o ::1", `invalid --outbound value "::1"`},
		{"-H a..b", `invalid --hostname value "a..b"`},
		{"-H " + strings.Repeat("a", 65), `invalid --hostname value`},
		{"--fqdn a_b!", `invalid --fqdn value`},
		{"-D bad", `invalid --dns value "bad"`},
		{"-D ''", `invalid --dns value "": empty (none announces no name server)`},
		{"-D 192.0.2.53 -D ''", `invalid --dns value ""`},
		{"-S ''", `invalid --search value "": empty (none announces no search domain)`},
		{"-D 0.0.0.0", `invalid --dns value "0.0.0.0"`},
		{"--dns-forward 127.0.0.1", `invalid --dns-forward value "127.0.0.1": loopback`},
		{"--dns-forward x", `invalid --dns-forward value "x"`},
		{"--dns-host ::", `invalid --dns-host value "::"`},
		{"-S bad/domain", `invalid --search value "bad/domain"`},
		{"--dhcp-dns --no-dhcp-dns", "cannot be used together"},
		{"--dhcp-search --no-dhcp-search", "cannot be used together"},
		{"--map-host-loopback 127.0.0.1", `invalid --map-host-loopback value "127.0.0.1"`},
		{"--map-guest-addr nope", `invalid --map-guest-addr value "nope"`},
		{"-t 70000", `invalid --tcp-ports value "70000"`},
		{"-t 5-3", `invalid --tcp-ports value "5-3"`},
		{"-t 22 -t 0", `invalid --tcp-ports value "0"`},
		{"-t 22-80:32-33", `invalid --tcp-ports value "22-80:32-33"`},
		{"-u x", `invalid --udp-ports value "x"`},
		{"-T 1-2-3", `invalid --tcp-ns value "1-2-3"`},
		{"-U ,", `invalid --udp-ns value ","`},
		{"--no-tcp -t 22", "--tcp-ports given but --no-tcp disables TCP"},
		{"--no-udp -U 53", "--udp-ns given but --no-udp disables UDP"},
		{"-I a:b", `invalid --ns-ifname value "a:b"`},
		{"-I 0123456789abcdef", `invalid --ns-ifname value`},
		{"--no-copy-routes", "--no-copy-routes needs --config-net"},
		{"--no-copy-addrs", "--no-copy-addrs needs --config-net"},
		{"--no-splice --splice-only", "cannot be used together"},
		{"--no-splice --host-lo-to-ns-lo", "--host-lo-to-ns-lo cannot be used with --no-splice"},
		{"--vhost maybe", `invalid --vhost value "maybe": must be auto, on or off`},
		{"-c ''", `invalid --conf-path value "": invalid configuration path (1 to 107 bytes)`},
		{"-c /tmp/" + strings.Repeat("s", 103), `invalid --conf-path value "/tmp/sss`}, // 108 bytes
		{"--conf-path /nonexistent/gopasta-cmdline/ctl", `invalid --conf-path value "/nonexistent/gopasta-cmdline/ctl": cannot use directory /nonexistent/gopasta-cmdline: no such file or directory`},
		{"-c " + live, `invalid --conf-path value "` + live + `": already in use`},
		{"-c " + file, "exists and is not a socket"},
		{"--netns /nonexistent/gopasta-cmdline", `invalid --netns value "/nonexistent/gopasta-cmdline": no such file`},
		{"--netns gopasta-cmdline-no-such-ns", `invalid --netns value "gopasta-cmdline-no-such-ns": no such file (/run/netns/gopasta-cmdline-no-such-ns)`},
		{"--netns foo/bar", `invalid --netns value "foo/bar": no such file`},
		{"--netns ..", `invalid --netns value ".."`},
		{"--netns " + file + " sh", "--netns cannot be combined with a PID or a command"},
		{"--netns " + file + " " + pid, "--netns cannot be combined"},
		{"--userns /nonexistent/gopasta-cmdline " + pid, `invalid --userns value`},
		{"--userns " + file + " sh", `invalid --userns value "` + file + `": not a namespace file`},
		{"--fd abc " + pid, `invalid --fd value "abc": not a descriptor number`},
		{"--fd -1 " + pid, `invalid --fd value "-1"`},
		{"--fd 2147483648 " + pid, `invalid --fd value "2147483648"`},
		{"--fd 3 sh", "--fd needs a PID or --netns"},
		{"--fd 3", "--fd needs a PID or --netns"},
		{"--fd 3 --splice-only " + pid, "--fd cannot be combined with --splice-only"},
		{"--fd 3 --vhost on " + pid, "--fd cannot be combined with --vhost=on"},
		{"--userns /proc/self/ns/net sh", `invalid --userns value "/proc/self/ns/net": not a user namespace`},
		{"999999999", `invalid PID "999999999": no such process`},
		{"0", `invalid PID "0"`},
		{"99999999999999999999", `invalid PID "99999999999999999999"`},
	}
	var lines []string
	for _, tt := range tests {
		args := strings.Fields(tt.args)
		for i, a := range args {
			if a == "''" {
				args[i] = ""
			}
		}
		var stdout, stderr bytes.Buffer
		ran := false
		code := Main(append([]string{"gopasta"}, args...), &stdout, &stderr, func(*config.Config) (int, error) { ran = true; return 0, nil })
		if code != 1 {
			t.Errorf("%s: got exit status %d, want 1 (stderr %q)", tt.args, code, stderr.String())
		}
		if ran {
			t.Errorf("%s: run was called", tt.args)
		}
		if stdout.Len() != 0 {
			t.Errorf("%s: got stdout %q, want nothing", tt.args, stdout.String())
		}
		line := stderr.String()
		if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") || !strings.HasPrefix(line, "gopasta: ") {
			t.Errorf("%s: got stderr %q, want one line starting with \"gopasta: \"", tt.args, line)
		}
		if !strings.Contains(line, tt.want) {
			t.Errorf("%s: got stderr %q, want it to contain %q", tt.args, line, tt.want)
		}
		lines = append(lines, line)
	}
	// Every option that takes a value has a case above whose error names
	// it; options without one are covered by TestFlagErrors.
	for _, f := range NewApp(nil).Flags {
		name := f.Names()[0]
		if dg, ok := f.(cli.DocGenerationFlag); !ok || !dg.TakesValue() {
			continue
		}
		named := false
		for _, l := range lines {
			if strings.Contains(l, "--"+name+" ") || strings.Contains(l, "--"+name+"/") || strings.Contains(l, "/--"+name+" ") {
				named = true
				break
			}
		}
		if !named {
			t.Errorf("--%s: no case here gets an error naming it, want at least one", name)
		}
	}
}

// TestFlagErrors: the errors every option has whatever it is, one line each:
// a value given to an option that takes none, a missing value, and an
// option given as a single dash long name.
func TestFlagErrors(t *testing.T) {
	for _, f := range NewApp(nil).Flags {
		names := f.Names()
		long := names[0]
		var short string
		if len(names) > 1 && len(names[1]) == 1 {
			short = names[1]
		}
		takes := false
		if dg, ok := f.(cli.DocGenerationFlag); ok {
			takes = dg.TakesValue()
		}
		type tc struct {
			args []string
			want string
		}
		var cases []tc
		if takes {
			cases = append(cases, tc{[]string{"--" + long}, "gopasta: option --" + long + " needs a value\n"})
			if short != "" {
				cases = append(cases, tc{[]string{"-q" + short}, "gopasta: option -" + short + " (--" + long + ") needs a value\n"})
			}
		} else {
			cases = append(cases,
				tc{[]string{"--" + long + "=1"}, "gopasta: option --" + long + " takes no value\n"},
				tc{[]string{"--" + long + "="}, "gopasta: option --" + long + " takes no value\n"})
		}
		for _, c := range cases {
			var stdout, stderr bytes.Buffer
			ran := false
			code := Main(append([]string{"gopasta"}, c.args...), &stdout, &stderr, func(*config.Config) (int, error) { ran = true; return 0, nil })
			if code != 1 || ran || stdout.Len() != 0 || stderr.String() != c.want {
				t.Errorf("%q: got exit %d ran %v stdout %q stderr %q, want 1 false \"\" %q", c.args, code, ran, stdout.String(), stderr.String(), c.want)
			}
		}
	}
}

func TestErrorTypes(t *testing.T) {
	_, err := Parse([]string{"--bogus"})
	if !errors.Is(err, ErrUnknownOption) {
		t.Errorf("--bogus: got %v, want ErrUnknownOption", err)
	}
	_, err = Parse([]string{"-m", "60"})
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Option != "--mtu" || oe.Value != "60" {
		t.Errorf("-m 60: got %#v, want *OptionError for --mtu \"60\"", err)
	}
	_, err = Parse([]string{"-4", "-6"})
	var ue *UsageError
	if !errors.As(err, &ue) {
		t.Errorf("-4 -6: got %T, want *UsageError", err)
	}
}

func TestMainExitStatus(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		err        error
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"run status passes through", []string{"sh"}, 7, nil, 7, "", ""},
		{"run error", []string{"sh"}, 0, errors.New("cannot open /dev/net/tun: permission denied"), 1, "", "gopasta: cannot open /dev/net/tun: permission denied\n"},
		{"run error with status", []string{"sh"}, 3, errors.New("boom\nsecond line"), 3, "", "gopasta: boom second line\n"},
		{"version", []string{"--version"}, 0, nil, 0, "gopasta " + Version + "\n", ""},
		{"version wins over a command", []string{"--version", "sh"}, 0, nil, 0, "gopasta " + Version + "\n", ""},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"gopasta"}, tt.args...), &stdout, &stderr, func(*config.Config) (int, error) { return tt.code, tt.err })
		if code != tt.wantCode || stdout.String() != tt.wantStdout || stderr.String() != tt.wantStderr {
			t.Errorf("%s: got %d %q %q, want %d %q %q", tt.name, code, stdout.String(), stderr.String(), tt.wantCode, tt.wantStdout, tt.wantStderr)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "--he"} {
		var stdout, stderr bytes.Buffer
		ran := false
		code := Main([]string{"gopasta", "-q", arg, "--bogus-after-help-is-not-read"}, &stdout, &stderr, func(*config.Config) (int, error) { ran = true; return 0, nil })
		// As with pasta's getopt loop, help is shown as soon as it is
		// read; what follows is not looked at.
		if code != 0 || ran {
			t.Errorf("%s then bogus: got %d ran %v, want 0 false", arg, code, ran)
		}
		stdout.Reset()
		stderr.Reset()
		code = Main([]string{"gopasta", arg}, &stdout, &stderr, func(*config.Config) (int, error) { ran = true; return 0, nil })
		if code != 0 || ran || stderr.Len() != 0 {
			t.Errorf("%s: got code %d ran %v stderr %q, want 0 false empty", arg, code, ran, stderr.String())
		}
		out := stdout.String()
		for _, want := range []string{"Usage: gopasta", "-m, --mtu MTU", "--map-guest-addr ADDR", "--vhost MODE", "-h, --help"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: help lacks %q", arg, want)
			}
		}
	}
}

func TestFlagsMatchDocs(t *testing.T) {
	// Every short option pasta has in pasta mode, and the long names.
	app := NewApp(nil)
	shorts := map[string]bool{}
	longs := map[string]bool{}
	for _, d := range FlagDocs(app) {
		if d.Short != "" {
			if shorts[d.Short] {
				t.Errorf("short option -%s defined twice", d.Short)
			}
			shorts[d.Short] = true
		}
		longs[d.Long] = true
	}
	for _, s := range strings.Split("d q f e l p P c m a n M g i o D S 4 6 t u T U I H", " ") {
		if !shorts[s] {
			t.Errorf("short option -%s missing", s)
		}
	}
	for _, l := range strings.Fields(`debug trace stats quiet foreground stderr log-file log-size runas pcap pid conf-path version
		mtu address netmask mac-addr gateway interface outbound outbound-if4 outbound-if6 hostname fqdn
		dns dns-forward dns-host search dhcp-dns no-dhcp-dns dhcp-search no-dhcp-search
		no-tcp no-udp no-icmp no-dhcp no-ndp no-dhcpv6 no-ra freebind ipv4-only ipv6-only
		map-host-loopback no-map-gw map-guest-addr tcp-ports udp-ports tcp-ns udp-ns
		ns-ifname userns netns netns-only no-netns-quit config-net no-copy-routes no-copy-addrs
		ns-mac-addr host-lo-to-ns-lo no-splice splice-only vhost tap-napi`) {
		if !longs[l] {
			t.Errorf("long option --%s missing", l)
		}
	}
	if len(FlagDocs(app)) != len(app.Flags) {
		t.Errorf("FlagDocs: got %d options, want %d (a flag has no category?)", len(FlagDocs(app)), len(app.Flags))
	}
}

// TestLongValues: however long a value, its error line stays readable and
// still says what is wrong, and elision splits no UTF-8 character.
func TestLongValues(t *testing.T) {
	var ports []string
	for p := 1; p <= 18000; p++ {
		ports = append(ports, fmt.Sprint(p))
	}
	list := strings.Join(ports, ",")
	short := strings.Join(ports[:200], ",") // within a table's 255 rules
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"-t", list + ",5"}, []string{`invalid --tcp-ports value "1,2,3,`, `,17999,18000,5" (`, "Too many rules (maximum 255)"}},
		{[]string{"-t", short + ",5"}, []string{`invalid --tcp-ports value "1,2,3,`, `,199,200,5" (`, `port 5 is already forwarded by "1,2,3,`}},
		{[]string{"-t", list + ",x"}, []string{`invalid --tcp-ports value "1,2,`, `"x" is not a port number`}},
		{[]string{"-H", strings.Repeat("é", 300)}, []string{`invalid --hostname value "éé`, "(600 bytes)", "names are 1 to 64 characters"}},
		{[]string{"--netns", "/nonexistent/x", strings.Repeat("é", 3000)}, []string{"--netns cannot be combined with a PID or a command", "[...]"}},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"gopasta"}, tt.args...), &stdout, &stderr, func(*config.Config) (int, error) { return 0, nil })
		line := stderr.String()
		if code != 1 || strings.Count(line, "\n") != 1 || len(line) > maxLine+len("gopasta: \n") || !utf8.ValidString(line) {
			t.Errorf("%.40q: got exit %d and a %d-byte stderr %.300q, want 1 and one valid UTF-8 line of at most %d bytes", tt.args, code, len(line), line, maxLine)
		}
		for _, w := range tt.want {
			if !strings.Contains(line, w) {
				t.Errorf("%.40q: got %.300q, want it to contain %q", tt.args, line, w)
			}
		}
	}
}

// TestRepeatableValuesExact: the values of repeatable options reach their
// parsers byte for byte, as the others do, bytes that are not UTF-8
// included (an interface name may hold any byte but '/', ':' and spaces).
func TestRepeatableValuesExact(t *testing.T) {
	c := mustParse(t, "-t", "%\xff/22", "-T", "%e\xe9/23")
	if got, want := c.Ports.TCP[0].Ifname, "\xff"; got != want {
		t.Errorf("-t %%\\xff/22: got interface %q, want %q", got, want)
	}
	if got, want := c.Ports.TCPNS[0].Ifname, "e\xe9"; got != want {
		t.Errorf("-T %%e\\xe9/23: got interface %q, want %q", got, want)
	}
	_, err := Parse([]string{"-D", "192.0.2.\xff"})
	if got, want := fmt.Sprint(err), `invalid --dns value "192.0.2.\xff": not an IPv4 or IPv6 address`; got != want {
		t.Errorf("-D 192.0.2.\\xff: got error %q, want %q", got, want)
	}
}
