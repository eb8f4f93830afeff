package main

// The tools measured: gopasta or pasta attached to a holder, slirp4netns,
// and the veth pair.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Ports the workloads use. Namespace -> host servers listen on the host,
// host -> namespace servers inside the namespace behind a port forward.
const (
	portOut   = 5201 // iperf3, namespace -> host
	portOutRR = 5202 // rr, namespace -> host
	portIn    = 5301 // iperf3, host -> namespace (forwarded)
	portInRR  = 5302 // rr, host -> namespace (forwarded)
)

// instance is one tool connecting one namespace to the host namespace at one
// MTU, with everything the workloads need to reach it.
type instance struct {
	tool   string
	mtu    int
	nsWrap func(argv ...string) []string // run argv in the namespace as uid 65534
	addr4  string                        // the namespace's own addresses
	addr6  string
	main   *proc // the tool's process (CPU is charged to its tree); nil for veth
	holder *proc // the process that keeps the namespace alive
	vethNS string

	// What the tool offers; a workload it cannot run gets the reason.
	noGW     string // namespace -> gateway mapped to host loopback
	noSplice string // loopback <-> loopback forwarding
	noIn6    string // host -> namespace over IPv6
	kernel   bool   // veth: loopback rows fall back to the plain veth path

	// pinned: the tool was started on CPU cpu only (every process and
	// thread it starts inherits that), and the workloads run there too.
	pinned bool
	cpu    int
}

// pinTo is where an instance runs: on every CPU (pinned false), or on one.
type pinTo struct {
	pinned bool
	cpu    int
}

// wrap runs argv on the one CPU when pinned.
func (p pinTo) wrap(argv []string) []string {
	if !p.pinned {
		return argv
	}
	return pinArgv(p.cpu, argv)
}

func (in *instance) addr(fam int) string {
	if fam == 6 {
		return in.addr6
	}
	return in.addr4
}

// dead says why the tool is no longer running, or "".
func (in *instance) dead() string {
	if in.main != nil && in.main.exited() {
		return fmt.Sprintf("%s exited (%v): %s", in.tool, in.main.err, lastLine(in.main.out.String()))
	}
	return ""
}

func (in *instance) close() {
	in.main.stop()
	in.holder.stop()
	if in.vethNS != "" {
		if err := ip("netns", "del", in.vethNS); err != nil {
			warnf("deleting %s: %v", in.vethNS, err)
		}
	}
}

// startHolder starts `unshare -Urn sleep` as uid 65534 in the host
// namespace: a user+network namespace owned by the unprivileged user, as
// podman and rootlesskit make, which every tool then attaches to.
func startHolder(h *hostNS) (*proc, func(argv ...string) []string, error) {
	p, err := start("namespace holder", h.cmd("unshare", "-Urn", "sleep", "3600"), "", 0)
	if err != nil {
		return nil, nil, err
	}
	// unshare execs sleep once the namespaces exist.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.pid()))
		if strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		if p.exited() || time.Now().After(deadline) {
			p.stop()
			return nil, nil, fmt.Errorf("unshare -Urn as uid 65534 failed: %s", lastLine(p.out.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid := itoa(p.pid())
	wrap := func(argv ...string) []string {
		out := append([]string{}, asNobody...)
		out = append(out, "nsenter", "-t", pid, "-U", "-n", "--preserve-credentials", "--")
		return append(out, argv...)
	}
	return p, wrap, nil
}

// waitAddr waits until the namespace has addr on some interface (the tool
// has configured it) or the tool dies.
func waitAddr(in *instance, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, _ := run(5*time.Second, in.nsWrap("ip", "-o", "addr", "show")...)
		if strings.Contains(out, " "+addr+"/") {
			return nil
		}
		if why := in.dead(); why != "" {
			return fmt.Errorf("%s", why)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not configure %s in the namespace within %v: %s",
				in.tool, addr, timeout, lastLine(in.main.out.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startPastaLike runs gopasta or pasta attached to a fresh holder, with the
// same options for both: podman-style --config-net, our own addresses, and
// the forwards the workloads use.
func startPastaLike(name, bin string, h *hostNS, mtu int, pin pinTo) (*instance, error) {
	holder, wrap, err := startHolder(h)
	if err != nil {
		return nil, err
	}
	in := &instance{tool: name, mtu: mtu, nsWrap: wrap, holder: holder, addr4: nsAddr4, addr6: nsAddr6,
		pinned: pin.pinned, cpu: pin.cpu}
	args := []string{bin, "--config-net", "-f", "-m", itoa(mtu),
		"-a", nsAddr4, "-n", "24", "-g", hostGW4, "-a", nsAddr6, "-g", hostGW6,
		"-t", fmt.Sprintf("%d,%d", portIn, portInRR), "-u", itoa(portIn),
		"-T", fmt.Sprintf("%d,%d", portOut, portOutRR), "-U", itoa(portOut),
		itoa(holder.pid())}
	// Pinned from its first instruction: taskset, nsenter and setpriv
	// exec one another and the tool, so the tool's process, its
	// re-executions, its threads and its children all inherit the CPU.
	in.main, err = start(name, pin.wrap(h.cmd(args...)), "", 0)
	if err != nil {
		holder.stop()
		return nil, err
	}
	if err := waitAddr(in, nsAddr4, 10*time.Second); err != nil {
		in.close()
		return nil, err
	}
	// Forwarded ports are bound around the same time as the addresses.
	time.Sleep(300 * time.Millisecond)
	return in, nil
}

// startSlirp runs slirp4netns the way rootless podman used to: --configure,
// no host loopback, port forwards added through its API socket.
func startSlirp(h *hostNS, mtu int, tmp string, pin pinTo) (*instance, error) {
	holder, wrap, err := startHolder(h)
	if err != nil {
		return nil, err
	}
	in := &instance{tool: "slirp4netns", mtu: mtu, nsWrap: wrap, holder: holder,
		addr4: "10.0.2.100", addr6: "",
		noGW:     "slirp4netns runs with --disable-host-loopback",
		noSplice: "slirp4netns has no loopback splice path",
		noIn6:    "slirp4netns's API forwards IPv4 host ports only",
		pinned:   pin.pinned, cpu: pin.cpu,
	}
	sock := filepath.Join(tmp, fmt.Sprintf("slirp-%d.sock", mtu))
	_ = os.Remove(sock)
	in.main, err = start("slirp4netns", pin.wrap(h.cmd("slirp4netns", "--configure", fmt.Sprintf("--mtu=%d", mtu),
		"--disable-host-loopback", "--enable-ipv6", "--api-socket", sock, itoa(holder.pid()), "tap0")), "", 0)
	if err != nil {
		holder.stop()
		return nil, err
	}
	if err := waitAddr(in, in.addr4, 10*time.Second); err != nil {
		in.close()
		return nil, err
	}
	// slirp4netns may configure the namespace before it creates its API
	// socket (a run failed on "no such file" once).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil || time.Now().After(deadline) {
			break
		}
	}
	for _, f := range []struct {
		proto string
		port  int
	}{{"tcp", portIn}, {"tcp", portInRR}, {"udp", portIn}} {
		if err := slirpHostfwd(sock, f.proto, f.port); err != nil {
			in.close()
			return nil, err
		}
	}
	return in, nil
}

func slirpHostfwd(sock, proto string, port int) error {
	c, err := net.DialTimeout("unix", sock, 3*time.Second)
	if err != nil {
		return fmt.Errorf("slirp4netns API: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	req := map[string]any{"execute": "add_hostfwd", "arguments": map[string]any{
		"proto": proto, "host_addr": hostAddr4, "host_port": port, "guest_port": port}}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return fmt.Errorf("slirp4netns API: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('}')
	if err != nil && line == "" {
		return fmt.Errorf("slirp4netns API: %w", err)
	}
	if strings.Contains(line, "error") {
		return fmt.Errorf("slirp4netns add_hostfwd %s/%d: %s", proto, port, line)
	}
	return nil
}

// startVeth makes the kernel-only reference: a second network namespace
// joined to the host namespace by a veth pair, the same addresses as the
// translated namespaces, nothing in between.
func startVeth(h *hostNS, mtu int, pin pinTo) (*instance, error) {
	v := uniqueName("gpbveth")
	if err := ip("netns", "add", v); err != nil {
		return nil, err
	}
	in := &instance{tool: "veth", mtu: mtu, vethNS: v, addr4: nsAddr4, addr6: nsAddr6, kernel: true,
		pinned: pin.pinned, cpu: pin.cpu}
	in.nsWrap = func(argv ...string) []string {
		out := append([]string{"nsenter", "--net=/run/netns/" + v, "--"}, asNobody...)
		return append(out, argv...)
	}
	m := itoa(mtu)
	hn, vn := []string{"-n", h.name}, []string{"-n", v}
	steps := [][]string{
		append(hn, "link", "add", "vb0", "mtu", m, "type", "veth", "peer", "name", "vb1", "netns", v, "mtu", m),
		append(hn, "link", "set", "vb0", "up"),
		append(hn, "addr", "add", "fe80::1/64", "dev", "vb0", "nodad"),
		append(hn, "route", "add", nsAddr4+"/32", "dev", "vb0"),
		append(hn, "-6", "route", "add", nsAddr6+"/128", "via", "fe80::2", "dev", "vb0"),
		append(vn, "link", "set", "lo", "up"),
		append(vn, "link", "set", "vb1", "up"),
		append(vn, "addr", "add", nsAddr4+"/32", "dev", "vb1"),
		append(vn, "addr", "add", nsAddr6+"/128", "dev", "vb1", "nodad"),
		append(vn, "addr", "add", "fe80::2/64", "dev", "vb1", "nodad"),
		append(vn, "route", "add", "default", "via", hostAddr4, "dev", "vb1", "onlink"),
		append(vn, "-6", "route", "add", "default", "via", "fe80::1", "dev", "vb1"),
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			in.close()
			// The host end goes with the pair when the namespace does.
			return nil, fmt.Errorf("veth set-up: %w", err)
		}
	}
	return in, nil
}
