// Package run is one run of gopasta, from the validated configuration to
// the exit status: Main hands the command line to internal/cmdline, which
// calls Run with the configuration it built.
//
// Run closes the descriptors it inherited, then goes through six phases
// (run.go): start (the user namespace to run in, the background,
// logging), plan (the namespace's network from the command line and the
// host's template interface: plan.go, dns.go), link (the command's
// namespaces spawned or an existing one joined, package ns; the data link
// there, TAP or vhost-net: link.go; the interface configured), forward
// (the engine: engine.go; port forwarding, internal/portfwd; the control
// socket, internal/ctlsock; the pid file), confine (internal/sandbox) and
// wait (for the command or the namespace to end, and for what the
// namespace still sends to drain). Attach mode can go to the background
// once ready (daemon.go); --oci-hook is a container runtime's hook around
// the same run (hook.go).
package run
