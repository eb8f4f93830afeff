package stress

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// The environment variables of the suite.
const (
	formEnv = "GOPASTA_STRESS"
	soakEnv = "GOPASTA_STRESS_SOAK"
	argsEnv = "GOPASTA_STRESS_ARGS"
)

// TestMain dispatches the roles of the test binary: the load generator
// (genFlag first) or the tests, after which it prints the summary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == genFlag {
		os.Exit(genMain(os.Args[2:]))
	}
	nstest.DefaultHangup()
	code := m.Run()
	printSummary(os.Stdout)
	os.Exit(code)
}

// form is the size of every load.
type form struct {
	name string
	// limit is gopasta's RLIMIT_NOFILE, set with prlimit; 0 leaves the
	// machine's.
	limit int
	// udpFlows is the spray's ports; nsToHost and hostToNS the held
	// connections of the TCP loads; hold how long they are held.
	udpFlows, nsToHost, hostToNS int
	hold                         time.Duration
	churn                        time.Duration
	// soak is the soak's length; warm its warm-up, after which the RSS
	// is compared; window how many samples (seconds) each median takes.
	soak, warm time.Duration
	window     int
	// rssLimit fails the soak if gopasta's RSS grows by this much or
	// more after the warm-up; 0 reports the growth only (a short soak
	// ends while its UDP flows still accumulate: no steady state).
	rssLimit int64 // KiB
	// udpRate is the soak's UDP transactions per second on each path:
	// few enough that the live flows (spliced ones live 120 s, with two
	// descriptors each) stay well within the descriptor limit and
	// gopasta's bound on spliced UDP flows.
	udpRate int
	// expiry: wait for UDP flows to expire after the spray, rather than
	// bound the descriptors by the live flows.
	expiry bool
}

var forms = map[string]form{
	"long": {name: "long", udpFlows: 60000, nsToHost: 20000, hostToNS: 5000, hold: 5 * time.Second,
		churn: 90 * time.Second, soak: 30 * time.Minute, warm: 3 * time.Minute, window: 60, rssLimit: 5 << 10, udpRate: 10, expiry: true},
	"short": {name: "short", limit: 2000, udpFlows: 6000, nsToHost: 2000, hostToNS: 500, hold: 2 * time.Second,
		churn: 20 * time.Second, soak: 30 * time.Second, warm: 10 * time.Second, window: 5, udpRate: 5},
}

// formFor returns the form GOPASTA_STRESS names, skipping without one.
func formFor(t *testing.T) form {
	t.Helper()
	v := os.Getenv(formEnv)
	if v == "" {
		t.Skipf("skipping: the stress suite runs with %s=short or long (make stress-short, make stress)", formEnv)
	}
	f, ok := forms[v]
	if !ok {
		t.Fatalf("%s=%q: want short or long", formEnv, v)
	}
	if d := os.Getenv(soakEnv); d != "" {
		var err error
		if f.soak, err = time.ParseDuration(d); err != nil || f.soak < 2*f.warm {
			t.Fatalf("%s=%q: want a duration of at least twice the warm-up (%v)", soakEnv, d, f.warm)
		}
	}
	return f
}

// describe sets the summary's header from the first suite.
func (s *suite) describe() {
	results.mu.Lock()
	defer results.mu.Unlock()
	if results.header != "" {
		return
	}
	name := "gopasta"
	if !s.gopasta {
		name = fmt.Sprintf("%s (%s)", s.bin, s.version)
	}
	lim := fmt.Sprintf("RLIMIT_NOFILE %d (the machine's)", s.limit)
	if s.f.limit > 0 {
		lim = fmt.Sprintf("RLIMIT_NOFILE %d (prlimit)", s.limit)
	}
	results.header = fmt.Sprintf("%s, %s form, %s", name, s.f.name, lim)
}
