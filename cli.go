package main

import (
	"fmt"
	"io"
)

// runCLI parses args, runs gopasta and returns the process exit status.
// Placeholder: the command line implementation replaces this file.
func runCLI(args []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "gopasta: not implemented")
	return 1
}
