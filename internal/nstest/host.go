package nstest

// The throwaway "host" network namespace (HostNS) and the commands run
// inside it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Host is a throwaway network namespace standing in for the machine gopasta
// runs on. Its template interface is "eth0" (one end of a veth pair; the
// other end, "peer0", stays in the same namespace so the link is up) with
//
//	192.0.2.1/24, 2001:db8::1/64 (nodad)
//	default via 192.0.2.254, default via 2001:db8::fe (both onlink)
//
// and lo up. Nothing answers at the gateways: tests that need a peer add one.
type Host struct {
	t    testing.TB
	name string
	// netOnly: commands join only the network namespace (NetOnly).
	netOnly bool
}

// Fixture values, for assertions.
const (
	HostIfName  = "eth0"
	HostAddr4   = "192.0.2.1"
	HostPrefix4 = 24
	HostGW4     = "192.0.2.254"
	HostAddr6   = "2001:db8::1"
	HostPrefix6 = 64
	HostGW6     = "2001:db8::fe"
	// PeerIfName is the other end of the veth pair, also in the namespace.
	PeerIfName = "peer0"
)

// DefaultTimeout bounds every command a Host runs unless the caller gives
// its own context.
const DefaultTimeout = 60 * time.Second

// UniqueName returns prefix-<pid>-<random hex>, short enough for netns and
// file names, unique across the concurrent test runs sharing this machine.
func UniqueName(prefix string) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return fmt.Sprintf("%s-%d-%s", prefix, os.Getpid(), hex.EncodeToString(b[:]))
}

// HostOptions varies the fixture. The zero value is HostNS's.
type HostOptions struct {
	// LinkLocalGW6 routes IPv6 through HostGW6LinkLocal (fe80::1 on eth0)
	// instead of HostGW6, as on hosts whose router is only known by its
	// link-local address (the usual case with SLAAC).
	LinkLocalGW6 bool
	// NoIPv4, NoIPv6 leave that family's address and default route out:
	// a single-family host.
	NoIPv4, NoIPv6 bool
}

// HostGW6LinkLocal is the IPv6 gateway with HostOptions.LinkLocalGW6.
const HostGW6LinkLocal = "fe80::1"

// HostNS creates the fixture namespace, skipping the test unless root, and
// deletes it (after killing every process the Host started) in t.Cleanup.
func HostNS(t testing.TB) *Host {
	t.Helper()
	return HostNSWith(t, HostOptions{})
}

// HostNSWith is HostNS with options.
func HostNSWith(t testing.TB, o HostOptions) *Host {
	t.Helper()
	RequireRoot(t)
	h := &Host{t: t, name: UniqueName("nstest")}
	if err := runHostCmd("ip", "netns", "add", h.name); err != nil {
		t.Fatalf("creating host netns: %v", err)
	}
	t.Cleanup(func() {
		if err := runHostCmd("ip", "netns", "del", h.name); err != nil {
			t.Errorf("deleting host netns %s: %v", h.name, err)
		}
	})
	n := h.name
	gw6 := HostGW6
	if o.LinkLocalGW6 {
		gw6 = HostGW6LinkLocal
	}
	steps := [][]string{
		{"ip", "-n", n, "link", "set", "lo", "up"},
		{"ip", "-n", n, "link", "add", HostIfName, "type", "veth", "peer", "name", PeerIfName},
	}
	if !o.NoIPv4 {
		steps = append(steps, []string{"ip", "-n", n, "addr", "add", fmt.Sprintf("%s/%d", HostAddr4, HostPrefix4), "dev", HostIfName})
	}
	if !o.NoIPv6 {
		// nodad: a tentative address is not copied by gopasta and not
		// usable, and DAD would make every test wait a second or more.
		steps = append(steps, []string{"ip", "-n", n, "addr", "add", fmt.Sprintf("%s/%d", HostAddr6, HostPrefix6), "dev", HostIfName, "nodad"})
	}
	steps = append(steps,
		[]string{"ip", "-n", n, "link", "set", HostIfName, "up"},
		[]string{"ip", "-n", n, "link", "set", PeerIfName, "up"})
	// onlink: the gateways are inside the prefixes anyway, but the
	// kernel refuses a v6 gateway while the link is still coming up.
	if !o.NoIPv4 {
		steps = append(steps, []string{"ip", "-n", n, "route", "add", "default", "via", HostGW4, "dev", HostIfName, "onlink"})
	}
	if !o.NoIPv6 {
		steps = append(steps, []string{"ip", "-n", n, "-6", "route", "add", "default", "via", gw6, "dev", HostIfName, "onlink"})
	}
	for _, s := range steps {
		if err := runHostCmd(s...); err != nil {
			t.Fatalf("setting up host netns: %v", err)
		}
	}
	return h
}

// NetOnly is h with commands that join only its network namespace
// (nsenter --net) and keep the caller's mounts. `ip netns exec` also gives
// them a mount namespace with a /sys of the network namespace's own, which
// lacks the host's cgroup mounts that container runtimes (runc) need.
func (h *Host) NetOnly() *Host {
	c := *h
	c.netOnly = true
	return &c
}

// Name is the netns name (under /run/netns).
func (h *Host) Name() string { return h.name }

// Path is the netns file.
func (h *Host) Path() string { return "/run/netns/" + h.name }

// Command returns argv as a command running inside the namespace as u. It
// leads its own process group so cleanup can kill whatever it forked, and
// context cancellation kills that group. `ip netns exec` and setpriv both
// exec, so cmd.Process.Pid is argv's own PID once it runs.
func (h *Host) Command(ctx context.Context, u User, argv ...string) *exec.Cmd {
	full := append([]string{"ip", "netns", "exec", h.name}, u.wrap(argv)...)
	if h.netOnly {
		full = append([]string{"nsenter", "--net=" + h.Path(), "--"}, u.wrap(argv)...)
	}
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	prepare(cmd, u)
	return cmd
}

// Run runs argv inside the namespace as u, bounded by DefaultTimeout, and
// returns what it printed and how it ended. A non-zero exit is not an error
// here; callers check Result.Code.
func (h *Host) Run(u User, argv ...string) Result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	return h.RunContext(ctx, u, argv...)
}

// RunContext is Run with the caller's deadline.
func (h *Host) RunContext(ctx context.Context, u User, argv ...string) Result {
	h.t.Helper()
	p := h.startCmd(ctx, h.Command(ctx, u, argv...))
	return p.wait()
}

// Start runs argv in the background inside the namespace as u. The process
// group is killed in t.Cleanup if still there.
func (h *Host) Start(u User, argv ...string) *Proc {
	h.t.Helper()
	ctx := context.Background()
	return h.startCmd(ctx, h.Command(ctx, u, argv...))
}

func (h *Host) startCmd(ctx context.Context, cmd *exec.Cmd) *Proc {
	h.t.Helper()
	p, err := start(ctx, cmd)
	if err != nil {
		h.t.Fatalf("starting %q: %v", cmd.Args, err)
	}
	h.t.Cleanup(p.kill)
	return p
}

// KillOnCleanup makes t.Cleanup SIGKILL pid, for processes the test did not
// start itself (daemons found through a pid file).
func (h *Host) KillOnCleanup(pid int) {
	KillOnCleanup(h.t, pid)
}

func runHostCmd(argv ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
