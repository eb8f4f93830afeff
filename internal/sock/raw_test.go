package sock

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestConnectSAKeepsScope: a link-local destination needs its scope, which
// ConnectSA passes on (the kernel refuses one without it with EINVAL).
func TestConnectSAKeepsScope(t *testing.T) {
	lo, err := zoneIndex("lo")
	if err != nil {
		t.Skipf("no lo: %v", err)
	}
	for _, tc := range []struct {
		scope  uint32
		einval bool
	}{{0, true}, {uint32(lo), false}} {
		fd, err := Socket(unix.AF_INET6, unix.SOCK_DGRAM, 0)
		if err != nil {
			t.Skipf("no IPv6 socket: %v", err)
		}
		err = ConnectSA(fd, &unix.SockaddrInet6{Addr: [16]byte{0: 0xfe, 1: 0x80, 15: 1}, Port: 9, ZoneId: tc.scope})
		Close(fd)
		if got := err == unix.EINVAL; got != tc.einval {
			t.Errorf("connect to [fe80::1%%%d]:9: got %v, want EINVAL %v", tc.scope, err, tc.einval)
		}
	}
}
