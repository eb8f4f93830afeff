package logging

// The system logger: where messages go once gopasta is in the background
// with no -l, so that a failure after start-up (podman's pasta runs in the
// background) is still told to someone.

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// SyslogPath is the system logger's socket (syslog(3)'s _PATH_LOG).
const SyslogPath = "/dev/log"

// syslogFacility is LOG_DAEMON, as pasta's.
const syslogFacility = 3 << 3

// syslogMax bounds one message; syslog daemons take at least 1 KiB and
// usually 8 KiB.
const syslogMax = 4096

// syslogConn is a datagram socket connected to the system logger. It is
// connected once, before the sandbox: afterwards gopasta may neither
// create a Unix socket nor look a path up. The socket is non-blocking, so
// a logger that does not keep up costs messages, never a stalled packet
// loop; a logger that restarted (a new socket at the path) is not reached
// again, and its messages are lost too (dropped counts both).
type syslogConn struct {
	fd      int
	prefix  string // "gopasta[PID]: "
	dropped atomic.Uint64
}

// dialSyslog connects to the system logger at path.
func dialSyslog(path string) (*syslogConn, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("system logger: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("system logger %s: %w", path, err)
	}
	return &syslogConn{fd: fd, prefix: "gopasta[" + strconv.Itoa(os.Getpid()) + "]: "}, nil
}

// severity maps a level to syslog's (RFC 5424 numbering).
func severity(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}

// send sends one message, without a timestamp (the logger adds its own).
// The socket is written with write(2), which the sandbox allows.
func (s *syslogConn) send(l slog.Level, msg string) {
	b := make([]byte, 0, 8+len(s.prefix)+len(msg))
	b = append(b, '<')
	b = strconv.AppendInt(b, int64(syslogFacility|severity(l)), 10)
	b = append(b, '>')
	b = append(b, s.prefix...)
	b = append(b, msg...)
	if len(b) > syslogMax {
		b = b[:syslogMax]
	}
	if _, err := unix.Write(s.fd, b); err != nil {
		s.dropped.Add(1)
	}
}

func (s *syslogConn) close() error { return unix.Close(s.fd) }
