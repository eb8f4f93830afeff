package e2e

// Rootless podman (Debian 12's 4.3.1, which has no pasta network mode)
// gives its containers gopasta's network through a hooks.d entry: runc as
// the runtime (crun 1.8.1 refuses hybrid cgroup hierarchies), the cgroupfs
// manager, --network none, and the opt-in annotation carrying per-container
// options. The image is imported from a busybox-static root file system:
// there is no registry.

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/ocihook"
)

// podmanImage is the name the busybox image is imported under.
const podmanImage = "localhost/gopasta-e2e-busybox"

// podman runs podman as a user with subordinate ids, with its own storage,
// runtime directory and hooks.d under one directory.
type podman struct {
	e     *env
	h     *nstest.Host // e.h, keeping the host's mounts (cgroups for runc)
	bin   string
	dir   string // owned by the user: logs, pid files
	base  []string
	hooks string
}

// newPodman prepares storage and hooks.d for e.u and imports the image.
func newPodman(t *testing.T, e *env) *podman {
	t.Helper()
	bin := requireTool(t, "podman", "rootless containers driven through the OCI hook")
	requireTool(t, "runc", "podman's runtime here: crun refuses hybrid cgroup hierarchies")
	top := nstest.TempDir(t)
	u := e.u
	p := &podman{e: e, h: e.h.NetOnly(), bin: bin, dir: userDir(t, u, top, "work", 0o755)}
	home := userDir(t, u, top, "home", 0o700)
	run := userDir(t, u, top, "run", 0o700)
	p.hooks = filepath.Join(top, "hooks.d")
	if err := os.Mkdir(p.hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	// The entry docs/oci-hook.md shows, with this test's binary.
	entry := map[string]any{
		"version": "1.0.0",
		"hook": map[string]any{
			"path": e.bin,
			"args": []string{"gopasta", "--oci-hook", "--config-net"},
		},
		"when":   map[string]any{"annotations": map[string]string{`^io\.gopasta\.args$`: ".*"}},
		"stages": []string{"createRuntime"},
	}
	b, _ := json.MarshalIndent(entry, "", "  ")
	if err := os.WriteFile(filepath.Join(p.hooks, "gopasta.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	p.base = []string{"env", "HOME=" + home, "XDG_RUNTIME_DIR=" + run,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		bin, "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
		"--storage-driver", "vfs", "--hooks-dir", p.hooks}

	tarball := filepath.Join(top, "rootfs.tar")
	rootfs := filepath.Join(top, "rootfs")
	busyboxRoot(t, rootfs)
	writeTar(t, rootfs, tarball)
	if r := p.run(t, "import", tarball, podmanImage); r.Code != 0 {
		t.Fatalf("podman import: %s", r)
	}
	return p
}

// writeTar archives dir into file, owned by root, as podman import wants.
func writeTar(t *testing.T, dir, file string) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name, _ = filepath.Rel(dir, path)
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatalf("archiving %s: %v", dir, err)
	}
}

// cmd is the command line of podman with args.
func (p *podman) cmd(args ...string) []string { return slices.Concat(p.base, args) }

// run runs podman with args in the host namespace as the user.
func (p *podman) run(t *testing.T, args ...string) nstest.Result {
	t.Helper()
	return runIn(t, p.h, p.e.u, p.cmd(args...)...)
}

// runIn is env.runArgv on another view of the host namespace.
func runIn(t *testing.T, h *nstest.Host, u nstest.User, argv ...string) nstest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	r := h.RunContext(ctx, u, argv...)
	if r.TimedOut {
		t.Fatalf("%q: got no exit within %v, want it to finish\n%s", argv, runTimeout, r)
	}
	checkNoPanic(t, r)
	return r
}

// container is one `podman run` in the background.
type container struct {
	name, log, pidFile string
	proc               *nstest.Proc
}

// start runs a container named name whose annotation adds "-t PORT:80"
// plus -l and -P files of its own, serving token (containerScript).
func (p *podman) start(t *testing.T, name string, port, hostPort int, token string) *container {
	t.Helper()
	c := &container{name: name, log: filepath.Join(p.dir, name+".log"), pidFile: filepath.Join(p.dir, name+".pid")}
	ann := fmt.Sprintf("%s=-t %d:80 -l %s -P %s", ocihook.ArgsAnnotation, port, c.log, c.pidFile)
	c.proc = p.h.Start(p.e.u, p.cmd("run", "--rm", "--name", name, "--network", "none",
		"--annotation", ann, podmanImage, "sh", "-c", containerScript(hostPort, token))...)
	return c
}

// inspectPID is the container's process as podman knows it.
func (p *podman) inspectPID(t *testing.T, name string) int {
	t.Helper()
	r := p.run(t, "inspect", "--format", "{{.State.Pid}}", name)
	pid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if r.Code != 0 || err != nil || pid <= 0 {
		t.Fatalf("podman inspect %s: got %q (%v), want its PID\n%s", name, r.Stdout, err, r)
	}
	return pid
}

// remove is `podman rm -f`, then waits for the `podman run` to end.
func (p *podman) remove(t *testing.T, c *container) {
	t.Helper()
	if r := p.run(t, "rm", "--force", "--time", "0", c.name); r.Code != 0 {
		t.Errorf("podman rm %s: %s", c.name, r)
	}
	if _, ok := c.proc.Wait(30 * time.Second); !ok {
		t.Errorf("podman run %s: got still running 30s after podman rm, want it ended", c.name)
	}
}

// TestOCIPodman: rootless podman with the hooks.d entry and the annotation.
func TestOCIPodman(t *testing.T) {
	u := subidUser(t)
	e := newEnv(t, u, hostSetup{peers: true})
	p := newPodman(t, e)
	hostPort := e.serveTCP(t, "0.0.0.0:0", "")

	// One container: configured, reaches the host both ways, serves the
	// annotation's port; its gopasta is the only one of the user and
	// serves its PID; after podman rm nothing of it is left.
	t.Run("serve", func(t *testing.T) {
		port := e.freePort(t)
		start := time.Now()
		c := p.start(t, "gp-serve", port, hostPort, "hello-serve")
		out := waitOutput(t, c.proc, "podman run", 60*time.Second)
		t.Logf("podman run to ready: %v; the container printed:\n%s", time.Since(start), out)
		checkContainerOutput(t, out)
		e.waitToken(t, addrPort("127.0.0.1", port), "hello-serve")
		e.waitToken(t, addrPort(peer4, port), "hello-serve")
		cpid := p.inspectPID(t, c.name)
		gp, err := nstest.ReadPIDFile(c.pidFile)
		if err != nil {
			t.Fatalf("the annotation's -P file: %v", err)
		}
		ps := gopastaProcs(t, u.UID, e.bin)
		if len(ps) != 1 || ps[0].pid != gp || ps[0].args[len(ps[0].args)-1] != strconv.Itoa(cpid) {
			t.Errorf("gopasta processes of %s: got %v, want one, pid %d (its -P file), serving container pid %d", u.Name, ps, gp, cpid)
		}
		if b, err := os.ReadFile(c.log); err != nil || !strings.Contains(string(b), "namespace interface") {
			t.Errorf("the annotation's -l %s: got %q (%v), want gopasta's log", c.log, b, err)
		}
		p.remove(t, c)
		waitNoGopasta(t, u.UID, e.bin, 5*time.Second)
	})

	// Two containers at once, each with its own gopasta and port.
	t.Run("two", func(t *testing.T) {
		p1, p2 := e.freePort(t), e.freePort(t)
		for p2 == p1 {
			p2 = e.freePort(t)
		}
		c1 := p.start(t, "gp-one", p1, hostPort, "hello-one")
		c2 := p.start(t, "gp-two", p2, hostPort, "hello-two")
		checkContainerOutput(t, waitOutput(t, c1.proc, "podman run gp-one", 60*time.Second))
		checkContainerOutput(t, waitOutput(t, c2.proc, "podman run gp-two", 60*time.Second))
		e.waitToken(t, addrPort("127.0.0.1", p1), "hello-one")
		e.waitToken(t, addrPort("127.0.0.1", p2), "hello-two")
		want := []string{strconv.Itoa(p.inspectPID(t, c1.name)), strconv.Itoa(p.inspectPID(t, c2.name))}
		var got []string
		for _, gp := range gopastaProcs(t, u.UID, e.bin) {
			got = append(got, gp.args[len(gp.args)-1])
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("gopasta processes serving: got container pids %q, want one each for %q", got, want)
		}
		p.remove(t, c1)
		e.waitToken(t, addrPort("127.0.0.1", p2), "hello-two") // the other one goes on
		p.remove(t, c2)
		waitNoGopasta(t, u.UID, e.bin, 5*time.Second)
	})

	// A container that exits at once leaves nothing behind either; an
	// empty annotation opts in with the hook's options alone.
	t.Run("exits-at-once", func(t *testing.T) {
		for _, ann := range []string{"-t " + strconv.Itoa(e.freePort(t)) + ":80", ""} {
			r := p.run(t, "run", "--rm", "--network", "none", "--annotation", ocihook.ArgsAnnotation+"="+ann,
				podmanImage, "sh", "-c", "ip -o -4 addr show")
			if r.Code != 0 || !strings.Contains(r.Stdout, " "+nstest.HostAddr4+"/") {
				t.Errorf("podman run (annotation %q) that exits at once: got %s, want exit 0 with %s configured", ann, r, nstest.HostAddr4)
			}
			waitNoGopasta(t, u.UID, e.bin, 5*time.Second)
		}
	})

	// Without the annotation the hook does not run: podman's own
	// --network none stays as it is.
	t.Run("not-opted-in", func(t *testing.T) {
		r := p.run(t, "run", "--rm", "--network", "none", podmanImage, "sh", "-c", "ip -o link show")
		if r.Code != 0 || strings.Contains(r.Stdout, nstest.HostIfName) {
			t.Errorf("podman run without the annotation: got %s, want exit 0 and only lo", r)
		}
	})

	// A bad annotation aborts the start with gopasta's line, and nothing
	// is left running.
	t.Run("bad-annotation", func(t *testing.T) {
		r := p.run(t, "run", "--rm", "--network", "none", "--annotation", ocihook.ArgsAnnotation+"=-t 70000",
			podmanImage, "true")
		if r.Code == 0 || !strings.Contains(r.Stderr, `gopasta: annotation io.gopasta.args: invalid --tcp-ports value "70000"`) {
			t.Errorf("podman run with a bad annotation: got %s, want a failure showing gopasta's error line", r)
		}
		t.Logf("podman said: %s", r.Stderr)
		waitNoGopasta(t, u.UID, e.bin, 5*time.Second)
	})
}
