// Command gopasta gives a process its own network without root: it runs a
// command in new user and network namespaces (or joins existing ones), creates
// a TAP device there and translates the namespace's traffic into ordinary host
// sockets, in the manner of pasta (passt.top).
package main

import (
	"os"

	"github.com/gopasta/gopasta/ns"
)

//go:generate go run ./man/gen -o man/gopasta.1

func main() {
	// In spawn mode gopasta re-executes itself as the namespace's init; that
	// copy never reaches the command line parser.
	if ns.IsInitStub() {
		ns.InitStubMain()
	}
	os.Exit(runCLI(os.Args, os.Stderr))
}
