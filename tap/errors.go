package tap

// The errors of opening a TAP: /dev/net/tun unavailable, an interface name
// the kernel would refuse.

import (
	"errors"
	"fmt"
)

// ErrTunUnavailable is matched (errors.Is) by an *OpenError when
// /dev/net/tun is missing or this user may not open it.
var ErrTunUnavailable = errors.New("/dev/net/tun unavailable")

// ErrInvalidName is matched by a *NameError.
var ErrInvalidName = errors.New("invalid interface name")

// OpenError reports a failure to open /dev/net/tun or to create the TAP
// interface, with a hint for the cases a user can fix.
type OpenError struct {
	Op   string // "open", "TUNSETIFF", ...
	Path string
	Err  error // the errno
	Hint string
	// unavailable marks the errors that mean "no usable /dev/net/tun".
	unavailable bool
}

func (e *OpenError) Error() string {
	s := fmt.Sprintf("tap: %s %s: %v", e.Op, e.Path, e.Err)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

func (e *OpenError) Unwrap() error { return e.Err }

func (e *OpenError) Is(target error) bool {
	return target == ErrTunUnavailable && e.unavailable
}

// NameError rejects an interface name the kernel would refuse, before
// asking it, so the message can say why.
type NameError struct {
	Name   string
	Reason string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("tap: interface name %q: %s", e.Name, e.Reason)
}

func (e *NameError) Is(target error) bool { return target == ErrInvalidName }
