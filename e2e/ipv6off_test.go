package e2e

// IPv6 switched off on the host or in the namespace (issue 44 row 7):
// gopasta runs IPv4 only, says so once, and serves IPv4.

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// isGopasta says whether the binary under test is gopasta, not pasta
// (GOPASTA_BIN), for the checks of what gopasta does where pasta differs.
func isGopasta(t *testing.T, e *env) bool {
	t.Helper()
	r := nstest.Run(t, nstest.RootUser, e.bin, "--version")
	return strings.HasPrefix(r.Stdout, "gopasta")
}

// ipv6OffLine matches gopasta's line saying IPv6 is off.
var ipv6OffLine = regexp.MustCompile(`IPv6 is off .*: IPv4 only`)

// startIPv6OffSleeper is startSleeper with IPv6 switched off in the new
// namespace (net.ipv6.conf.all.disable_ipv6, which its owner may set).
func (e *env) startIPv6OffSleeper(t *testing.T) *nstest.Proc {
	t.Helper()
	p := e.h.Start(e.u, "unshare", "-Urn", "sh", "-c", "echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6 && exec sleep 300")
	err := nstest.WaitFor(5*time.Second, func() error {
		select {
		case <-p.Done():
			o, er := p.Output()
			return nstest.Stop(fmt.Errorf("exited: %s %s", o, er))
		default:
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.PID()))
		if got := strings.TrimSpace(string(b)); err != nil || got != "sleep" {
			return fmt.Errorf("comm %q (%v), want sleep", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sleeper with IPv6 off, as %s: %v", e.u.Name, err)
	}
	return p
}

// attachFG runs gopasta -f --config-net with args against pid's network
// namespace the way podman runs pasta (inside pid's user namespace,
// --netns).
func (e *env) attachFG(pid int, args ...string) *nstest.Proc {
	return e.h.Start(e.u, slices.Concat([]string{"nsenter", "-t", strconv.Itoa(pid), "-U", "--preserve-credentials", "--"},
		e.gopasta(slices.Concat([]string{"-f", "--config-net"}, args, []string{"--netns", fmt.Sprintf("/proc/%d/ns/net", pid)})...))...)
}

// TestIPv6OffHost: a host whose IPv6 is switched off
// (net.ipv6.conf.all.disable_ipv6 in its network namespace) gives the
// namespace IPv4 only, in one line, and IPv4 works; -6 cannot work there
// and is refused.
func TestIPv6OffHost(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			if r := e.h.Run(nstest.RootUser, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"); r.Code != 0 {
				t.Fatalf("sysctl: %s", r)
			}
			pid := e.startSleeper(t).PID()
			checkIPv6Off(t, e, pid)
		})
	}
}

// TestIPv6OffNamespace: a namespace whose IPv6 is switched off gets IPv4
// only, in one line, and IPv4 works, where configuring its IPv6 would
// fail (EACCES); -6 leaves nothing to run and is refused.
func TestIPv6OffNamespace(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{peers: true})
			pid := e.startIPv6OffSleeper(t).PID()
			checkIPv6Off(t, e, pid)
		})
	}
}

// checkIPv6Off attaches to pid's namespace and checks an IPv4-only run.
func checkIPv6Off(t *testing.T, e *env, pid int) {
	t.Helper()
	fg := e.attachFG(pid, "-d")
	links := linksOfPID(e, pid)
	err := nstest.WaitFor(10*time.Second, func() error {
		select {
		case <-fg.Done():
			r, _ := fg.Wait(0)
			return nstest.Stop(fmt.Errorf("exited before configuring the namespace: %s", r))
		default:
		}
		ls, err := links()
		if err != nil {
			return err
		}
		l, ok := nstest.FindLink(ls, nstest.HostIfName)
		if !ok || !slices.Contains(l.GlobalAddrs(), "192.0.2.1/24") {
			return fmt.Errorf("links: got %v, want %s with 192.0.2.1/24", ls, nstest.HostIfName)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("gopasta: %v", err)
	}

	// IPv4 is served: a transfer to a host address through the gateway.
	port := e.serveTCP(t, ":0", "")
	ag := e.startAgentIn(t, pid)
	if _, err := ag.do(15*time.Second, "put", net.JoinHostPort(peer4, strconv.Itoa(port)), "65536", "3"); err != nil {
		t.Errorf("IPv4 transfer from the namespace: %v", err)
	}

	if !isGopasta(t, e) {
		t.Logf("%s is not gopasta: IPv6's absence in the namespace, the line and -6 not checked", e.bin)
		return
	}
	ls, err := links()
	if err != nil {
		t.Fatal(err)
	}
	l, _ := nstest.FindLink(ls, nstest.HostIfName)
	if got := l.GlobalAddrs(); !slices.Equal(got, []string{"192.0.2.1/24"}) {
		t.Errorf("%s addresses: got %v, want 192.0.2.1/24 only", l.IfName, got)
	}
	if r := e.h.Run(e.u, nsenterArgs(pid, "ip", "-6", "route", "show", "default")...); r.Code != 0 || strings.TrimSpace(r.Stdout) != "" {
		t.Errorf("IPv6 default route in the namespace: got %q (%s), want none", r.Stdout, r)
	}
	_, stderr := fg.Output()
	if n := len(ipv6OffLine.FindAllString(stderr, -1)); n != 1 {
		t.Errorf("stderr: got %d lines matching %q, want 1:\n%s", n, ipv6OffLine, stderr)
	}
	// -6 has nothing to run on.
	r := e.runArgv(t, slices.Concat([]string{"nsenter", "-t", strconv.Itoa(pid), "-U", "--preserve-credentials", "--"},
		e.gopasta("-6", "-f", "--config-net", "--no-netns-quit", "-I", "tap6", "--netns", fmt.Sprintf("/proc/%d/ns/net", pid)))...)
	if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); r.Code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "--ipv6-only") {
		t.Errorf("-6 without IPv6: got exit %d, stderr %q; want 1 and one line naming --ipv6-only", r.Code, r.Stderr)
	}
}
