package sandbox

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-seccomp-bpf/arch"

	"github.com/gopasta/gopasta/internal/sandbox/syscallgraph"
)

// The hand-kept lists of TestAllowlistDerived: where the call graph is
// coarser than the program. Each entry says why; one that no longer
// matches the code fails the test, so none outlives the code it is about.
// Functions are named as go/ssa names them (syscallgraph.Entry).
var derive = syscallgraph.Config{
	Dir: "../..", Pattern: ".",
	Point: "github.com/gopasta/gopasta/internal/sandbox.installFilter",
	Sync: []syscallgraph.Entry{{
		Func: "(*github.com/gopasta/gopasta/ns.Thread).Do",
		Why:  "Do hands fn to the namespace thread and waits for its result: fn runs before Do returns",
	}},
	NotFrame: []syscallgraph.Entry{{
		Func: "github.com/gopasta/gopasta/internal/cmdline.Parse",
		Why: "Parse runs a cli.App whose action only keeps the configuration; the graph joins every cli.App's action, " +
			"Main's (which runs run.Run) included, and so puts Parse on a path to the sandbox",
	}},
	Cut: []syscallgraph.Entry{{
		Caller: "github.com/gopasta/gopasta/ns.startLocked$1", Func: "(*os/exec.Cmd).Start",
		Why: "the goroutine starts the command and hands Start's result to startLocked, which waits for it: " +
			"Start runs before Spawn (or ReexecInUserNS) returns; what the goroutine does next (Wait) stays in",
	}, {
		Caller: "(*github.com/gopasta/gopasta/ns.Thread).loop", Func: "golang.org/x/sys/unix.Setns",
		Why: "the namespace thread joins the namespace as it starts, and Enter waits for that, long before the sandbox; " +
			"after it the loop only runs what Do gives it",
	}, {
		Caller: "github.com/mdlayher/socket.Socket", Func: "github.com/mdlayher/socket.withNetNS",
		Why: "only for a socket.Config (netlink.Config) with NetNS set, which gopasta never sets: " +
			"its namespace-side netlink sockets are made on the namespace thread (ns/route.go, internal/sockdiag)",
	}, {
		Caller: "(*os/exec.Cmd).Start", Func: "(*os/exec.Cmd).Start$2",
		Why: "exec starts goroutines copying a command's standard streams only for streams that are not *os.File: " +
			"gopasta gives its commands files (ns/spawn.go, internal/run/daemon.go)",
	}, {
		Caller: "(*os/exec.Cmd).Start", Func: "(*os/exec.Cmd).watchCtx",
		Why: "only for a command with a context (exec.CommandContext): gopasta's have none",
	}, {
		Caller: "(*time.Location).get", Func: "time.initLocal",
		Why: "the local zone loads once (a sync.Once), and Apply loads it before the filter goes on (time.Local.String())",
	}, {
		Caller: "io.ReadAtLeast", Func: "(crypto/internal/rand.reader).Read",
		Why: "the graph gives io.ReadAtLeast every io.Reader of the program; crypto/rand's reaches it only through " +
			"crypto/rand.Read's path for a replaced rand.Reader (gopasta replaces none), and gopasta reads random bytes " +
			"only for the engine's ISN key (internal/seqnum, rand.Read), before the sandbox",
	}},
	NoReturn: []string{"syscall.Exit"},
}

// TestAllowlistDerived derives from the code, for amd64 and arm64, every
// system call that code running after the sandbox can make
// (internal/sandbox/syscallgraph says how), and compares it with the
// allowlist both ways: every such call must have an entry (a call without
// one kills gopasta), and every entry not marked runtime must be such a
// call (one that is not only widens the sandbox).
func TestAllowlistDerived(t *testing.T) {
	if cgoRuntime {
		t.Skip("skipped in a cgo build (the race detector's): the derivation is static, and the plain run does it")
	}
	for _, a := range []struct {
		goarch string
		info   *arch.Info
	}{{"amd64", arch.X86_64}, {"arm64", arch.AARCH64}} {
		t.Run(a.goarch, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			cfg := derive
			cfg.GOARCH = a.goarch
			r, err := syscallgraph.Analyze(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d roots, %d functions after the sandbox, %d system calls, in %v",
				len(r.Roots), r.Reached, len(r.Calls), time.Since(start).Round(time.Millisecond))
			for _, s := range r.Stale {
				t.Errorf("hand-kept list: %s", s)
			}
			for _, u := range r.Unresolved {
				t.Errorf("%s: name the system call with a constant", u)
			}
			listed := map[string]rule{}
			for _, rl := range forArch(a.goarch) {
				listed[rl.name] = rl
			}
			name := func(nr int) string {
				if n, ok := a.info.SyscallNumbers[nr]; ok {
					return n
				}
				return fmt.Sprintf("unknown system call %d", nr)
			}

			derived := map[string]bool{}
			for _, nr := range slices.Sorted(maps.Keys(r.Calls)) {
				c := r.Calls[nr]
				derived[name(nr)] = true
				if testing.Verbose() {
					var sites []string
					for _, st := range c.Sites {
						sites = append(sites, fmt.Sprintf("%s (%s:%d)", st.Fn, filepath.Base(st.Pos.Filename), st.Pos.Line))
					}
					t.Logf("%s (%d): %s", name(nr), nr, strings.Join(sites, ", "))
				}
				if _, ok := listed[name(nr)]; ok {
					continue
				}
				site := c.Sites[0]
				t.Errorf("%s (%d) is made after the sandbox but is not in the allowlist (allowlist.go): "+
					"add it with a reason, or show why it cannot happen (derive_test.go)\n"+
					"  made by %s at %s\n  shortest path from code running after the sandbox:\n    %s%s",
					name(nr), nr, site.Fn, site.Pos, strings.Join(r.Path(site.Fn), "\n    "), otherSites(c))
			}
			for i, k := range derive.Known {
				var missing []string
				for nr := range r.Known[i] {
					if _, ok := listed[name(nr)]; !ok {
						missing = append(missing, name(nr))
					}
				}
				slices.Sort(missing)
				if len(missing) == 0 {
					t.Errorf("known finding %s -> %s (%s) now leads to no call outside the allowlist: remove it from derive.Known",
						k.Caller, k.Func, k.Why)
					continue
				}
				t.Logf("known finding, not yet fixed: %s -> %s leads to %s, not in the allowlist: %s\n    %s",
					k.Caller, k.Func, strings.Join(missing, ", "), k.Why, strings.Join(r.KnownPaths[i], "\n    "))
			}
			for _, rl := range forArch(a.goarch) {
				if !rl.runtime && !derived[rl.name] {
					t.Errorf("%s is in the allowlist, not marked runtime, but no code after the sandbox calls it: "+
						"remove it (it widens the sandbox for nothing), or mark it runtime if the Go runtime makes it", rl.name)
				}
			}
		})
	}
}

// otherSites lists where else c is made, a few of them.
func otherSites(c *syscallgraph.Call) string {
	if len(c.Sites) < 2 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n  also made by:")
	for i, s := range c.Sites[1:] {
		if i == 5 {
			fmt.Fprintf(&b, "\n    (%d more)", len(c.Sites)-6)
			break
		}
		fmt.Fprintf(&b, "\n    %s at %s", s.Fn, s.Pos)
	}
	return b.String()
}
