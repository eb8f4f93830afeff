// Package ns deals with Linux namespaces: it spawns a command in new user,
// network, UTS, IPC, mount and PID namespaces, joins existing network
// namespaces on a dedicated OS thread, watches them go away, discovers the
// host's template interface and configures the namespace over rtnetlink.
package ns

import (
	"os"
	"strings"
)

// The stub protocol between Spawn and the init it re-executes. The
// environment marks the process; the control pipe on ctlFd carries one
// ctlGo byte (the network is ready) and then signal numbers to forward.
const (
	envInit      = "GOPASTA_INIT"
	envHostname  = "GOPASTA_INIT_HOSTNAME"
	envLogin     = "GOPASTA_INIT_LOGIN"
	initProtocol = "1"
	stubArgv0    = "gopasta-init"
	ctlFd        = 3
	ctlGo        = 'G' // above 64, so never a signal number
)

// IsInitStub reports whether this process was re-executed by Spawn as the
// init of a new namespace set. main calls it before anything else. Besides
// the environment marker the process must be PID 1, so an inherited or
// stray variable never turns an ordinary gopasta into an init.
func IsInitStub() bool {
	return os.Getenv(envInit) == initProtocol && os.Getpid() == 1
}

// InitStubMain runs the namespace init and never returns: it waits for
// Spawn's go-ahead, runs the command as its child, forwards signals to it,
// reaps orphans and exits with the command's status.
func InitStubMain() {
	os.Exit(runInit(os.Args[1:]))
}

// withoutStubEnv drops the stub's markers so they never reach the command or
// a nested gopasta.
func withoutStubEnv(env []string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if strings.HasPrefix(kv, envInit+"=") || strings.HasPrefix(kv, envHostname+"=") || strings.HasPrefix(kv, envLogin+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
