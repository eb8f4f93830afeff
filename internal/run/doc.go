// Package run is one run of gopasta, from the validated configuration to
// the exit status: Main hands the command line to internal/cmdline, which
// calls Run with the configuration it built.
//
// Run plans the namespace's network from the command line and the host's
// template interface (plan.go) and its DNS (dns.go), spawns the command's
// namespaces or joins an existing one (package ns), opens the data link
// there, TAP or vhost-net (link.go), configures the interface, starts the
// engine (engine.go), port forwarding (internal/portfwd) and the control
// socket (internal/ctlsock), confines the process (internal/sandbox), and
// then waits for the command or the namespace to end and drains what the
// namespace still sends. Attach mode can go to the background once ready
// (daemon.go); --oci-hook is a container runtime's hook around the same
// run (hook.go).
package run
