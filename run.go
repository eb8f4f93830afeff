package main

import "github.com/gopasta/gopasta/internal/config"

// run carries out a validated configuration and returns the exit status.
// Placeholder: the orchestration replaces this file.
func run(cfg *config.Config) (int, error) { return 0, nil }
