package portfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/fwdrule"
)

// v4Rule is a HOST or SPLICE rule on any IPv4 address, port -> to.
func v4Rule(port, to uint16, proto, flags uint8) fwdrule.Rule {
	return fwdrule.Rule{Addr: fwdrule.Any4, First: port, Last: port, To: to, Proto: proto, Flags: flags}
}

func hostTables(rules ...fwdrule.Rule) []fwdrule.Table {
	return []fwdrule.Table{{Pif: fwdrule.PifHost, Rules: rules}, {Pif: fwdrule.PifSplice}}
}

// tcpOnly forwards nothing but the TCP values on the host side.
func tcpOnly(t *testing.T, tcp ...string) fwdrule.Options {
	if len(tcp) == 0 {
		tcp = []string{"none"}
	}
	none := []string{"none"}
	return options(t, tcp, none, none, none)
}

func startFake(t *testing.T, ports fwdrule.Options, listening func(bool) (fwdrule.PortSet, fwdrule.PortSet, error)) (*Forwarder, *recordingEngine) {
	t.Helper()
	eng := newRecordingEngine(t)
	if listening == nil {
		listening = func(bool) (tcp, udp fwdrule.PortSet, err error) { return }
	}
	pf, err := Start(context.Background(), Config{
		Ports: ports, Engine: eng, InNS: func(f func() error) error { return f() },
		IPv4: true, NoSplice: true, Listening: listening,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(pf.Close)
	return pf, eng
}

// portBusy reports whether binding 0.0.0.0:port for TCP fails as in use.
func portBusy(port uint16) bool {
	l, err := net.Listen("tcp4", "0.0.0.0:"+strconv.Itoa(int(port)))
	if err == nil {
		l.Close()
		return false
	}
	return errors.Is(err, syscall.EADDRINUSE)
}

// TestReplaceDiff: a replacement opens the new rules' listeners before
// closing the old ones, keeps the listeners of rules that stay, re-points
// a listener whose target changed without ever unbinding it, and leaves
// everything as it was when the tables do not validate.
func TestReplaceDiff(t *testing.T) {
	p1, p2, p3 := freePort(t), freePort(t), freePort(t)
	pf, eng := startFake(t, tcpOnly(t, strconv.Itoa(int(p1))), nil)
	if got := eng.open(); !slices.Equal(got, []uint16{p1}) {
		t.Fatalf("after start: listeners on %v, want [%d]", got, p1)
	}
	tcp := fwdrule.ProtoTCP

	eng.clearEvents()
	if err := pf.Replace(hostTables(v4Rule(p1, p1, tcp, 0), v4Rule(p2, p2, tcp, 0))); err != nil {
		t.Fatalf("add p2: %v", err)
	}
	if got, want := eng.eventList(), []string{fmt.Sprintf("add %d->%d", p2, p2)}; !slices.Equal(got, want) {
		t.Errorf("adding a rule: got events %q, want %q (p1's listener kept)", got, want)
	}

	eng.clearEvents()
	if err := pf.Replace(hostTables(v4Rule(p2, p2, tcp, 0), v4Rule(p3, p3, tcp, 0))); err != nil {
		t.Fatalf("swap p1 for p3: %v", err)
	}
	if got, want := eng.eventList(), []string{fmt.Sprintf("add %d->%d", p3, p3), fmt.Sprintf("remove %d->%d", p1, p1)}; !slices.Equal(got, want) {
		t.Errorf("replacing a rule: got events %q, want %q (new one open before the old one closes)", got, want)
	}

	eng.clearEvents()
	if err := pf.Replace(hostTables(v4Rule(p2, 9999, tcp, 0), v4Rule(p3, p3, tcp, 0))); err != nil {
		t.Fatalf("re-target p2: %v", err)
	}
	if got, want := eng.eventList(), []string{fmt.Sprintf("add %d->9999", p2), fmt.Sprintf("remove %d->%d", p2, p2)}; !slices.Equal(got, want) {
		t.Errorf("changing a target: got events %q, want %q", got, want)
	}
	if !portBusy(p2) {
		t.Errorf("port %d was released by a change of target, want it kept bound", p2)
	}

	before := pf.Tables()
	eng.clearEvents()
	bad := v4Rule(p1, p1, tcp, 0)
	bad.First = 0
	for _, ts := range [][]fwdrule.Table{
		hostTables(v4Rule(p1, p1, tcp, 0), bad),
		hostTables(v4Rule(p1, p1, tcp, 0), v4Rule(p1, p2, tcp, 0)), // conflict
		{{Pif: fwdrule.PifTap}},
	} {
		if err := pf.Replace(ts); err == nil {
			t.Errorf("Replace(%v): got nil, want an error", ts)
		}
	}
	if got := eng.eventList(); len(got) != 0 {
		t.Errorf("rejected updates: got events %q, want none", got)
	}
	if after := pf.Tables(); !slices.Equal(after[0].Rules, before[0].Rules) {
		t.Errorf("rejected updates changed the tables: got %v, want %v", after[0].Rules, before[0].Rules)
	}

	// An update that leaves HOST out empties it.
	if err := pf.Replace([]fwdrule.Table{{Pif: fwdrule.PifSplice}}); err != nil {
		t.Fatal(err)
	}
	if got := eng.open(); len(got) != 0 {
		t.Errorf("HOST left out: listeners on %v, want none", got)
	}
	if ts := pf.Tables(); len(ts[0].Rules) != 0 {
		t.Errorf("HOST left out: got rules %v, want none", ts[0].Rules)
	}
}

// TestReplaceRetry: a port in use is reported and retried every second;
// the rule stays in the table and binds once the port is free.
func TestReplaceRetry(t *testing.T) {
	holder, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	busy := uint16(holder.Addr().(*net.TCPAddr).Port)
	pf, eng := startFake(t, tcpOnly(t), nil)
	if err := pf.Replace(hostTables(v4Rule(busy, busy, fwdrule.ProtoTCP, 0))); err != nil {
		t.Fatalf("a busy port: got %v, want the update accepted", err)
	}
	if ts := pf.Tables(); len(ts[0].Rules) != 1 {
		t.Errorf("got %d HOST rules, want the busy port's rule kept", len(ts[0].Rules))
	}
	if got := eng.open(); len(got) != 0 {
		t.Fatalf("listeners on %v while the port is busy, want none", got)
	}
	pf.tick()
	if got := eng.open(); len(got) != 0 {
		t.Fatalf("retry while busy: listeners on %v, want none", got)
	}
	holder.Close()
	pf.tick()
	if got, want := eng.open(), []uint16{busy}; !slices.Equal(got, want) {
		t.Errorf("retry once free: listeners on %v, want %v", got, want)
	}
	// Once bound it is an ordinary listener: no more retries.
	if n := len(pf.set.pending); n != 0 {
		t.Errorf("%d sockets still pending, want 0", n)
	}
}

// TestStartStrictFails: at start a port the user named that cannot be
// bound is fatal, and nothing stays open.
func TestStartStrictFails(t *testing.T) {
	holder, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	busy := holder.Addr().(*net.TCPAddr).Port
	free := freePort(t)
	eng := newRecordingEngine(t)
	_, err = Start(context.Background(), Config{
		Ports: tcpOnly(t, strconv.Itoa(int(free)), strconv.Itoa(busy)), Engine: eng,
		InNS: func(f func() error) error { return f() }, IPv4: true, NoSplice: true,
	})
	var fe *ForwardError
	if !errors.As(err, &fe) || fe.Port != uint16(busy) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("got %v, want a ForwardError for port %d in use", err, busy)
	}
	if got := eng.open(); len(got) != 0 {
		t.Errorf("after a failed start: listeners on %v, want none", got)
	}
}

// TestReplaceScan: auto rules given by an update start scanning at once.
func TestReplaceScan(t *testing.T) {
	p := freePort(t)
	var ns fwdrule.PortSet
	ns.Add(p)
	pf, eng := startFake(t, tcpOnly(t), func(nsSide bool) (tcp, udp fwdrule.PortSet, err error) {
		if nsSide {
			return ns, udp, nil
		}
		return
	})
	scan := fwdrule.Rule{Addr: fwdrule.Any4, First: 1, Last: 65535, To: 1, Proto: fwdrule.ProtoTCP, Flags: fwdrule.FlagScan | fwdrule.FlagWeak}
	if err := pf.Replace(hostTables(scan)); err != nil {
		t.Fatal(err)
	}
	if got, want := eng.open(), []uint16{p}; !slices.Equal(got, want) {
		t.Errorf("after adding auto: listeners on %v, want %v", got, want)
	}
	// And they stop when the rule goes.
	if err := pf.Replace(hostTables()); err != nil {
		t.Fatal(err)
	}
	if got := eng.open(); len(got) != 0 {
		t.Errorf("after removing auto: listeners on %v, want none", got)
	}
}

// echoServer serves TCP echo on loopback until the test ends.
func echoServer(t *testing.T) uint16 {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func echo(c net.Conn, msg string) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echo: got %q, want %q", buf, msg)
	}
	return nil
}

// TestReplaceKeepsConnections: with real spliced connections (--splice-only,
// the test's own namespace standing in for the namespace), established
// connections survive every update, including one that removes their
// rule; 200 connections on a port that stays see no drop while other
// rules come and go.
func TestReplaceKeepsConnections(t *testing.T) {
	backend := echoServer(t)
	p1, p2 := freePort(t), freePort(t)
	pf, err := Start(context.Background(), Config{
		Ports: tcpOnly(t, fmt.Sprintf("%d:%d", p1, backend)),
		InNS:  func(f func() error) error { return f() }, IPv4: true, SpliceOnly: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), p1).String()
	var conns []net.Conn
	for i := range 200 {
		c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		if err := echo(c, "hello"); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	keep := v4Rule(p1, backend, fwdrule.ProtoTCP, 0)
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	stop := make(chan struct{})
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := echo(c, fmt.Sprintf("c%d-%d", i, n)); err != nil {
					errs <- fmt.Errorf("connection %d, message %d: %w", i, n, err)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	for i := range 10 {
		ts := hostTables(keep)
		if i%2 == 0 {
			ts = hostTables(keep, v4Rule(p2, backend, fwdrule.ProtoTCP, 0))
		}
		if err := pf.Replace(ts); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Removing the rule itself: established connections live on, new
	// ones are refused.
	if err := pf.Replace(hostTables()); err != nil {
		t.Fatal(err)
	}
	for i, c := range conns[:10] {
		if err := echo(c, "still here"); err != nil {
			t.Errorf("connection %d after its rule went: %v", i, err)
		}
	}
	if c, err := net.DialTimeout("tcp4", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("new connection to %s after its rule went: got connected, want refused", addr)
	}
}

// TestReplaceNarrowsAddress: a port moving from any address to one
// address cannot be bound while the old socket holds it; it binds as soon
// as the old one closes, in the same update, not a second later.
func TestReplaceNarrowsAddress(t *testing.T) {
	p := freePort(t)
	pf, eng := startFake(t, tcpOnly(t, strconv.Itoa(int(p))), nil)
	lo := v4Rule(p, p, fwdrule.ProtoTCP, 0)
	lo.Addr = fwdrule.Inany(netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	if err := pf.Replace(hostTables(lo)); err != nil {
		t.Fatal(err)
	}
	eng.mu.Lock()
	var open []string
	for i, l := range eng.ls {
		if !eng.gone[i] {
			open = append(open, l.Local.String())
		}
	}
	eng.mu.Unlock()
	if want := []string{fmt.Sprintf("127.0.0.1:%d", p)}; !slices.Equal(open, want) {
		t.Errorf("after narrowing to 127.0.0.1: listeners %v, want %v", open, want)
	}
	if n := len(pf.set.pending); n != 0 {
		t.Errorf("%d sockets left to retry, want 0", n)
	}
}
