//go:build faultinject

package faults

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Enabled reports whether this build injects faults.
const Enabled = true

var (
	started  atomic.Bool
	every    uint64 // 0: nothing injected
	calls    [NumSites]atomic.Uint64
	injected [NumSites][]atomic.Uint64 // per site, per error of Errors
)

func init() {
	for s := range injected {
		injected[s] = make([]atomic.Uint64, len(Errors[s]))
	}
	v := os.Getenv(Env)
	if v == "" {
		return
	}
	n, ok := strings.CutPrefix(v, "every=")
	if k, err := strconv.ParseUint(n, 10, 32); ok && err == nil && k > 0 {
		every = k
		return
	}
	fmt.Fprintf(os.Stderr, "%s=%q: want every=N with N > 0\n", Env, v)
	os.Exit(1)
}

// At returns the error to fail this call at site s with, or nil to make
// the call.
func At(s Site) error {
	if every == 0 || !started.Load() {
		return nil
	}
	n := calls[s].Add(1)
	if n%every != 0 {
		return nil
	}
	i := (n/every - 1) % uint64(len(Errors[s]))
	injected[s][i].Add(1)
	return Errors[s][i]
}

// Start begins the injection: gopasta calls it once the sandbox is on, so
// that what fails is the traffic's error paths, not the set-up.
func Start() { started.Store(true) }

// Report is what was injected so far, one "site:error=count" per pair.
func Report() string {
	var b strings.Builder
	for s := range NumSites {
		for i, e := range Errors[s] {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s:%s=%d", s, errnoName(e), injected[s][i].Load())
		}
	}
	return b.String()
}

// errnoName is the symbolic name of e, for Report.
func errnoName(e unix.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return e.Error()
}
