package ns

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestIPv6Probe checks each way IPv6 can be missing, with the probe's
// inputs replaced: the kernel's lack of it cannot be made on a machine
// that has it.
func TestIPv6Probe(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if v, ok := m[p]; ok {
				return []byte(v), nil
			}
			return nil, &os.PathError{Op: "open", Path: p, Err: unix.ENOENT}
		}
	}
	const all, tap = "/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/eth0/disable_ipv6"
	for _, tc := range []struct {
		name      string
		socketErr error
		files     map[string]string
		host      string // want, substring; "" for none
		link      string
	}{
		{name: "on", files: map[string]string{all: "0\n", tap: "0\n"}},
		{name: "no-sockets", socketErr: unix.EAFNOSUPPORT, host: "no IPv6 sockets: address family not supported", link: "no IPv6 in the kernel"},
		{name: "all-disabled", files: map[string]string{all: "1\n", tap: "1\n"}, host: "net.ipv6.conf.all.disable_ipv6 = 1", link: "net.ipv6.conf.eth0.disable_ipv6 = 1"},
		{name: "link-disabled", files: map[string]string{all: "0\n", tap: "1\n"}, link: "net.ipv6.conf.eth0.disable_ipv6 = 1"},
		{name: "no-link-dir", files: map[string]string{all: "0\n"}},
	} {
		p := ipv6Probe{socket: func() error { return tc.socketErr }, readFile: files(tc.files)}
		for _, c := range []struct {
			what, got, want string
		}{{"host", p.hostOff(), tc.host}, {"link", p.disabled("eth0"), tc.link}} {
			if (c.got == "") != (c.want == "") || !strings.Contains(c.got, c.want) {
				t.Errorf("%s: %s: got %q, want %q", tc.name, c.what, c.got, c.want)
			}
		}
	}
}

// TestIPv6ProbeInNamespace checks the probes against a real kernel, from
// a thread in a throwaway namespace: on by default, off once
// net.ipv6.conf.all.disable_ipv6 is set there, and the namespace the test
// started in is not affected.
func TestIPv6ProbeInNamespace(t *testing.T) {
	h := nstest.HostNS(t)
	th, err := Enter(h.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	probe := func() (host, link string) {
		th.Do(func() error {
			host, link = HostIPv6Off(), LinkIPv6Off(nstest.HostIfName)
			return nil
		})
		return host, link
	}
	if host, link := probe(); host != "" || link != "" {
		t.Fatalf("IPv6 on: got host %q, link %q, want both empty", host, link)
	}
	if r := h.Run(nstest.RootUser, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"); r.Code != 0 {
		t.Fatalf("sysctl: %s", r)
	}
	host, link := probe()
	if want := "net.ipv6.conf.all.disable_ipv6 = 1"; host != want {
		t.Errorf("all.disable_ipv6 set: got host %q, want %q", host, want)
	}
	if want := "net.ipv6.conf." + nstest.HostIfName + ".disable_ipv6 = 1"; link != want {
		t.Errorf("all.disable_ipv6 set: got link %q, want %q", link, want)
	}
	if here := LinkIPv6Off("lo"); strings.Contains(here, "disable_ipv6") && HostIPv6Off() == "" {
		t.Errorf("the test's own namespace: got lo %q, want its own setting, not the other namespace's", here)
	}
}
