// Package ns deals with Linux namespaces: it spawns a command in new user,
// network, UTS, IPC, mount and PID namespaces, joins existing network
// namespaces on a dedicated OS thread, watches them go away, discovers the
// host's template interface and configures the namespace over rtnetlink.
package ns

// IsInitStub reports whether this process was re-executed as the init of a
// spawned namespace. Placeholder.
func IsInitStub() bool { return false }

// InitStubMain runs the namespace init and never returns. Placeholder.
func InitStubMain() {}
