package ns

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// neighLog records what a NeighbourHandler is told.
type neighLog struct{ got []string }

func (l *neighLog) NeighbourSet(a netip.Addr, mac [6]byte) {
	l.got = append(l.got, fmt.Sprintf("set %s %s", a, net.HardwareAddr(mac[:])))
}
func (l *neighLog) NeighbourGone(a netip.Addr) { l.got = append(l.got, "gone "+a.String()) }
func (l *neighLog) NeighbourDumpBegin()        { l.got = append(l.got, "begin") }
func (l *neighLog) NeighbourDumpEnd(complete bool) {
	l.got = append(l.got, fmt.Sprintf("end %v", complete))
}

// nlMsg builds a netlink message of type typ carrying body.
func nlMsg(typ, flags uint16, seq uint32, body []byte) []byte {
	b := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body)+3)
	binary.NativeEndian.PutUint32(b, uint32(nlmsgHdrLen+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	b = append(b, body...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// ndMsg builds an ndmsg with NDA_DST dst (if valid) and NDA_LLADDR ll (if
// not nil).
func ndMsg(fam uint8, ifindex int, state uint16, flags uint8, dst netip.Addr, ll []byte) []byte {
	b := make([]byte, ndmsgLen)
	b[0] = fam
	binary.NativeEndian.PutUint32(b[4:], uint32(ifindex))
	binary.NativeEndian.PutUint16(b[8:], state)
	b[10] = flags
	b[11] = unix.RTN_UNICAST
	attr := func(typ uint16, data []byte) {
		a := make([]byte, rtaHdrLen, rtaHdrLen+len(data)+3)
		binary.NativeEndian.PutUint16(a, uint16(rtaHdrLen+len(data)))
		binary.NativeEndian.PutUint16(a[2:], typ)
		a = append(a, data...)
		for len(a)%4 != 0 {
			a = append(a, 0)
		}
		b = append(b, a...)
	}
	if dst.IsValid() {
		attr(ndaDst, dst.AsSlice())
	}
	if ll != nil {
		attr(ndaLLAddr, ll)
	}
	return b
}

// TestNeighboursParse: what each message of the neighbour table becomes
// for a watch of interface 2 (IPv4) and 3 (IPv6), during a dump with
// sequence number 7 of the IPv6 family (the last).
func TestNeighboursParse(t *testing.T) {
	a := netip.MustParseAddr
	mac := []byte{2, 0, 0, 0, 0, 7}
	ok := uint16(unix.NUD_REACHABLE)
	for _, tc := range []struct {
		name string
		msg  []byte
		want []string
	}{
		{"reachable v4", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, ok, 0, a("192.0.2.7"), mac)), []string{"set 192.0.2.7 02:00:00:00:00:07"}},
		{"stale v6", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET6, 3, unix.NUD_STALE, 0, a("2001:db8::7"), mac)), []string{"set 2001:db8::7 02:00:00:00:00:07"}},
		{"permanent", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, unix.NUD_PERMANENT, 0, a("192.0.2.7"), mac)), []string{"set 192.0.2.7 02:00:00:00:00:07"}},
		{"delay", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, unix.NUD_DELAY, 0, a("192.0.2.7"), mac)), []string{"set 192.0.2.7 02:00:00:00:00:07"}},
		{"deleted", nlMsg(unix.RTM_DELNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, ok, 0, a("192.0.2.7"), mac)), []string{"gone 192.0.2.7"}},
		{"failed", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, unix.NUD_FAILED, 0, a("192.0.2.7"), nil)), []string{"gone 192.0.2.7"}},
		{"incomplete", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET6, 3, unix.NUD_INCOMPLETE, 0, a("2001:db8::7"), nil)), []string{"gone 2001:db8::7"}},
		{"no link-layer address", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, ok, 0, a("192.0.2.7"), nil)), []string{"gone 192.0.2.7"}},
		{"multicast MAC", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, ok, 0, a("192.0.2.7"), []byte{1, 0, 0x5e, 0, 0, 1})), []string{"gone 192.0.2.7"}},
		{"zero MAC", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, unix.NUD_NOARP, 0, a("192.0.2.7"), make([]byte, 6))), []string{"gone 192.0.2.7"}},
		{"not Ethernet", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, ok, 0, a("192.0.2.7"), []byte{1, 2, 3, 4})), []string{"gone 192.0.2.7"}},
		{"other interface", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 3, ok, 0, a("192.0.2.7"), mac)), nil},
		{"v6 on the v4 interface", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET6, 2, ok, 0, a("2001:db8::7"), mac)), nil},
		{"proxy", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, ok, unix.NTF_PROXY, a("192.0.2.7"), mac)), nil},
		{"multicast address", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET6, 3, unix.NUD_NOARP, 0, a("ff02::1"), []byte{0x33, 0x33, 0, 0, 0, 1})), nil},
		{"broadcast address", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, unix.NUD_NOARP, 0, a("255.255.255.255"), mac)), nil},
		{"bridge family", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_BRIDGE, 2, ok, 0, netip.Addr{}, mac)), nil},
		{"address of the other family", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, ok, 0, a("2001:db8::7"), mac)), nil},
		{"short ndmsg", nlMsg(unix.RTM_NEWNEIGH, 0, 0, make([]byte, 8)), nil},
		{"other message", nlMsg(unix.RTM_NEWROUTE, 0, 0, ndMsg(unix.AF_INET, 2, ok, 0, a("192.0.2.7"), mac)), nil},
		{"dump done", nlMsg(unix.NLMSG_DONE, unix.NLM_F_MULTI, 7, make([]byte, 4)), []string{"end true"}},
		{"another dump's done", nlMsg(unix.NLMSG_DONE, unix.NLM_F_MULTI, 6, make([]byte, 4)), nil},
		{"dump refused", nlMsg(unix.NLMSG_ERROR, 0, 7, binary.NativeEndian.AppendUint32(nil, uint32(0x100000000-int(unix.EPERM)))), []string{"end false"}},
		{"two messages", append(
			nlMsg(unix.RTM_NEWNEIGH, unix.NLM_F_MULTI, 7, ndMsg(unix.AF_INET6, 3, ok, 0, a("2001:db8::7"), mac)),
			nlMsg(unix.RTM_DELNEIGH, 0, 0, ndMsg(unix.AF_INET6, 3, ok, 0, a("2001:db8::8"), mac))...),
			[]string{"set 2001:db8::7 02:00:00:00:00:07", "gone 2001:db8::8"}},
		{"length past the end", nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, ok, 0, a("192.0.2.7"), mac))[:30], nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Neighbours{ifindex: [2]int{2, 3}, seq: 7, dumping: 1}
			var l neighLog
			n.parse(tc.msg, &l)
			if !slices.Equal(l.got, tc.want) {
				t.Errorf("got %q, want %q", l.got, tc.want)
			}
		})
	}
}

func FuzzNeighboursParse(f *testing.F) {
	mac := []byte{2, 0, 0, 0, 0, 7}
	f.Add(nlMsg(unix.RTM_NEWNEIGH, 0, 0, ndMsg(unix.AF_INET, 2, unix.NUD_REACHABLE, 0, netip.MustParseAddr("192.0.2.7"), mac)))
	f.Add(nlMsg(unix.NLMSG_DONE, unix.NLM_F_MULTI, 7, make([]byte, 4)))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := &Neighbours{ifindex: [2]int{2, 3}, seq: 7, dumping: 0, fd: -1}
		var l neighLog
		n.parse(b, &l)
	})
}

// neighIP runs ip(8) in the calling thread's namespace.
func neighIP(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestWatchNeighbours follows a real neighbour table: the entries of the
// watched interface at start (a dump), then additions, a changed MAC
// address and deletions as the kernel reports them; entries of another
// interface and proxy entries never show.
func TestWatchNeighbours(t *testing.T) {
	nstest.RequireRoot(t)
	defer nstest.EnterNetns(t)()
	neighIP(t, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	neighIP(t, "link", "set", "eth0", "up")
	neighIP(t, "link", "set", "peer0", "up")
	neighIP(t, "neigh", "add", "192.0.2.7", "lladdr", "02:00:00:00:00:07", "dev", "eth0", "nud", "permanent")
	neighIP(t, "neigh", "add", "2001:db8::7", "lladdr", "02:00:00:00:00:07", "dev", "eth0", "nud", "reachable")
	neighIP(t, "neigh", "add", "192.0.2.99", "lladdr", "02:00:00:00:00:99", "dev", "peer0", "nud", "permanent")
	eth0, err := net.InterfaceByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := WatchNeighbours(eth0.Index, eth0.Index)
	if err != nil {
		t.Fatalf("WatchNeighbours: %v", err)
	}
	defer n.Close()
	var l neighLog
	// expect reads until the handler has been told want (in order, after
	// what it was told before), or fails after 5 s. The kernel reports a
	// deletion twice (the entry's last state, then its removal): repeats
	// count once.
	expect := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for len(slices.Compact(slices.Clone(l.got))) < len(want) && time.Now().Before(deadline) {
			unix.Poll([]unix.PollFd{{Fd: int32(n.Fd()), Events: unix.POLLIN}}, 100)
			if err := n.Read(&l); err != nil {
				t.Fatalf("%s: Read: %v", what, err)
			}
		}
		// Late repeats of the last one.
		unix.Poll([]unix.PollFd{{Fd: int32(n.Fd()), Events: unix.POLLIN}}, 50)
		if err := n.Read(&l); err != nil {
			t.Fatalf("%s: Read: %v", what, err)
		}
		l.got = slices.Compact(l.got)
		if !slices.Equal(l.got, want) {
			t.Fatalf("%s: got %q, want %q", what, l.got, want)
		}
		l.got = nil
	}
	expect("dump", "begin", "set 192.0.2.7 02:00:00:00:00:07", "set 2001:db8::7 02:00:00:00:00:07", "end true")

	neighIP(t, "neigh", "add", "proxy", "192.0.2.10", "dev", "eth0")
	neighIP(t, "neigh", "add", "192.0.2.8", "lladdr", "02:00:00:00:00:08", "dev", "eth0", "nud", "permanent")
	expect("added", "set 192.0.2.8 02:00:00:00:00:08")
	neighIP(t, "neigh", "replace", "192.0.2.7", "lladdr", "02:00:00:00:00:17", "dev", "eth0", "nud", "permanent")
	expect("changed", "set 192.0.2.7 02:00:00:00:00:17")
	neighIP(t, "neigh", "del", "192.0.2.7", "dev", "eth0")
	neighIP(t, "neigh", "del", "2001:db8::7", "dev", "eth0")
	neighIP(t, "neigh", "del", "192.0.2.99", "dev", "peer0")
	expect("deleted", "gone 192.0.2.7", "gone 2001:db8::7")
}

// TestWatchNeighboursOverrun: when the kernel drops notifications for want
// of buffer space (ENOBUFS), Read dumps the table again, so that what was
// lost is read all the same.
func TestWatchNeighboursOverrun(t *testing.T) {
	nstest.RequireRoot(t)
	defer nstest.EnterNetns(t)()
	neighIP(t, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	neighIP(t, "link", "set", "eth0", "up")
	eth0, err := net.InterfaceByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := WatchNeighbours(eth0.Index, 0)
	if err != nil {
		t.Fatalf("WatchNeighbours: %v", err)
	}
	defer n.Close()
	var l neighLog
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(l.got, "end true") && time.Now().Before(deadline); {
		unix.Poll([]unix.PollFd{{Fd: int32(n.Fd()), Events: unix.POLLIN}}, 100)
		n.Read(&l)
	}
	if !slices.Equal(l.got, []string{"begin", "end true"}) {
		t.Fatalf("first dump of an empty table: got %q", l.got)
	}
	l.got = nil
	// The smallest buffer the kernel allows holds a few notifications.
	if err := unix.SetsockoptInt(n.Fd(), unix.SOL_SOCKET, unix.SO_RCVBUF, 0); err != nil {
		t.Fatal(err)
	}
	const count = 300
	var batch strings.Builder
	for i := range count {
		fmt.Fprintf(&batch, "neigh add 10.0.%d.%d lladdr 02:00:00:00:%02x:%02x dev eth0 nud permanent\n", i/250, 1+i%250, i/256, i%256)
	}
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -batch: %v\n%s", err, out)
	}
	set := map[string]bool{}
	resynced := false
	for deadline := time.Now().Add(10 * time.Second); (len(set) < count || !resynced) && time.Now().Before(deadline); {
		unix.Poll([]unix.PollFd{{Fd: int32(n.Fd()), Events: unix.POLLIN}}, 100)
		if err := n.Read(&l); err != nil {
			t.Fatalf("Read: %v", err)
		}
		for _, g := range l.got {
			if a, ok := strings.CutPrefix(g, "set "); ok {
				set[a] = true
			}
			resynced = resynced || g == "end true"
		}
		l.got = nil
	}
	if !resynced {
		t.Errorf("no complete dump after the overrun")
	}
	if len(set) != count {
		t.Errorf("entries read: got %d, want %d", len(set), count)
	}
}
