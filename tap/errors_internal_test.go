package tap

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenErrorClassification(t *testing.T) {
	for _, tc := range []struct {
		errno       unix.Errno
		unavailable bool
		hint        string
	}{
		{unix.ENOENT, true, "modprobe tun"},
		{unix.ENODEV, true, "modprobe tun"},
		{unix.EACCES, true, "chmod 0666 /dev/net/tun"},
		{unix.EPERM, true, "chmod 0666 /dev/net/tun"},
		{unix.EMFILE, false, ""},
	} {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			err := openError(tc.errno)
			if got := errors.Is(err, ErrTunUnavailable); got != tc.unavailable {
				t.Errorf("errors.Is(ErrTunUnavailable): got %v, want %v", got, tc.unavailable)
			}
			if !errors.Is(err, tc.errno) {
				t.Errorf("errors.Is(%v): got false, want true (Unwrap)", tc.errno)
			}
			if !strings.Contains(err.Error(), tc.hint) {
				t.Errorf("message: got %q, want it to contain %q", err, tc.hint)
			}
		})
	}
	if err := setiffError("x", unix.EPERM); !strings.Contains(err.Error(), "CAP_NET_ADMIN") || errors.Is(err, ErrTunUnavailable) {
		t.Errorf("TUNSETIFF EPERM: got %v, want a CAP_NET_ADMIN hint and not ErrTunUnavailable", err)
	}
}

func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"", "tap0", "tap%d", ".", "a/b", "0123456789abcdef"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := checkName(name)
		if err == nil {
			if len(name) >= unix.IFNAMSIZ || strings.ContainsAny(name, "/: \x00") {
				t.Fatalf("checkName(%q) accepted an invalid name", name)
			}
			if _, err := unix.NewIfreq(name); err != nil {
				t.Fatalf("checkName(%q) accepted a name NewIfreq rejects: %v", name, err)
			}
		} else if !errors.Is(err, ErrInvalidName) {
			t.Fatalf("checkName(%q): got %v, want ErrInvalidName", name, err)
		}
	})
}
