package run

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/config"
)

// TestTakeTapFD checks that --fd's descriptor is moved to one of ours,
// close-on-exec, above the standard streams, and the caller's closed; a
// standard stream that carried it points at /dev/null; and a copy run
// again takes the one its environment names.
func TestTakeTapFD(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	orig, err := unix.Dup(int(r.Fd())) // not close-on-exec, as inherited
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := takeTapFD(&config.Config{TapFD: orig, TapFDSet: true})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 || fd < 3 {
		t.Errorf("moved: got fd %d flags %#x (%v), want >= 3 and close-on-exec", fd, fl, err)
	}
	if _, err := unix.FcntlInt(uintptr(orig), unix.F_GETFD, 0); err == nil && orig != fd {
		t.Errorf("the caller's fd %d: got still open, want closed", orig)
	}

	// A standard stream: fd 0 here, kept and restored around the test.
	saved, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { unix.Dup2(saved, 0); unix.Close(saved) }()
	if err := unix.Dup2(fd, 0); err != nil {
		t.Fatal(err)
	}
	fd0, err := takeTapFD(&config.Config{TapFD: 0, TapFDSet: true})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd0)
	var st, null unix.Stat_t
	unix.Fstat(0, &st)
	unix.Stat(os.DevNull, &null)
	if fd0 < 3 || st.Rdev != null.Rdev {
		t.Errorf("--fd 0: got fd %d and stdin rdev %#x, want >= 3 and /dev/null (%#x)", fd0, st.Rdev, null.Rdev)
	}

	// A copy run again: the environment names the descriptor.
	t.Setenv(envTapFD, strconv.Itoa(fd0))
	if got, err := takeTapFD(&config.Config{TapFD: 99, TapFDSet: true}); err != nil || got != fd0 {
		t.Errorf("from %s: got %d, %v, want %d", envTapFD, got, err, fd0)
	}
	if _, ok := os.LookupEnv(envTapFD); ok {
		t.Errorf("%s: got still set, want it consumed", envTapFD)
	}

	for _, tc := range []struct {
		cfg  config.Config
		env  string
		want string
	}{
		{cfg: config.Config{TapFD: 1 << 20, TapFDSet: true}, want: "--fd 1048576: not an open descriptor"},
		{env: "x", want: "bad " + envTapFD},
		{env: "1", want: "bad " + envTapFD},
	} {
		if tc.env != "" {
			t.Setenv(envTapFD, tc.env)
		}
		if _, err := takeTapFD(&tc.cfg); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v env %q: got %v, want %q", tc.cfg, tc.env, err, tc.want)
		}
	}
	if fd, err := takeTapFD(&config.Config{}); fd != -1 || err != nil {
		t.Errorf("no --fd: got %d, %v, want -1, nil", fd, err)
	}
}
