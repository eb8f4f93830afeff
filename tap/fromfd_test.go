package tap_test

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/tap"
)

// openRaw opens /dev/net/tun with TUNSETIFF flags as a caller of --fd
// would, in the calling thread's namespace; name "" leaves no device
// attached.
func openRaw(t *testing.T, name string, flags uint16) int {
	t.Helper()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("/dev/net/tun: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if name == "" {
		return fd
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		t.Fatalf("TUNSETIFF %s %#x: %v", name, flags, err)
	}
	return fd
}

// TestFromFD checks what --fd accepts: a TAP with IFF_NO_PI, with or
// without a virtio-net header, in the calling thread's namespace.
func TestFromFD(t *testing.T) {
	defer nstest.EnterNetns(t)()
	for _, tc := range []struct {
		name  string
		flags uint16
		vnet  bool
	}{
		{"fdtap0", unix.IFF_TAP | unix.IFF_NO_PI, false},
		{"fdtap1", unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR, true},
	} {
		fd := openRaw(t, tc.name, tc.flags)
		d, err := tap.FromFD(fd)
		if err != nil {
			t.Fatalf("%s: FromFD: %v", tc.name, err)
		}
		if d.Name() != tc.name || d.Fd() != fd || d.Index() <= 0 || d.VnetHdr() != tc.vnet {
			t.Errorf("%s: got name %q fd %d index %d vnet %v, want %q %d >0 %v", tc.name, d.Name(), d.Fd(), d.Index(), d.VnetHdr(), tc.name, fd, tc.vnet)
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
			t.Errorf("%s: flags %#x (%v), want O_NONBLOCK", tc.name, fl, err)
		}
		if in, known := d.InNetNS(); known && !in {
			t.Errorf("%s: InNetNS: got false, want true", tc.name)
		}
		if tc.vnet {
			if err := d.SetVnetHdrSize(12); err != nil {
				t.Errorf("%s: SetVnetHdrSize: %v", tc.name, err)
			}
		} else if err := d.SetVnetHdrSize(12); err == nil {
			t.Errorf("%s: SetVnetHdrSize without a header: got nil, want an error", tc.name)
		}
	}
}

// TestFromFDRefuses checks every descriptor --fd must refuse, with its
// reason.
func TestFromFDRefuses(t *testing.T) {
	defer nstest.EnterNetns(t)()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, tc := range []struct {
		what string
		fd   int
		want string
	}{
		{"closed", 1 << 20, "not an open descriptor"},
		{"/dev/null", int(null.Fd()), "not a TAP device"},
		{"unattached", openRaw(t, "", 0), "no device attached"},
		{"tun", openRaw(t, "fdtun0", unix.IFF_TUN|unix.IFF_NO_PI), "a TUN device, not a TAP"},
		{"packet-info", openRaw(t, "fdtap2", unix.IFF_TAP), "without IFF_NO_PI"},
	} {
		if _, err := tap.FromFD(tc.fd); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", tc.what, err, tc.want)
		}
	}
}

// TestFromFDOtherNamespace checks that a TAP of another namespace than the
// calling thread's is refused.
func TestFromFDOtherNamespace(t *testing.T) {
	restore := nstest.EnterNetns(t)
	fd := openRaw(t, "fdtap3", unix.IFF_TAP|unix.IFF_NO_PI)
	restore()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer nstest.EnterNetns(t)() // a third namespace, with no fdtap3
	if _, err := tap.FromFD(fd); err == nil || !strings.Contains(err.Error(), "another network namespace") {
		t.Errorf("TAP of another namespace: got %v, want it refused", err)
	}
}
