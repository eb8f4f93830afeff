package main

import (
	"io"
	"os"

	"github.com/gopasta/gopasta/internal/cmdline"
)

// runCLI parses args (os.Args, program name first), runs gopasta and
// returns the process exit status.
func runCLI(args []string, stderr io.Writer) int {
	return cmdline.Main(args, os.Stdout, stderr, run)
}
