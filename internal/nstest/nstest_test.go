package nstest

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHostNSFixture(t *testing.T) {
	for _, u := range Users() {
		t.Run(u.Name, func(t *testing.T) {
			h := HostNS(t)
			r := h.Run(u, "id", "-u")
			if got, want := strings.TrimSpace(r.Stdout), strconv.Itoa(u.UID); r.Code != 0 || got != want {
				t.Fatalf("id -u in host ns: got %q (%s), want %q", got, r, want)
			}
			r = h.Run(u, "ip", "-j", "addr")
			links, err := ParseLinks(r.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			eth, ok := FindLink(links, HostIfName)
			if !ok {
				t.Fatalf("links: got %v, want one named %s", Names(links), HostIfName)
			}
			got := eth.GlobalAddrs()
			for _, want := range []string{"192.0.2.1/24", "2001:db8::1/64"} {
				if !slices.Contains(got, want) {
					t.Errorf("%s addresses: got %v, want %s among them", HostIfName, got, want)
				}
			}
			if lo, _ := FindLink(links, "lo"); !lo.Up() {
				t.Errorf("lo flags: got %v, want UP", lo.Flags)
			}
			for _, fam := range []struct{ flag, gw string }{{"-4", HostGW4}, {"-6", HostGW6}} {
				r := h.Run(u, "ip", "-j", fam.flag, "route")
				rs, err := ParseRoutes(r.Stdout)
				if err != nil {
					t.Fatal(err)
				}
				d, ok := DefaultRoute(rs)
				if !ok || d.Gateway != fam.gw || d.Dev != HostIfName {
					t.Errorf("ip %s route default: got %+v, want via %s dev %s", fam.flag, d, fam.gw, HostIfName)
				}
			}
		})
	}
}

func TestHostNSCleanupKillsProcesses(t *testing.T) {
	var pid int
	t.Run("inner", func(t *testing.T) {
		h := HostNS(t)
		p := h.Start(Nobody, "sleep", "300")
		pid = p.PID()
		if !PIDAlive(pid) {
			t.Fatalf("sleep pid %d: got dead, want alive", pid)
		}
	})
	if pid == 0 {
		return // skipped
	}
	if _, err := WaitGone(pid, 5*time.Second); err != nil {
		t.Errorf("after cleanup: %v, want it killed", err)
	}
}

func TestRunTimeoutAndExitCodes(t *testing.T) {
	h := HostNS(t)
	tests := []struct {
		argv     []string
		wantCode int
		wantSig  bool
	}{
		{[]string{"true"}, 0, false},
		{[]string{"sh", "-c", "exit 7"}, 7, false},
		{[]string{"sh", "-c", "kill -TERM $$"}, 143, true},
	}
	for _, tc := range tests {
		r := h.Run(RootUser, tc.argv...)
		if r.Code != tc.wantCode || r.Signaled != tc.wantSig {
			t.Errorf("%q: got code %d signaled %v, want %d %v", tc.argv, r.Code, r.Signaled, tc.wantCode, tc.wantSig)
		}
	}
	// A daemon holding stdout must not hang Run.
	start := time.Now()
	r := h.Run(RootUser, "sh", "-c", "sleep 30 & exit 0")
	if !r.PipesHeld || time.Since(start) > 10*time.Second {
		t.Errorf("backgrounded child holding stdout: got pipesheld=%v after %v, want true within 10s", r.PipesHeld, time.Since(start))
	}
}

func TestReadPIDFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		content string
		want    int
		wantErr bool
	}{
		{"123\n", 123, false},
		{"42", 42, false},
		{"", 0, true},
		{"-5\n", 0, true},
		{"abc\n", 0, true},
	}
	for i, tc := range tests {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPIDFile(p)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ReadPIDFile(%q): got %d, %v, want %d, error %v", tc.content, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestPIDAlive(t *testing.T) {
	if got := PIDAlive(os.Getpid()); !got {
		t.Errorf("PIDAlive(self): got false, want true")
	}
	if got := PIDAlive(1 << 23); got {
		t.Errorf("PIDAlive(2^23): got true, want false")
	}
}

func TestParse(t *testing.T) {
	links, err := ParseLinks(`[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP"],"mtu":65536,"addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host"}]},{"ifindex":2,"ifname":"eth0","flags":["BROADCAST"],"mtu":1500,"addr_info":[{"family":"inet6","local":"2001:db8::1","prefixlen":64,"scope":"global"}]}]`)
	if err != nil {
		t.Fatal(err)
	}
	lo, _ := FindLink(links, "lo")
	eth, _ := FindLink(links, "eth0")
	if !lo.Up() || eth.Up() || eth.MTU != 1500 {
		t.Errorf("got lo up %v eth0 up %v mtu %d, want true false 1500", lo.Up(), eth.Up(), eth.MTU)
	}
	if got := eth.GlobalAddrs(); !slices.Equal(got, []string{"2001:db8::1/64"}) {
		t.Errorf("GlobalAddrs: got %v, want [2001:db8::1/64]", got)
	}
	if _, err := ParseLinks("not json"); err == nil {
		t.Errorf("ParseLinks(garbage): got nil error, want one")
	}
	rs, err := ParseRoutes(`[{"dst":"default","gateway":"192.0.2.254","dev":"eth0","flags":["onlink"]}]`)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := DefaultRoute(rs); !ok || d.Gateway != "192.0.2.254" {
		t.Errorf("DefaultRoute: got %+v %v, want via 192.0.2.254", d, ok)
	}
}
