// Package nstest holds helpers for gopasta's integration tests: a throwaway
// "host" network namespace with documentation addresses and default routes
// (so results never depend on the machine's own network), the identities the
// tests run as (root and the unprivileged uid 65534), skips for missing
// privileges or kernel features, a once-per-run build of the gopasta binary,
// parsers for `ip -j` output, and the seccomp report mode (seccomp.go): a
// package whose tests start gopasta calls SeccompReportMain from its
// TestMain, so that a run with GOPASTA_SECCOMP=log fails when any gopasta
// made a system call outside its allowlist. For unit tests: fresh
// anonymous network namespaces entered by a thread, Ethernet frames, free
// ports, bounded waits, and a process out of descriptors.
//
// Everything global a helper creates (netns names, temp dirs, processes) is
// uniquely named and removed in t.Cleanup; processes are killed by PID (or by
// the process group they lead), never by name, because other test runs share
// the machine.
package nstest
