//go:build linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm)

package vhostkern

import "github.com/gopasta/gopasta/fwd"

// Device is one of the engine's two Link implementations.
var _ fwd.Link = (*Device)(nil)
