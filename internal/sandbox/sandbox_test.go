package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"
)

// The tests never confine the test process itself: every check that
// installs a filter or applies the sandbox runs in a child, the test binary
// re-executed with childEnv naming what it does.
const childEnv = "GOPASTA_SANDBOX_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(child(role))
	}
	os.Exit(m.Run())
}

// child runs one role and returns the exit status.
func child(role string) int {
	name, arg, _ := strings.Cut(role, ":")
	switch name {
	case "filter", "report", "log":
		mode := map[string]filterMode{"filter": modeKill, "report": modeReport, "log": modeLog}[name]
		p := &filterParams{pid: os.Getpid()}
		var sup *supervisor
		if mode != modeKill {
			sup = newSupervisor(2, os.Getpid(), mode)
		}
		lfd, _, err := installFilter(p, mode)
		if err != nil {
			fmt.Fprintln(os.Stderr, "install:", err)
			return 3
		}
		if sup != nil && lfd >= 0 {
			sup.fd = lfd
			go sup.run()
		}
		return forbidden(arg)
	case "apply":
		// A directory kept for removals, as the control socket's is.
		file := os.Getenv("GOPASTA_SANDBOX_TEST_REMOVE")
		dir, err := os.OpenFile(filepath.Dir(file), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		if _, err := Apply(Options{Dirs: []Dir{{Fd: int(dir.Fd()), Path: dir.Name(), Remove: true}}, LogFd: 2}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		fmt.Println("confined")
		// Wait for the parent to look at us, then remove the file.
		var b [1]byte
		os.Stdin.Read(b[:])
		if err := unix.Unlinkat(int(dir.Fd()), filepath.Base(file), 0); err != nil {
			fmt.Println("remove:", err)
			return 4
		}
		return forbidden(arg)
	case "applylog":
		// The whole sandbox in log mode (the environment says so).
		if _, err := Apply(Options{LogFd: 2}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		return forbidden(arg)
	case "bench":
		return benchChild(arg)
	case "inherited":
		keep, _ := strconv.Atoi(arg)
		CloseInherited(keep)
		for fd := 3; fd <= 5; fd++ {
			_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			fmt.Printf("%d:%v\n", fd, err == nil)
		}
		return 0
	}
	return 99
}

// forbidden makes the call named by what and returns 0 if it comes back.
func forbidden(what string) int {
	switch what {
	case "", "none":
		// Allowed things only: a socket, a write, threads.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fmt.Println("socket:", err)
			return 5
		}
		unix.Close(fd)
		done := make(chan struct{})
		go func() { runtime.LockOSThread(); close(done) }() // a new thread
		<-done
		fmt.Println("alive")
	case "execve":
		err := unix.Exec("/bin/true", []string{"true"}, nil)
		fmt.Println("execve:", err)
	case "open":
		f, err := os.Open("/dev/null")
		fmt.Println("open:", err)
		if err == nil {
			f.Close()
		}
	case "packet":
		_, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		fmt.Println("socket(AF_PACKET):", err)
	case "fork":
		_, _, e := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		fmt.Println("clone(SIGCHLD):", e)
	case "exec-memory":
		_, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_ANON|unix.MAP_PRIVATE)
		fmt.Println("mmap(PROT_EXEC):", err)
	case "kill-other":
		err := unix.Kill(1, 0)
		fmt.Println("kill(1):", err)
	case "ptrace":
		_, _, e := unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
		fmt.Println("ptrace:", e)
	}
	return 0
}

// runChild runs the test binary as role and returns its output and wait
// status, bounded by 20 s.
func runChild(t *testing.T, role string, extraEnv ...string) (stdout, stderr string, ws syscall.WaitStatus) {
	t.Helper()
	if cgoRuntime {
		// Every child installs the filter, whose list is the calls of
		// gopasta's own runtime, built without cgo. A cgo runtime (the
		// race detector's too) makes others, at exit and under load
		// when it starts threads, and the child dies of SIGSYS whatever
		// it did.
		t.Skip("skipped in a cgo build (the race detector's too): gopasta is built with CGO_ENABLED=0, and cgo's runtime makes system calls outside the filter's list")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+role, SeccompEnv+"=", SeccompReportEnv+"="), extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("child %s: %v", role, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("child %s: no exit within 20s; stdout %q stderr %q", role, out.String(), errb.String())
	}
	return out.String(), errb.String(), cmd.ProcessState.Sys().(syscall.WaitStatus)
}

// TestFilterKills: a child installs the filter and makes one call outside
// the list; it must die of SIGSYS (and a child making only allowed calls
// must not).
func TestFilterKills(t *testing.T) {
	out, errOut, ws := runChild(t, "filter:none")
	if !ws.Exited() || ws.ExitStatus() != 0 || !strings.Contains(out, "alive") {
		t.Fatalf("allowed calls only: got %v, stdout %q, stderr %q; want exit 0 and \"alive\"", ws, out, errOut)
	}
	for _, what := range []string{"execve", "open", "packet", "fork", "exec-memory", "kill-other", "ptrace"} {
		t.Run(what, func(t *testing.T) {
			out, errOut, ws := runChild(t, "filter:"+what)
			if !ws.Signaled() || ws.Signal() != unix.SIGSYS {
				t.Errorf("got %v (stdout %q, stderr %q), want killed by SIGSYS", ws, out, errOut)
			}
		})
	}
}

// TestFilterReport: with --debug, a forbidden call is one line naming it
// (number and name), then a crash with the offending goroutine's stack.
func TestFilterReport(t *testing.T) {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Skip(err)
	}
	nr := info.SyscallNames["openat"]
	out, errOut, ws := runChild(t, "report:open")
	want := fmt.Sprintf("gopasta: error: seccomp: system call %d (openat) by thread ", nr)
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr %q: want a line with %q", errOut, want)
	}
	if !strings.Contains(errOut, "SIGSYS") || !strings.Contains(errOut, "os.Open") {
		t.Errorf("stderr %q: want the runtime's SIGSYS crash with the stack through os.Open", errOut)
	}
	if ws.Exited() && ws.ExitStatus() == 0 || strings.Contains(out, "open:") {
		t.Errorf("got %v, stdout %q: want the child to die before open returns", ws, out)
	}
}

// TestFilterLog: GOPASTA_SECCOMP=log reports the call once and lets it go on.
func TestFilterLog(t *testing.T) {
	out, errOut, ws := runChild(t, "log:open")
	if !ws.Exited() || ws.ExitStatus() != 0 || !strings.Contains(out, "open: <nil>") {
		t.Errorf("got %v, stdout %q, stderr %q: want open to succeed and exit 0", ws, out, errOut)
	}
	if n := strings.Count(errOut, "(openat)"); n != 1 {
		t.Errorf("stderr %q: got %d lines naming openat, want 1", errOut, n)
	}
}

// TestApply applies the whole sandbox in a child started as root, and reads
// its /proc/PID/status and root from here: nobody, no capabilities in any
// set, no_new_privs, one seccomp filter, an empty deleted root; a call
// outside the list then kills it; a file is removed through a directory
// kept for removals (the control socket's, in gopasta).
func TestApply(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the child starts as root and drops to nobody")
	}
	if err := Check(); err != nil {
		t.Skipf("%v (make test builds without cgo)", err)
	}
	dir := t.TempDir()
	sockFile := filepath.Join(dir, "gopasta.sock")
	if err := os.WriteFile(sockFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// nobody must be able to remove it.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=apply:open", "GOPASTA_SANDBOX_TEST_REMOVE="+sockFile, SeccompEnv+"=", SeccompReportEnv+"=")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "confined" {
		cmd.Wait()
		t.Fatalf("child: got %q, stderr %q; want \"confined\"", sc.Text(), errb.String())
	}
	pid := cmd.Process.Pid
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Uid": "65534\t65534\t65534\t65534", "Gid": "65534\t65534\t65534\t65534", "Groups": "",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2", "Seccomp_filters": "1",
	}
	got := statusFields(string(status))
	for k, v := range want {
		if got[k] != v {
			t.Errorf("/proc/%d/status %s: got %q, want %q", pid, k, got[k], v)
		}
	}
	root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil || !strings.HasSuffix(root, " (deleted)") || !strings.Contains(root, "gopasta-root-") {
		t.Errorf("/proc/%d/root: got %q (%v), want a deleted gopasta-root- directory", pid, root, err)
	}
	// A deleted directory lists as ENOENT; anything listed is a failure.
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/", pid)); len(ents) != 0 || err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/proc/%d/root/: got %d entries (%v), want nothing", pid, len(ents), err)
	}
	stdin.Close()
	rest, _ := io.ReadAll(stdout)
	cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != unix.SIGSYS {
		t.Errorf("after opening a file: got %v (stdout %q, stderr %q), want killed by SIGSYS", ws, rest, errb.String())
	}
	if _, err := os.Stat(sockFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after unlinkat in its kept directory: got %v, want it gone", sockFile, err)
	}
}

// TestApplyReport: with GOPASTA_SECCOMP=log and GOPASTA_SECCOMP_REPORT,
// a forbidden call after Apply goes on, and the report file, opened before
// the sandbox, gets one line naming it, the process and the thread.
func TestApplyReport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the child starts as root and drops to nobody")
	}
	if err := Check(); err != nil {
		t.Skipf("%v (make test builds without cgo)", err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Skip(err)
	}
	report := filepath.Join(t.TempDir(), "report")
	out, errOut, ws := runChild(t, "applylog:open", SeccompEnv+"=log", SeccompReportEnv+"="+report)
	// The call goes on (and fails: there is nothing to open in the
	// sandbox's empty root, and Landlock grants nothing).
	if !ws.Exited() || ws.ExitStatus() != 0 || !strings.Contains(out, "open: ") {
		t.Fatalf("got %v, stdout %q, stderr %q: want open to come back and exit 0", ws, out, errOut)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want := fmt.Sprintf("openat (%d) pid ", info.SyscallNames["openat"])
	if len(lines) != 1 || !strings.HasPrefix(lines[0], want) || !strings.Contains(lines[0], " tid ") || !strings.HasSuffix(lines[0], os.Args[0]+" -test.run=^$)") {
		t.Errorf("report file: got %q, want one line %q... tid ... (%s -test.run=^$)", b, want, os.Args[0])
	}
}

func statusFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// TestCloseInherited: descriptors leaked by whoever executed us are
// closed, except the ones asked for.
func TestCloseInherited(t *testing.T) {
	var files []*os.File
	for i := 0; i < 3; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		files = append(files, r)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=inherited:4")
	cmd.ExtraFiles = files // 3, 4, 5 in the child
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if got, want := strings.Fields(string(out)), []string{"3:false", "4:true", "5:false"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("open after CloseInherited(4): got %v, want %v", got, want)
	}
}

// TestAllowlistNames checks every entry against the kernel's tables of
// both architectures, and that each says why.
func TestAllowlistNames(t *testing.T) {
	for _, a := range []struct {
		goarch string
		info   *arch.Info
	}{{"amd64", arch.X86_64}, {"arm64", arch.AARCH64}} {
		seen := map[string]bool{}
		for _, r := range forArch(a.goarch) {
			if _, ok := a.info.SyscallNames[r.name]; !ok {
				t.Errorf("%s: %q is not a system call there", a.goarch, r.name)
			}
			if seen[r.name] {
				t.Errorf("%s: %q listed twice", a.goarch, r.name)
			}
			seen[r.name] = true
			if len(r.why) < 10 {
				t.Errorf("%s: %q: say why it is needed", a.goarch, r.name)
			}
		}
		for _, h := range hot {
			if !seen[h] {
				t.Errorf("%s: hot call %q is not in the allowlist", a.goarch, h)
			}
		}
		for _, never := range []string{"execve", "execveat", "openat", "open", "ptrace", "mount", "chroot",
			"setns", "unshare", "bpf", "perf_event_open", "process_vm_readv", "io_uring_setup", "userfaultfd"} {
			if seen[never] {
				t.Errorf("%s: %q must not be allowed", a.goarch, never)
			}
		}
	}
}

// TestAssemble builds the program for every mode of this architecture.
func TestAssemble(t *testing.T) {
	p := &filterParams{pid: 1234, statDirs: []int{7, 8}, unlinkDirs: []int{7}}
	for _, def := range []uint32{uint32(0x80000000), retUserNotif, 0x00030000} {
		prog, err := assemble(p, def)
		if err != nil {
			t.Fatalf("assemble(default %#x): %v", def, err)
		}
		last := prog[len(prog)-1]
		if last.Code != 0x06 || last.K != def { // BPF_RET|BPF_K
			t.Errorf("default %#x: last instruction %+v, want a return of the default", def, last)
		}
		if len(prog) > 4096 {
			t.Errorf("default %#x: %d instructions, over the kernel's 4096", def, len(prog))
		}
	}
}

func TestIDMaps(t *testing.T) {
	for _, tc := range []struct {
		in      string
		initial bool
		id      int
		inside  int
		mapped  bool
		wantErr bool
	}{
		{"         0          0 4294967295\n", true, 65534, 65534, true, false},
		{"         0       1000          1\n", false, 1000, 0, true, false},
		{"         0       1000          1\n", false, 65534, 0, false, false},
		{"0 1000 1\n1 100000 65536\n", false, 100999, 1000, true, false},
		{"", false, 0, 0, false, true},
		{"0 1000\n", false, 0, 0, false, true},
		{"0 x 1\n", false, 0, 0, false, true},
	} {
		m, err := parseIDMap(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseIDMap(%q): error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if got := initialNS(m); got != tc.initial {
			t.Errorf("initialNS(%q): got %v, want %v", tc.in, got, tc.initial)
		}
		in, ok := toInside(m, tc.id)
		if ok != tc.mapped || ok && in != tc.inside {
			t.Errorf("toInside(%q, %d): got %d, %v, want %d, %v", tc.in, tc.id, in, ok, tc.inside, tc.mapped)
		}
	}
}
