package nstest

// Work inside the host namespace from the test process: sockets, sysctls,
// resolv.conf, and the test binary itself as a command.

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Do runs f on an OS thread that has joined the host namespace's network
// namespace, and returns f's error. Sockets f creates belong to that
// namespace for good, wherever they are used afterwards: this is how a test
// puts an in-process peer (an echo server, a resolver) "on the host".
func (h *Host) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked: when this goroutine returns the
		// runtime ends the thread, so its namespace cannot leak into
		// goroutines scheduled on it later.
		runtime.LockOSThread()
		fd, err := unix.Open(h.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("opening %s: %w", h.Path(), err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", h.Path(), err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Listen is net.Listen inside the host namespace. The listener is closed in
// t.Cleanup.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := h.Do(func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	h.t.Cleanup(func() { l.Close() })
	return l, nil
}

// ListenPacket is net.ListenPacket inside the host namespace, closed in
// t.Cleanup.
func (h *Host) ListenPacket(network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := h.Do(func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	h.t.Cleanup(func() { pc.Close() })
	return pc, nil
}

// Sysctl sets a sysctl inside the host namespace (key as sysctl(8) spells
// it, e.g. net.ipv4.ping_group_range).
func (h *Host) Sysctl(key, value string) error {
	return runHostCmd("ip", "netns", "exec", h.name, "sysctl", "-q", "-w", key+"="+value)
}

// AllowPing lets every group open ICMP echo (ping) sockets in the host
// namespace, so gopasta forwards echo requests as root and as uid 65534.
func (h *Host) AllowPing() {
	h.t.Helper()
	if err := h.Sysctl("net.ipv4.ping_group_range", "0 2147483647"); err != nil {
		h.t.Fatalf("allowing ping sockets: %v", err)
	}
}

// SetResolvConf gives commands started through the Host (`ip netns exec`
// bind-mounts /etc/netns/NAME/resolv.conf over /etc/resolv.conf) their own
// resolver configuration. The directory goes in t.Cleanup; /etc/netns itself
// stays, since concurrent tests may be using it.
func (h *Host) SetResolvConf(content string) {
	h.t.Helper()
	dir := filepath.Join("/etc/netns", h.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatalf("creating %s: %v", dir, err)
	}
	h.t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(content), 0o644); err != nil {
		h.t.Fatalf("writing resolv.conf for %s: %v", h.name, err)
	}
}

var (
	selfOnce sync.Once
	selfPath string
	selfErr  error
)

// SelfBinary returns a copy of the running test binary that every identity
// can execute (go test keeps the original in a 0700 directory), so a test
// can run parts of itself inside a namespace as any user: re-executed, the
// binary decides what to do from its arguments before the tests start (in
// its TestMain). The copy lives next to Binary's build and is swept the
// same way.
func SelfBinary(t testing.TB) string {
	t.Helper()
	selfOnce.Do(func() { selfPath, selfErr = copySelf() })
	if selfErr != nil {
		t.Fatalf("copying the test binary: %v", selfErr)
	}
	return selfPath
}

func copySelf() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", buildDirPrefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst := filepath.Join(dir, "selftest")
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return "", err
	}
	return dst, out.Close()
}
