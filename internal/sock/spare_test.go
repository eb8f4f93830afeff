package sock

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
)

// spareListener is a TCP listener on a loopback port and a Spare held
// from an eventfd, all closed with t.
func spareListener(t *testing.T) (int, netip.AddrPort, *Spare) {
	t.Helper()
	lfd, err := Listen{Addr: netip.MustParseAddr("127.0.0.1")}.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(lfd) })
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	s := NewSpare(efd)
	t.Cleanup(s.Close)
	return lfd, nstest.LocalAddr(t, lfd), s
}

// TestSpareRefuse: with no descriptor left, Refuse resets every waiting
// connection (each client reads ECONNRESET), reports the queue empty, and
// holds its spare again afterwards; with the spare lost it asks for a
// pause and resets nothing.
func TestSpareRefuse(t *testing.T) {
	lfd, addr, s := spareListener(t)
	if !s.Held() {
		t.Fatal("a new Spare: got none held, want one")
	}

	const n = 3
	var clients []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	var acc Acceptor
	var aerr error
	var got int
	var pause, held bool
	nstest.RunOutOfDescriptors(t, func() {
		_, _, aerr = acc.Accept(lfd)
		got, pause = s.Refuse(lfd, &acc, 16)
		held = s.Held()
	})
	if !errors.Is(aerr, unix.EMFILE) {
		t.Fatalf("accept at the limit: got %v, want EMFILE", aerr)
	}
	if got != n || pause || !held {
		t.Errorf("Refuse: got %d reset, pause %v, spare held %v; want %d, false, true", got, pause, held, n)
	}
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("client %d: got %v, want a reset", i, err)
		}
	}

	// The spare lost (the source descriptor gone, so it cannot be had
	// again): a pause, nothing taken off the queue.
	c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lost := &Spare{fd: -1, from: -1}
	if got, pause := lost.Refuse(lfd, &acc, 16); got != 0 || !pause {
		t.Errorf("Refuse without a spare: got %d reset, pause %v; want 0, true", got, pause)
	}
	fd, _, err := acc.Accept(lfd)
	if err != nil {
		t.Fatalf("the connection left queued: %v", err)
	}
	unix.Close(fd)

	var none *Spare
	if none.Held() {
		t.Error("a nil Spare: got one held, want none")
	}
	none.Renew()
	none.Close()
}

func TestNextAcceptBackoff(t *testing.T) {
	for _, tc := range []struct{ last, want time.Duration }{
		{0, MinAcceptBackoff},
		{MinAcceptBackoff, 2 * MinAcceptBackoff},
		{MaxAcceptBackoff, MaxAcceptBackoff},
		{3 * MaxAcceptBackoff / 4, MaxAcceptBackoff},
	} {
		if got := NextAcceptBackoff(tc.last); got != tc.want {
			t.Errorf("NextAcceptBackoff(%v): got %v, want %v", tc.last, got, tc.want)
		}
	}
}

// TestAcceptFailed: the loops' one rule after a failed accept.
func TestAcceptFailed(t *testing.T) {
	lfd, err := Listen{Addr: netip.MustParseAddr("127.0.0.1")}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	held, lost := NewSpare(efd), NewSpare(-1)
	defer held.Close()
	var acc Acceptor
	for _, tc := range []struct {
		name    string
		s       *Spare
		err     unix.Errno
		backoff time.Duration // before
		want    AcceptNext
		after   time.Duration
	}{
		{"queue empty", held, unix.EAGAIN, time.Second, AcceptDone, 0},
		{"one connection gone", held, unix.ECONNABORTED, 0, AcceptAgain, 0},
		{"out of memory", held, unix.ENOMEM, 0, AcceptPause, MinAcceptBackoff},
		{"out of memory again", held, unix.ENOBUFS, 40 * time.Millisecond, AcceptPause, 80 * time.Millisecond},
		{"out of descriptors, spare held, nothing queued", held, unix.EMFILE, 0, AcceptDone, 0},
		{"out of descriptors, spare lost", lost, unix.ENFILE, time.Second, AcceptPause, MinAcceptBackoff},
	} {
		b := tc.backoff
		if got := tc.s.AcceptFailed(tc.err, lfd, &acc, &b, nil); got != tc.want || b != tc.after {
			t.Errorf("%s: got %d with backoff %v, want %d with %v", tc.name, got, b, tc.want, tc.after)
		}
	}
}

// TestSpareRefuseKeepsSpare: while Refuse resets a queue of connections at
// the descriptor limit, another goroutine making sockets and pipes through
// the gate as fast as it can never gets the number the spare frees for
// each accept, so the spare is held throughout and every connection is
// reset.
func TestSpareRefuseKeepsSpare(t *testing.T) {
	lfd, addr, s := spareListener(t)

	const n = 64
	for range n {
		c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	var acc Acceptor
	var got, stolen int
	var pause, held bool
	nstest.RunOutOfDescriptors(t, func() {
		stop := make(chan struct{})
		done := make(chan int)
		go func() {
			took := 0
			for i := 0; ; i++ {
				select {
				case <-stop:
					done <- took
					return
				default:
				}
				if i%2 == 0 {
					if fd, err := Socket(unix.AF_INET, unix.SOCK_STREAM, 0); err == nil {
						took++
						unix.Close(fd)
					}
				} else {
					var p [2]int
					if Pipe2(&p) == nil {
						took++
						unix.Close(p[0])
						unix.Close(p[1])
					}
				}
			}
		}()
		time.Sleep(time.Millisecond)
		for got < n {
			k, p := s.Refuse(lfd, &acc, 1)
			got += k
			if p || k == 0 {
				pause = p
				break
			}
		}
		held = s.Held()
		close(stop)
		stolen = <-done
	})
	if got != n || pause || !held || stolen != 0 {
		t.Errorf("Refuse beside a goroutine making descriptors: got %d reset, pause %v, spare held %v, %d descriptors made meanwhile; want %d, false, true, 0", got, pause, held, stolen, n)
	}
}
