package portfwd

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/nstest"
)

// freePort is a TCP port of 127.0.0.1 nothing listens on right now.
func freePort(t *testing.T) uint16 { return nstest.FreePort(t, "127.0.0.1:0") }

// TestAutoScan: auto listeners follow the other side's listening ports,
// never mirror gopasta's own, and go away with them. (The free ports are
// ephemeral ones, which auto alone leaves out: the rules name them.)
func TestAutoScan(t *testing.T) {
	p1, p2 := freePort(t), freePort(t)
	var mu sync.Mutex
	var nsPorts, hostPorts fwdrule.PortSet // what each side "listens on"
	eng := newRecordingEngine(t)
	every := []string{"1-65535,auto"}
	cfg := Config{
		Ports:  options(t, every, []string{"none"}, every, []string{"none"}),
		Engine: eng, InNS: func(f func() error) error { return f() },
		IPv4: true, NoSplice: true,
		Listening: func(nsSide bool) (tcp, udp fwdrule.PortSet, err error) {
			mu.Lock()
			defer mu.Unlock()
			if nsSide {
				return nsPorts, udp, nil
			}
			return hostPorts, udp, nil
		},
	}
	mu.Lock()
	nsPorts.Add(p1)
	mu.Unlock()
	pf, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	if got, want := eng.open(), []uint16{p1}; !slices.Equal(got, want) {
		t.Fatalf("after start: host listeners on %v, want %v", got, want)
	}
	// Our host listener on p1 now shows among the host's ports: it must
	// not come back as a namespace listener (-T auto).
	mu.Lock()
	hostPorts.Add(p1)
	nsPorts.Add(p2)
	mu.Unlock()
	pf.tick()
	want := []uint16{p1, p2}
	slices.Sort(want)
	if got := eng.open(); !slices.Equal(got, want) {
		t.Errorf("second scan: host listeners on %v, want %v", got, want)
	}
	if n := pf.sp.ListenerCount(); n != 0 {
		t.Errorf("namespace listeners: got %d, want 0 (p1 is our own)", n)
	}
	mu.Lock()
	nsPorts = fwdrule.PortSet{}
	nsPorts.Add(p2)
	mu.Unlock()
	pf.tick()
	if got, want := eng.open(), []uint16{p2}; !slices.Equal(got, want) {
		t.Errorf("after p1 went away: host listeners on %v, want %v", got, want)
	}
}

// TestAutoEphemeral: auto alone (the default) forwards a port the
// namespace listens on, but never one of the host's ephemeral range.
func TestAutoEphemeral(t *testing.T) {
	eph, low := freePort(t), freeLowPort(t)
	var ns fwdrule.PortSet
	ns.Add(eph)
	ns.Add(low)
	pf, eng := startFake(t, options(t, nil, []string{"none"}, []string{"none"}, []string{"none"}),
		func(nsSide bool) (tcp, udp fwdrule.PortSet, err error) {
			if nsSide {
				return ns, udp, nil
			}
			return
		})
	pf.tick()
	if got, want := eng.open(), []uint16{low}; !slices.Equal(got, want) {
		t.Errorf("host listeners on %v, want %v (%d is ephemeral)", got, want, eph)
	}
}

// freeLowPort is a TCP port below the ephemeral range that 0.0.0.0 can
// bind now.
func freeLowPort(t *testing.T) uint16 {
	t.Helper()
	eph := fwdrule.Ephemeral()
	for p := 20000; p < int(eph.First) && p < 30000; p++ {
		if l, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", p)); err == nil {
			l.Close()
			return uint16(p)
		}
	}
	t.Skip("no free port below the ephemeral range")
	return 0
}

// recordingEngine is the engine's listener API without an engine: it
// holds the listeners it is given and closes them on removal.
type recordingEngine struct {
	mu     sync.Mutex
	ls     []fwd.Listener
	gone   []bool
	hook   fwd.SpliceHook
	events []string // "add PORT->TOPORT", "remove PORT->TOPORT", in order
	loop   int      // an eventfd standing for the engine loop's epoll descriptor
}

func (e *recordingEngine) clearEvents() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = nil
}

func (e *recordingEngine) eventList() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.events...)
}

func (e *recordingEngine) AddListener(l fwd.Listener) (fwd.ListenerID, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ls = append(e.ls, l)
	e.gone = append(e.gone, false)
	e.events = append(e.events, fmt.Sprintf("add %d->%d", l.Local.Port(), l.ToPort))
	return fwd.ListenerID(len(e.ls) - 1), nil
}

func (e *recordingEngine) RemoveListener(id fwd.ListenerID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := int(id)
	if !e.gone[i] {
		e.gone[i] = true
		unix.Close(e.ls[i].Fd)
		e.events = append(e.events, fmt.Sprintf("remove %d->%d", e.ls[i].Local.Port(), e.ls[i].ToPort))
	}
}

func (e *recordingEngine) SetSpliceHook(h fwd.SpliceHook) { e.hook = h }

func (e *recordingEngine) LoopFd() int { return e.loop }

// newRecordingEngine is a recordingEngine whose loop descriptor is an
// eventfd, closed when the test ends.
func newRecordingEngine(t *testing.T) *recordingEngine {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &recordingEngine{loop: fd}
}

// open lists the ports of the listeners still open, sorted.
func (e *recordingEngine) open() []uint16 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []uint16
	for i, l := range e.ls {
		if !e.gone[i] {
			out = append(out, l.Local.Port())
		}
	}
	slices.Sort(out)
	return out
}
