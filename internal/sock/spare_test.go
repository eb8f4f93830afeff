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

// TestSpareRefuse: with no descriptor left, Refuse resets every waiting
// connection (each client reads ECONNRESET), reports the queue empty, and
// holds its spare again afterwards; with the spare lost it asks for a
// pause and resets nothing.
func TestSpareRefuse(t *testing.T) {
	lfd, err := Listen{Addr: netip.MustParseAddr("127.0.0.1")}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(sa.(*unix.SockaddrInet4).Port))
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	s := NewSpare(efd)
	defer s.Close()
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
