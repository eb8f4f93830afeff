// Command gopasta gives a process its own network without root: it runs a
// command in new user and network namespaces (or joins existing ones), creates
// a TAP device there and translates the namespace's traffic into ordinary host
// sockets, in the manner of pasta (passt.top).
package main

import (
	"os"
	"path/filepath"

	"github.com/gopasta/gopasta/internal/pesto"
	"github.com/gopasta/gopasta/internal/run"
)

//go:generate go run ./man/gen -o man/gopasta.1

func main() {
	// Run as pesto (ln -s gopasta pesto): the control socket's client.
	if filepath.Base(os.Args[0]) == "pesto" {
		os.Exit(pesto.Main(os.Args, os.Stdout, os.Stderr))
	}
	os.Exit(run.Main(os.Args))
}
