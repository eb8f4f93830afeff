package e2e

// The roles of the test binary: the tests themselves, gopasta (asMainEnv),
// or the namespace side's peer (peerFlag).

import (
	"os"
	"testing"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/run"
	"github.com/gopasta/gopasta/internal/vmtest"
)

// asMainEnv makes the test binary act as gopasta itself: in the VM guest
// this binary is the only one there is. It stays set for gopasta's own
// re-executions (namespace init, the rootless user namespace), which must be
// gopasta too; the namespace's command, when it is the peer, is told apart
// by its first argument, checked first.
const asMainEnv = "GOPASTA_AS_MAIN"

// TestMain dispatches the roles of the test binary: the namespace-side
// peer (peerFlag first), gopasta (asMainEnv=1; with forbiddenEnv=1 too, a
// gopasta making a forbidden call), or the tests, with vmtest's step for
// its unprivileged isolation mode. In the seccomp report mode
// (GOPASTA_SECCOMP=log, as `make test` runs), a run in which any gopasta
// reported a system call outside its allowlist fails
// (nstest.SeccompReportMain).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == peerFlag {
		os.Exit(peerMain(os.Args[2:]))
	}
	if os.Getenv(asMainEnv) == "1" {
		if os.Getenv(forbiddenEnv) == "1" {
			go forbiddenCalls()
		}
		os.Exit(run.Main(os.Args))
	}
	nstest.DefaultHangup()
	os.Exit(nstest.SeccompReportMain(func() int { return vmtest.Run(m) }))
}
