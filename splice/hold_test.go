package splice

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/epoll"
)

// TestOneProcessor: with one processor the loop holds it while it waits
// (package epoll), and connections are served all the same, one after
// another and back and forth on one, while a peer loop it watches keeps
// having events and a goroutine beside it keeps needing the processor.
func TestOneProcessor(t *testing.T) {
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)

	f, err := NewForwarder(Options{})
	if err != nil {
		t.Fatal(err)
	}
	peer, err := epoll.New()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	ev, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ev)
	pe := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(ev)}
	if err := unix.EpollCtl(peer.Fd(), unix.EPOLL_CTL_ADD, ev, &pe); err != nil {
		t.Fatal(err)
	}
	if err := f.WatchPeer(peer.Fd()); err != nil {
		t.Fatalf("WatchPeer: %v", err)
	}
	r := &rig{f: f, done: make(chan error, 1), front: listen(t), back: listen(t)}
	go func() { r.done <- f.Run(context.Background()) }()
	defer func() {
		f.Close()
		select {
		case <-r.done:
		case <-time.After(testTimeout):
			t.Error("Run did not return after Close")
		}
	}()
	go echoBack(r.back)
	addr, _ := tcpListenerTo(t, r, addrPort(t, r.back.Addr()))

	// The peer loop's events and a ticking goroutine, all along.
	stop := make(chan struct{})
	defer close(stop)
	ticks := make(chan struct{}, 1)
	go func() {
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				unix.Write(ev, one)
				select {
				case ticks <- struct{}{}:
				default:
				}
			}
		}
	}()

	for i := range 200 {
		if err := roundTrip(addr, fmt.Sprintf("connection %d", i)); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	c, err := net.DialTimeout("tcp", addr.String(), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(deadlineIn())
	var b [1]byte
	for i := range 1000 {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatalf("exchange %d: write: %v", i, err)
		}
		if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != byte(i) {
			t.Fatalf("exchange %d: got %v, %v back, want %d", i, b[0], err, byte(i))
		}
	}
	select {
	case <-ticks:
	case <-time.After(testTimeout):
		t.Fatal("the ticking goroutine never ran beside the loop")
	}
}
