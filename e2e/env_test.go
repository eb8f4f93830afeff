package e2e

// The fixture: a fresh host network namespace with documentation addresses
// (internal/nstest.Host), the identity gopasta runs as, the binaries, and
// the host side of the peer: servers and dials on sockets of the host
// namespace, in this process (nstest.Host.Do).

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// runTimeout bounds one gopasta run that is meant to finish by itself.
const runTimeout = 60 * time.Second

// Second host addresses (hostSetup.peers), on peer0, for host peers that
// reach the namespace over the TAP: the host's own 192.0.2.1 is the
// namespace's address too (--config-net copies it), so the namespace would
// see it as the gateway instead.
const (
	peer4 = "198.51.100.1"
	peer6 = "2001:db8:1::1"
	ns4   = nstest.HostAddr4 // the namespace's address (copied)
	ns6   = nstest.HostAddr6
)

// hostSetup varies the host namespace; the zero value is nstest.HostNS's.
type hostSetup struct {
	linkLocalGW6 bool // IPv6 default route via fe80::1 (nstest.HostOptions)
	ping         bool // ping sockets allowed for every group
	peers        bool // peer4 and peer6 on peer0
	noIPv4       bool // an IPv6-only host (nstest.HostOptions)
	noIPv6       bool // an IPv4-only host
}

// env is one test's host namespace, the identity gopasta runs as there, and
// the binaries.
type env struct {
	h    *nstest.Host
	u    nstest.User
	bin  string // gopasta
	self string // this test binary, where every identity can run it: the peer
	// gopastaEnv, when set, is extra environment for gopasta (through env(1)).
	gopastaEnv []string
}

// newEnv skips unless the test runs as root (for the host namespace) and u
// can use the TAP and user namespaces, then sets up a host namespace.
func newEnv(t *testing.T, u nstest.User, s hostSetup) *env {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTun(t, u)
	nstest.RequireUserNS(t, u)
	e := &env{u: u, bin: nstest.Binary(t), self: nstest.SelfBinary(t)}
	e.h = nstest.HostNSWith(t, nstest.HostOptions{LinkLocalGW6: s.linkLocalGW6, NoIPv4: s.noIPv4, NoIPv6: s.noIPv6})
	if s.ping {
		e.h.AllowPing()
	}
	if s.peers {
		for _, a := range [][]string{{peer4 + "/24"}, {peer6 + "/64", "nodad"}} {
			args := slices.Concat([]string{"ip", "-n", e.h.Name(), "addr", "add", a[0], "dev", nstest.PeerIfName}, a[1:])
			if r := nstest.Run(t, nstest.RootUser, args...); r.Code != 0 {
				t.Fatalf("%q: %s", args, r)
			}
		}
	}
	return e
}

// gopasta is the command line running gopasta with args.
func (e *env) gopasta(args ...string) []string {
	if len(e.gopastaEnv) > 0 {
		return slices.Concat([]string{"env"}, e.gopastaEnv, []string{e.bin}, args)
	}
	return append([]string{e.bin}, args...)
}

// peer is the command line running the peer commands cmds.
func (e *env) peer(cmds ...string) []string { return peerArgv(e.self, cmds...) }

// run runs gopasta with args inside the host namespace and waits for it.
func (e *env) run(t *testing.T, args ...string) nstest.Result {
	t.Helper()
	return e.runArgv(t, e.gopasta(args...)...)
}

// runArgv runs argv inside the host namespace as e.u and waits for it,
// bounded by runTimeout.
func (e *env) runArgv(t *testing.T, argv ...string) nstest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	r := e.h.RunContext(ctx, e.u, argv...)
	if r.TimedOut {
		t.Fatalf("%q: got no exit within %v, want it to finish\n%s", argv, runTimeout, r)
	}
	checkNoPanic(t, r)
	return r
}

// start runs gopasta with args in the background.
func (e *env) start(t *testing.T, args ...string) *nstest.Proc {
	t.Helper()
	return e.h.Start(e.u, e.gopasta(args...)...)
}

// checkNoPanic fails the test when output looks like a Go runtime crash.
func checkNoPanic(t *testing.T, r nstest.Result) {
	t.Helper()
	for _, s := range []string{r.Stdout, r.Stderr} {
		if strings.Contains(s, "panic:") || strings.Contains(s, "goroutine ") {
			t.Errorf("output: got a Go panic/stack trace, want none:\n%s", s)
		}
	}
}

// mustSucceed fails unless r exited 0.
func mustSucceed(t *testing.T, what string, r nstest.Result) {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("%s: got exit %d, want 0\n%s", what, r.Code, r)
	}
}

// wantDone checks that the peer's output out has a line "CMD ok ..." for
// each of cmds.
func wantDone(t *testing.T, out string, cmds ...string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for _, c := range cmds {
		if !slices.ContainsFunc(lines, func(l string) bool { return l == c+" ok" || strings.HasPrefix(l, c+" ok ") }) {
			t.Errorf("peer output: got %q, want a line %q", out, c+" ok")
		}
	}
}

// shellJoin quotes argv for sh -c (single quotes; the arguments here never
// contain one).
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + a + "'"
	}
	return strings.Join(q, " ")
}

// addrPort is addr:port.
func addrPort(addr string, port int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(port))
}

// serveTCP serves the transfer protocol on addr in the host namespace until
// the test ends and returns the port; 'S' streams report to dir.
func (e *env) serveTCP(t *testing.T, addr, dir string) int {
	t.Helper()
	l, err := e.h.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("transfer server on %s in the host namespace: %v", addr, err)
	}
	go serveTCP(l, dir)
	return l.Addr().(*net.TCPAddr).Port
}

// serveUDP opens a UDP echo on addr in the host namespace and returns its
// port.
func (e *env) serveUDP(t *testing.T, addr string) int {
	t.Helper()
	return e.serveUDPWith(t, addr, serveUDPEcho)
}

// serveUDPWith runs serve on a UDP socket bound to addr in the host
// namespace until the test ends and returns its port.
func (e *env) serveUDPWith(t *testing.T, addr string, serve func(net.PacketConn)) int {
	t.Helper()
	network := "udp4"
	if strings.HasPrefix(addr, "[") {
		network = "udp6"
	}
	pc, err := e.h.ListenPacket(network, addr)
	if err != nil {
		t.Fatalf("UDP server on %s in the host namespace: %v", addr, err)
	}
	go serve(pc)
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// dial connects from local (invalid: the kernel's choice) to dst inside the
// host namespace.
func (e *env) dial(network string, local netip.Addr, dst netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := e.h.Do(func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second}
		if local.IsValid() {
			if strings.HasPrefix(network, "udp") {
				d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
			} else {
				d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
			}
		}
		c, err = d.Dial(network, dst.String())
		return err
	})
	return c, err
}

// put is a checked upload of n bytes of stream(seed) from the host, from
// local to dst.
func (e *env) put(local netip.Addr, dst netip.AddrPort, n int64, seed uint64) error {
	c, err := e.dial("tcp", local, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	return put(c, n, seed)
}

// get is a checked download of n bytes of stream(seed) to the host.
func (e *env) get(local netip.Addr, dst netip.AddrPort, n int64, seed uint64) error {
	c, err := e.dial("tcp", local, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	return get(c, n, seed)
}

// udpEcho is an echo exchange from the host, one datagram of each of
// udpSizes.
func (e *env) udpEcho(local netip.Addr, dst netip.AddrPort) error {
	c, err := e.dial("udp", local, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	return udpEcho(c, len(udpSizes))
}

// waitServing polls until a transfer through dst works (the namespace's
// server is up), bounded by timeout; it gives up early when gopasta (p,
// may be nil) exits.
func (e *env) waitServing(t *testing.T, p *nstest.Proc, dst netip.AddrPort, timeout time.Duration) {
	t.Helper()
	err := nstest.WaitFor(timeout, func() error {
		if p != nil {
			select {
			case <-p.Done():
				o, er := p.Output()
				return nstest.Stop(fmt.Errorf("gopasta exited early:\n%s\n%s", o, er))
			default:
			}
		}
		return e.put(netip.Addr{}, dst, 1, 1)
	})
	if err != nil {
		t.Fatalf("forwarded port %v: got no working transfer within %v, want one: %v", dst, timeout, err)
	}
}

// path is a way a host peer reaches a port forwarded into the namespace.
type path struct {
	name  string
	local netip.Addr // source address; invalid = the kernel's (loopback)
	dst   string
}

// paths are the TAP and splice paths, IPv4 and IPv6 (needs hostSetup.peers).
func paths() []path {
	return []path{
		{"tap4", netip.MustParseAddr(peer4), ns4},
		{"tap6", netip.MustParseAddr(peer6), ns6},
		{"splice4", netip.Addr{}, "127.0.0.1"},
		{"splice6", netip.Addr{}, "::1"},
	}
}

// agent drives a peer in agent mode. Its commands run one at a time (do
// is safe from several goroutines, each waiting its turn); the peer's bg
// command runs one beside the others.
type agent struct {
	dir  string
	mu   sync.Mutex // held by do from writing a command to its answer
	n    int
	proc *nstest.Proc // nil when the test started the agent another way
}

// startAgent runs gopasta with args and an agent as its command, and waits
// until the agent is ready.
func (e *env) startAgent(t *testing.T, args ...string) *agent {
	t.Helper()
	return e.startAgentVia(t, nil, args...)
}

// startAgentVia is startAgent with gopasta started through wrapper (a
// command that runs the rest of its arguments, as prlimit does).
func (e *env) startAgentVia(t *testing.T, wrapper []string, args ...string) *agent {
	t.Helper()
	a := &agent{dir: nstest.TempDir(t)}
	a.proc = e.h.Start(e.u, slices.Concat(wrapper, e.gopasta(slices.Concat(args, []string{"--"}, agentArgv(e.self, a.dir))...))...)
	t.Cleanup(a.exit)
	a.waitReady(t, 20*time.Second)
	return a
}

// startAgentIn runs an agent in the user and network namespaces of pid
// (nsenter), as e.u, and waits until it is ready.
func (e *env) startAgentIn(t *testing.T, pid int) *agent {
	t.Helper()
	a := &agent{dir: nstest.TempDir(t)}
	a.proc = e.h.Start(e.u, nsenterArgs(pid, agentArgv(e.self, a.dir)...)...)
	t.Cleanup(a.exit)
	a.waitReady(t, 10*time.Second)
	return a
}

func (a *agent) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	err := nstest.WaitFor(timeout, func() error {
		if err := a.gone(); err != nil {
			return nstest.Stop(err)
		}
		_, err := os.Stat(filepath.Join(a.dir, "ready"))
		return err
	})
	if err != nil {
		t.Fatalf("agent: got no ready file within %v: %v", timeout, err)
	}
}

// gone says why the agent can no longer answer, or nil.
func (a *agent) gone() error {
	if a.proc == nil {
		return nil
	}
	select {
	case <-a.proc.Done():
		r, _ := a.proc.Wait(0)
		return fmt.Errorf("the agent's process exited early: %s", r)
	default:
		return nil
	}
}

// do runs a command in the agent and returns what it answered after "ok".
func (a *agent) do(timeout time.Duration, args ...string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	if err := writeFileAtomic(a.dir, fmt.Sprintf("cmd-%d", a.n), strings.Join(args, " ")); err != nil {
		return "", err
	}
	res := filepath.Join(a.dir, fmt.Sprintf("res-%d", a.n))
	var out string
	err := nstest.WaitFor(timeout, func() error {
		b, err := os.ReadFile(res)
		if err == nil {
			out = string(b)
			return nil
		}
		if err := a.gone(); err != nil {
			return nstest.Stop(err)
		}
		return fmt.Errorf("no answer to %q", args)
	})
	if err != nil {
		return "", err
	}
	if rest, ok := strings.CutPrefix(out, "ok "); ok {
		return rest, nil
	}
	return "", fmt.Errorf("%q: %s", args, strings.TrimPrefix(out, "err "))
}

// bg starts a command in the agent's background (the peer's bg command)
// under the name id; waitBg collects its answer.
func (a *agent) bg(t *testing.T, id string, args ...string) {
	t.Helper()
	a.must(t, 10*time.Second, append([]string{"bg", id}, args...)...)
}

// waitBg waits up to timeout for the answer of the background command id
// and returns what it answered after "ok".
func (a *agent) waitBg(id string, timeout time.Duration) (string, error) {
	var out string
	err := nstest.WaitFor(timeout, func() error {
		var done bool
		var err error
		if out, done, err = a.pollBg(id); done {
			return nstest.Stop(err)
		}
		if err := a.gone(); err != nil {
			return nstest.Stop(err)
		}
		return fmt.Errorf("no answer to background command %s", id)
	})
	return out, err
}

// pollBg says whether the background command id has answered, and if so
// what it answered after "ok", or its error.
func (a *agent) pollBg(id string) (out string, done bool, err error) {
	b, err := os.ReadFile(filepath.Join(a.dir, "bg-"+id))
	if err != nil {
		return "", false, nil
	}
	if rest, ok := strings.CutPrefix(string(b), "ok "); ok {
		return rest, true, nil
	}
	return "", true, fmt.Errorf("background command %s: %s", id, strings.TrimPrefix(string(b), "err "))
}

// must is do, failing the test on an error.
func (a *agent) must(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	out, err := a.do(timeout, args...)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	return out
}

// serve makes the agent serve port on [::], TCP (the transfer protocol) and
// UDP (echo).
func (a *agent) serve(t *testing.T, port int) {
	t.Helper()
	addr := fmt.Sprintf("[::]:%d", port)
	a.must(t, 10*time.Second, "listen", addr)
	a.must(t, 10*time.Second, "udpecho", addr)
}

// exit tells the agent to exit.
func (a *agent) exit() {
	a.mu.Lock()
	defer a.mu.Unlock()
	writeFileAtomic(a.dir, fmt.Sprintf("cmd-%d", a.n+1), "exit")
}

// startSleeper starts `unshare -Urn sleep 300` as e.u inside the host
// namespace, the way podman and rootlesskit prepare a namespace, and returns
// it once sleep runs in its new namespaces.
func (e *env) startSleeper(t *testing.T) *nstest.Proc {
	t.Helper()
	p := e.h.Start(e.u, "unshare", "-Urn", "sleep", "300")
	err := nstest.WaitFor(5*time.Second, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.PID()))
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(b)); got != "sleep" {
			return fmt.Errorf("sleeper comm: got %q, want sleep", got)
		}
		return nil
	})
	if err != nil {
		o, er := p.Output()
		t.Fatalf("unshare -Urn sleep 300 as %s: %v\n%s\n%s", e.u.Name, err, o, er)
	}
	return p
}

// nsenterArgs runs argv in pid's user and network namespaces as the
// identity that created them (entered the rootless way, user namespace
// first, so it works for every identity).
func nsenterArgs(pid int, argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(pid), "-U", "-n", "--preserve-credentials"}, argv...)
}
