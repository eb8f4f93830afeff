//go:build !faultinject

package faults

// Enabled reports whether this build injects faults.
const Enabled = false

// At returns nil: this build injects nothing.
func At(Site) error { return nil }

// Start does nothing: this build injects nothing.
func Start() {}

// Report is empty: this build injects nothing.
func Report() string { return "" }
