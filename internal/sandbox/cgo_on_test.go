//go:build cgo

package sandbox

// cgoRuntime: this test binary is built with cgo (as the race detector
// always is), whose runtime makes system calls outside gopasta's list.
const cgoRuntime = true
