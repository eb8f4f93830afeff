package e2e

// The host's neighbour table mirrored: the namespace resolves the host's
// LAN neighbours to their own MAC addresses, and follows them when the
// host's table changes.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/nstest"
)

// The LAN host beside the host namespace (lanHost), and its MAC addresses.
const (
	lanMAC  = "02:4c:41:4e:00:77"
	lanMAC2 = "02:4c:41:4e:00:88"
	// staticMAC is a permanent entry of the host's table that no host
	// answers for.
	staticMAC = "02:4c:41:4e:00:90"
)

// lanHost moves peer0, the far end of the host's template interface, into
// a namespace of its own, a host of the LAN: MAC address lanMAC,
// 192.0.2.77, 192.0.2.78, 2001:db8::77 and 2001:db8::78, answering ARP
// and neighbour solicitations as any host does.
func lanHost(t *testing.T, e *env) *sideNS {
	t.Helper()
	lan := newSideNS(t, "lan")
	e.hostIP(t, "link", "set", nstest.PeerIfName, "netns", lan.name)
	lan.ip("link", "set", nstest.PeerIfName, "address", lanMAC)
	for _, a := range []string{"192.0.2.77/24", "192.0.2.78/24"} {
		lan.ip("addr", "add", a, "dev", nstest.PeerIfName)
	}
	for _, a := range []string{"2001:db8::77/64", "2001:db8::78/64"} {
		lan.ip("addr", "add", a, "dev", nstest.PeerIfName, "nodad")
	}
	lan.ip("link", "set", nstest.PeerIfName, "up")
	return lan
}

// hostPing has the host namespace resolve addr (one ping), which must
// answer.
func (e *env) hostPing(t *testing.T, addr string) {
	t.Helper()
	argv := []string{"ip", "netns", "exec", e.h.Name(), "busybox", "ping", "-c", "1", "-W", "3", addr}
	if r := nstest.Run(t, nstest.RootUser, argv...); r.Code != 0 {
		t.Fatalf("%q: %s", argv, r)
	}
}

// TestNeighbourMirror: ARP and NDP answers for addresses of the host's
// LAN carry the MAC addresses the host's neighbour table has for them,
// others gopasta's own (passt 3c46901..7917155). When the host learns a
// neighbour the namespace has resolved already, or one changes its MAC
// address, the namespace's entry follows within seconds (an announcement),
// not when it next probes; a neighbour the host forgets is answered for
// with gopasta's address again.
func TestNeighbourMirror(t *testing.T) {
	our := config.DefaultMAC.String()
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			lan := lanHost(t, e)
			e.hostPing(t, "192.0.2.77")
			e.hostPing(t, "2001:db8::77")
			e.hostIP(t, "neigh", "add", "192.0.2.90", "lladdr", staticMAC, "dev", nstest.HostIfName, "nud", "permanent")
			ag := e.startAgent(t, "--config-net", "-t", "none", "-u", "none", "-T", "none", "-U", "none")
			// neigh resolves addr in the namespace (flushing its entry
			// first, if asked) and waits up to 5 s for the entry to show
			// want.
			neigh := func(what, addr, want string, flush ...string) {
				t.Helper()
				args := append([]string{"neigh", addr, want, "5000"}, flush...)
				if _, err := ag.do(20*time.Second, args...); err != nil {
					t.Errorf("%s: %v", what, err)
				}
			}
			neigh("a neighbour the host knows", "192.0.2.77", lanMAC)
			neigh("an IPv6 neighbour the host knows", "2001:db8::77", lanMAC)
			neigh("a permanent entry of the host", "192.0.2.90", staticMAC)
			neigh("an address the host has no neighbour at", "192.0.2.79", our)
			// The namespace's traffic makes the host resolve these, after
			// the namespace resolved them to gopasta's address.
			neigh("a neighbour the host learns", "192.0.2.78", lanMAC)
			neigh("an IPv6 neighbour the host learns", "2001:db8::78", lanMAC)

			// The LAN host's interface changes its MAC address; the host
			// finds out when it resolves the address again.
			lan.ip("link", "set", nstest.PeerIfName, "address", lanMAC2)
			e.hostIP(t, "neigh", "flush", "to", "192.0.2.77", "dev", nstest.HostIfName)
			e.hostPing(t, "192.0.2.77")
			neigh("a neighbour whose MAC address changed", "192.0.2.77", lanMAC2)

			// The host forgets an entry nobody answers for: the
			// namespace, resolving it again, gets gopasta's address.
			e.hostIP(t, "neigh", "del", "192.0.2.90", "dev", nstest.HostIfName)
			neigh("an entry the host forgot", "192.0.2.90", our, "flush")
		})
	}
}

// ipNeigh is what `ip -j neigh show` says of an entry.
type ipNeigh struct {
	Dst    string   `json:"dst"`
	LLAddr string   `json:"lladdr"`
	State  []string `json:"state"`
}

// neighWait is the peer's neigh command: (with flush, the namespace's
// entry for addr flushed first) a datagram to addr (port 9), which makes
// the namespace resolve it, then `ip -j neigh show` until the entry has
// the MAC address want, for up to d. The result is the entry's MAC
// address.
func neighWait(addr, want string, d time.Duration, flush bool) (string, error) {
	if flush {
		if out, err := exec.Command("ip", "neigh", "flush", "to", addr).CombinedOutput(); err != nil {
			return "", fmt.Errorf("ip neigh flush: %w: %s", err, out)
		}
	}
	c, err := dialRetry("udp", net.JoinHostPort(addr, "9"))
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.Write([]byte("resolve"))
	got := ""
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("ip", "-j", "neigh", "show", "to", addr).Output()
		if err != nil {
			return "", fmt.Errorf("ip neigh: %w", err)
		}
		var ns []ipNeigh
		if err := json.Unmarshal(out, &ns); err != nil {
			return "", fmt.Errorf("ip -j neigh: %w: %s", err, out)
		}
		got = ""
		for _, n := range ns {
			if n.Dst == addr {
				got = n.LLAddr
			}
		}
		if got == want {
			return got, nil
		}
		if time.Now().After(deadline) {
			break
		}
		if got == "" {
			c.Write([]byte("resolve")) // the entry failed or went: again
		}
	}
	if got == "" {
		return "", errors.New(addr + ": no resolved entry")
	}
	return got, fmt.Errorf("%s: MAC address %s after %v, want %s", addr, got, d, want)
}

// neighCmd parses the neigh command's arguments: ADDR MAC MS [flush].
func neighCmd(f []string) (string, error) {
	if len(f) < 4 || len(f) > 5 || (len(f) == 5 && f[4] != "flush") {
		return "", fmt.Errorf("want neigh ADDR MAC MS [flush], got %q", f)
	}
	n, err := strconv.Atoi(f[3])
	if err != nil {
		return "", fmt.Errorf("neigh ADDR MAC MS: %w", err)
	}
	return neighWait(f[1], f[2], time.Duration(n)*time.Millisecond, len(f) == 5)
}
