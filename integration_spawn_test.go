package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/nstest"
)

// TestIntegrationExitStatus checks that gopasta exits with its command's
// status, 128+signal when the command was killed, and 127 when the command
// cannot be found, as a shell would.
func TestIntegrationExitStatus(t *testing.T) {
	tests := []struct {
		name    string
		command []string
		want    int
	}{
		{"exit7", []string{"sh", "-c", "exit 7"}, 7},
		{"exit0", []string{"true"}, 0},
		// The shell may be PID 1 of the new PID namespace, and PID 1 is
		// immune to signals it has no handler for: this only exits 143 if
		// the command runs under an init of gopasta's, as it should.
		{"sigterm", []string{"sh", "-c", "kill -TERM $$"}, 143},
		{"sigterm-child", []string{"sh", "-c", "sh -c 'kill -TERM $$'; exit $?"}, 143},
		{"notfound", []string{"gopasta-no-such-command-xyz"}, 127},
		{"notfound-path", []string{"/nonexistent/gopasta-cmd"}, 127},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					h, bin := setup(t, u)
					args := append([]string{"--config-net", "--"}, tc.command...)
					r := gopasta(t, h, u, bin, args...)
					if r.Code != tc.want || r.Signaled {
						t.Errorf("gopasta -- %q: got exit %d (signaled %v), want %d\n%s", tc.command, r.Code, r.Signaled, tc.want, r)
					}
				})
			}
		})
	}
}

// TestIntegrationSpawnNamespaces checks what the spawned command sees: root
// in its own user namespace, its own hostname, ping allowed for its group,
// and a PID namespace with a /proc of its own.
func TestIntegrationSpawnNamespaces(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		command string
		check   func(t *testing.T, out string)
	}{
		{"uid", nil, "id -u; id -g", func(t *testing.T, out string) {
			if got := strings.Fields(out); len(got) != 2 || got[0] != "0" || got[1] != "0" {
				t.Errorf("id -u; id -g: got %q, want 0 and 0", out)
			}
		}},
		{"hostname", []string{"-H", "gp-test-host"}, "hostname", func(t *testing.T, out string) {
			if got := strings.TrimSpace(out); got != "gp-test-host" {
				t.Errorf("hostname: got %q, want %q", got, "gp-test-host")
			}
		}},
		{"ping_group_range", nil, "cat /proc/sys/net/ipv4/ping_group_range", func(t *testing.T, out string) {
			if got := strings.Join(strings.Fields(out), " "); got != "0 0" {
				t.Errorf("ping_group_range: got %q, want \"0 0\"", got)
			}
		}},
		{"pidns", nil, "ls /proc", func(t *testing.T, out string) {
			// A fresh PID namespace with /proc remounted: only the
			// command, its shell and gopasta's init. The init is a Go
			// program whose threads take PIDs too, so the command's
			// PID is small but not tiny.
			var pids []int
			for _, f := range strings.Fields(out) {
				if n, err := strconv.Atoi(f); err == nil {
					pids = append(pids, n)
				}
			}
			if len(pids) == 0 || len(pids) > 4 || pids[0] != 1 || pids[len(pids)-1] > 64 {
				t.Errorf("PIDs in /proc: got %v, want a handful of small ones (own PID namespace and /proc)", pids)
			}
		}},
	}
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					h, bin := setup(t, u)
					args := append(append([]string{}, tc.args...), "--", "sh", "-c", tc.command)
					r := gopasta(t, h, u, bin, args...)
					if r.Code != 0 {
						t.Fatalf("gopasta %q: got exit %d, want 0\n%s", args, r.Code, r)
					}
					tc.check(t, r.Stdout)
				})
			}
		})
	}
}
