package e2e

// runc alone (Debian 12's 1.1.5) runs gopasta --oci-hook from a bundle's
// hand-written config.json, as a createRuntime and as a prestart hook: as
// root, and rootless as uid 65534 (a user namespace mapping only that uid,
// so the hook joins it through nsenter before it can join the network
// namespace).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/ocihook"
)

// runcBundle writes a bundle whose container runs script, with gopasta as
// its stage hook (hookArgs after --oci-hook) and annotation ann. netns
// false leaves the container in the runtime's network namespace.
func runcBundle(t *testing.T, e *env, dir, stage string, hookArgs []string, ann, script string, netns bool) {
	t.Helper()
	busyboxRoot(t, filepath.Join(dir, "rootfs"))
	caps := []string{"CAP_NET_BIND_SERVICE", "CAP_KILL"}
	namespaces := []map[string]string{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}
	if netns {
		namespaces = append(namespaces, map[string]string{"type": "network"})
	}
	linux := map[string]any{}
	if !e.u.Root() {
		namespaces = append(namespaces, map[string]string{"type": "user"})
		linux["uidMappings"] = []map[string]int{{"containerID": 0, "hostID": e.u.UID, "size": 1}}
		linux["gidMappings"] = []map[string]int{{"containerID": 0, "hostID": e.u.GID, "size": 1}}
	}
	linux["namespaces"] = namespaces
	cfg := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]int{"uid": 0, "gid": 0},
			"args":     []string{"sh", "-c", script},
			"env":      []string{"PATH=/bin"},
			"cwd":      "/",
			"capabilities": map[string][]string{
				"bounding": caps, "effective": caps, "permitted": caps,
			},
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "gopasta-e2e",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "mode=755", "size=1m"}},
			{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "size=1m"}},
		},
		"hooks": map[string]any{
			stage: []map[string]any{{
				"path": e.bin,
				"args": append([]string{"gopasta", "--oci-hook"}, hookArgs...),
			}},
		},
		"annotations": map[string]string{ocihook.ArgsAnnotation: ann},
		"linux":       linux,
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOCIRunc: a rootless (and a root) runc container gets its network
// from the hook in either stage: configured, reaching the host through the
// gateway and a host address, serving the annotation's forwarded port, its
// gopasta gone after the container; a bundle without a network namespace
// of its own fails to start with gopasta's line.
func TestOCIRunc(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			runc := requireTool(t, "runc", "the OCI runtime the hook is tested with")
			e := newEnv(t, u, hostSetup{peers: true})
			h := e.h.NetOnly() // runc needs the host's cgroup mounts
			hostPort := e.serveTCP(t, "0.0.0.0:0", "")
			for _, stage := range []string{"createRuntime", "prestart"} {
				t.Run(stage, func(t *testing.T) {
					top := nstest.TempDir(t)
					state := userDir(t, u, top, "state", 0o700)
					work := userDir(t, u, top, "work", 0o755)
					bundle := filepath.Join(top, "bundle")
					log, pidFile := filepath.Join(work, "hook.log"), filepath.Join(work, "gopasta.pid")
					port := e.freePort(t)
					token := "hello-" + stage
					ann := fmt.Sprintf("-t %d:80 -l %s -P %s", port, log, pidFile)
					runcBundle(t, e, bundle, stage, []string{"--config-net"}, ann, containerScript(hostPort, token), true)
					id := nstest.UniqueName("gp-" + strings.ToLower(stage))
					start := time.Now()
					proc := h.Start(u, runc, "--root", state, "run", "--bundle", bundle, id)
					out := waitOutput(t, proc, "runc run", 60*time.Second)
					t.Logf("runc run to ready: %v", time.Since(start))
					checkContainerOutput(t, out)
					e.waitToken(t, addrPort("127.0.0.1", port), token)
					e.waitToken(t, addrPort(peer4, port), token)
					gp, err := nstest.ReadPIDFile(pidFile)
					if err != nil {
						t.Fatalf("the annotation's -P file: %v", err)
					}
					nstest.KillOnCleanup(t, gp)
					if ps := gopastaProcs(t, u.UID, e.bin, log); len(ps) != 1 || ps[0].pid != gp {
						t.Errorf("gopasta processes serving the container: got %v, want one, pid %d (its -P file)", ps, gp)
					}
					if b, err := os.ReadFile(log); err != nil || !strings.Contains(string(b), "namespace interface") {
						t.Errorf("the annotation's -l %s: got %q (%v), want gopasta's log", log, b, err)
					}
					if r := runIn(t, h, u, runc, "--root", state, "kill", id, "KILL"); r.Code != 0 {
						t.Errorf("runc kill: %s", r)
					}
					if _, ok := proc.Wait(30 * time.Second); !ok {
						t.Errorf("runc run: got still running 30s after runc kill, want it ended")
					}
					if _, err := nstest.WaitGone(gp, 5*time.Second); err != nil {
						t.Errorf("gopasta (pid %d) after the container ended: %v", gp, err)
					}
					waitNoGopasta(t, u.UID, e.bin, time.Second, log)
				})
			}
			t.Run("no-network-namespace", func(t *testing.T) {
				top := nstest.TempDir(t)
				state := userDir(t, u, top, "state", 0o700)
				log := filepath.Join(userDir(t, u, top, "work", 0o755), "hook.log")
				bundle := filepath.Join(top, "bundle")
				runcBundle(t, e, bundle, "createRuntime", []string{"--config-net"}, "-l "+log, "true", false)
				r := runIn(t, h, u, runc, "--root", state, "run", "--bundle", bundle, nstest.UniqueName("gp-hostnet"))
				if r.Code == 0 || !strings.Contains(r.Stderr, "shares the network namespace the hook runs in (the host's)") {
					t.Errorf("runc run of a container in the host's network namespace: got %s, want it refused with gopasta's line", r)
				}
				if _, err := os.Stat(log); err == nil {
					t.Errorf("got %s, want gopasta never started", log)
				}
				waitNoGopasta(t, u.UID, e.bin, time.Second, log)
			})
		})
	}
}
