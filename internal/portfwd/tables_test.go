package portfwd

import (
	"context"
	"errors"
	"testing"

	"github.com/gopasta/gopasta/internal/fwdrule"
)

// TestStartConflict: the same port on two interfaces without an address
// is two overlapping rules to pasta; Start refuses them (the command line
// already does) rather than hold a table its control socket would not
// take back.
func TestStartConflict(t *testing.T) {
	none := []string{"none"}
	_, err := Start(context.Background(), Config{
		Ports: options(t, []string{"%eth0/80", "%eth1/80"}, none, none, none),
		InNS:  func(f func() error) error { return f() }, IPv4: true, IPv6: true, NoSplice: true,
	})
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, fwdrule.ErrConflict) {
		t.Errorf("got %v, want a ConfigError for a conflict", err)
	}
}

func TestCapsFor(t *testing.T) {
	if got, want := capsFor(true, true, false, false, true), fwdrule.AllCaps; got != want {
		t.Errorf("everything: got %#x, want %#x (pasta's)", got, want)
	}
	if got, want := capsFor(true, false, true, false, false), fwdrule.CapIPv4|fwdrule.CapUDP|fwdrule.CapScan; got != want {
		t.Errorf("IPv4, --no-tcp, no device binding: got %#x, want %#x", got, want)
	}
}
