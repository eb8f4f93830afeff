package run

// A re-executed copy of gopasta named after its argv[0], not the kernel's
// "exe".

import (
	"bytes"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A copy of gopasta re-executed through /proc/self/exe (the rootless user
// namespace's copy, the background copy of attach mode, the namespace's
// init) would be named "exe" by the kernel, after the path it ran: pgrep,
// pkill, killall, top and ps -C would not find it, though it is the
// process the pid file names. It takes its argv[0]'s name instead, as the
// process the user started has.
//
// Package initialisation runs on the main thread (the runtime keeps it
// there until main starts), and the main thread's name is the process's.
func init() { nameAfterArgv0("/proc/self/comm", os.Args) }

// nameAfterArgv0 renames the calling thread after argv[0] when the name in
// comm (the calling thread's, /proc/self/comm) is the kernel's "exe".
func nameAfterArgv0(comm string, args []string) {
	cur, err := os.ReadFile(comm)
	if err != nil || string(bytes.TrimSpace(cur)) != "exe" || len(args) == 0 {
		return
	}
	name := filepath.Base(args[0])
	if name == "exe" || name == "." || name == "/" {
		return
	}
	if p, err := unix.BytePtrFromString(name); err == nil {
		// The kernel keeps the first 15 bytes.
		unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
	}
}
