package splice

import (
	"io"
	"testing"
)

// Steady state: once a connection is up, moving bytes allocates nothing,
// in the Forwarder's loop or anywhere else in the process.
func TestSteadyStateAllocs(t *testing.T) {
	r := newRig(t, Options{})
	client, server := r.connect(t)
	msg := randomBytes(t, 4096)
	buf := make([]byte, len(msg))
	echo := func() {
		if _, err := client.Write(msg); err != nil {
			t.Fatalf("client write: %v", err)
		}
		if _, err := io.ReadFull(server, buf); err != nil {
			t.Fatalf("server read: %v", err)
		}
		if _, err := server.Write(buf); err != nil {
			t.Fatalf("server write: %v", err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			t.Fatalf("client read: %v", err)
		}
	}
	echo() // warm up: the again lists and pools reach their size
	if got := testing.AllocsPerRun(500, echo); got > 0.05 {
		t.Errorf("got %.2f allocations per round trip, want 0", got)
	}
}

func TestUDPSteadyStateAllocs(t *testing.T) {
	r := newUDPRig(t, Options{})
	msg := randomBytes(t, 1200)
	buf := make([]byte, 2000)
	var back = r.front
	round := func() {
		if _, err := r.client.WriteToUDP(msg, back); err != nil {
			t.Fatalf("send: %v", err)
		}
		if _, err := r.server.Read(buf); err != nil {
			t.Fatalf("receive: %v", err)
		}
	}
	round()
	// The test's own WriteToUDP allocates nothing either, so any count is
	// the Forwarder's.
	if got := testing.AllocsPerRun(500, round); got > 0.05 {
		t.Errorf("got %.2f allocations per datagram, want 0", got)
	}
}
