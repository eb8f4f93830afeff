//go:build !(linux && (amd64 || arm64 || riscv64 || loong64 || 386 || arm))

package vhostkern

import (
	"fmt"
	"runtime"
)

// This platform lacks either vhost-net or the little-endian, generic-ioctl
// ABI the package is written for; the stubs let callers fall back cleanly.

var errPlatform = fmt.Errorf("%w: %s/%s", ErrNotSupported, runtime.GOOS, runtime.GOARCH)

// Device is unusable on this platform.
type Device struct{}

func Probe() error                                     { return errPlatform }
func Open(Config) (*Device, error)                     { return nil, errPlatform }
func (*Device) ReadBatch([][]byte, []int) (int, error) { return 0, errPlatform }
func (*Device) WriteBatch([][]byte) (int, error)       { return 0, errPlatform }
func (*Device) Fd() int                                { return -1 }
func (*Device) WriteFd() int                           { return -1 }
func (*Device) Offered() uint64                        { return 0 }
func (*Device) Features() uint64                       { return 0 }
func (*Device) Stats() Stats                           { return Stats{} }
func (*Device) Close() error                           { return nil }
