// Package ctlsock is the control socket (-c PATH, --conf-path): pasta's
// protocol for reading and replacing the port forwarding tables while
// gopasta runs, as pesto speaks it (wire format in internal/pestowire).
//
// # Theory of operation
//
// The server is one goroutine of its own that accepts on an AF_UNIX
// stream socket and serves one client at a time: it sends the greeting
// and every table, then reads at most one update, hands it to Tables as
// one replacement, and closes. Nothing here runs on a loop that carries
// traffic, and the only thing shared with forwarding is the Tables
// interface, whose Replace opens and closes listeners without touching
// established connections; so a client that stalls, trickles or sends
// garbage cannot pause traffic. Each session has a deadline (Timeout,
// for the whole exchange): a client that stops mid-message is dropped
// and nothing changes.
//
// An update is all or nothing: every rule goes through the table's checks
// while it is read, and any failure (or the client going away before the
// terminator) leaves the tables as they were. The server never answers an
// update; a rejected one is closed with bytes left unread, which the
// client sees as a reset, as with pasta.
//
// While a client is served, the next ones wait in the listen backlog
// (Backlog of them; beyond that connect(2) blocks or fails with EAGAIN),
// and are served in turn, each with its own deadline.
//
// The socket file is created mode 0600 (the socket's inode is chmod-ed
// before bind, so the umask cannot widen it and there is no window), as
// the user gopasta runs as; a stale socket file left by an earlier run is
// replaced, a live one is an error ("already in use"), and anything else
// at the path is left alone. It is removed at Close if it is still ours.
// A path that starts with '@' names a file too, as in pasta, never a
// socket in the abstract namespace (which no file mode would protect).
package ctlsock

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/gopasta/gopasta/internal/fwdrule"
	"github.com/gopasta/gopasta/internal/logging"
	"github.com/gopasta/gopasta/internal/pestowire"
)

// Tables is what the server reads and replaces: the forwarding tables,
// in pif id order, and their replacement as one step.
type Tables interface {
	Tables() []fwdrule.Table
	// Replace makes ts (one per table Tables returns, same order) the
	// tables, all or nothing; ts has passed fwdrule's checks already.
	Replace(ts []fwdrule.Table) error
}

// Options configure Start.
type Options struct {
	Path   string // the socket's path, used verbatim (relative to the cwd)
	Tables Tables
	Logger *slog.Logger // nil discards
	// Timeout bounds one client's whole session; 0 means DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout is how long one client may take: pesto needs
// milliseconds; a client still not done after this is dropped.
const DefaultTimeout = 10 * time.Second

// Backlog is how many clients may wait while one is served.
const Backlog = 4

// MaxPathLen is the longest usable path (pestowire.MaxPathLen).
const MaxPathLen = pestowire.MaxPathLen

// PathError is a control socket path that cannot be used.
type PathError struct {
	Path   string
	Reason string
	Err    error
}

func (e *PathError) Error() string { return fmt.Sprintf("control socket %s: %s", e.Path, e.Reason) }
func (e *PathError) Unwrap() error { return e.Err }

// Sentinel errors wrapped by PathError.
var (
	ErrInvalidPath = errors.New("invalid configuration path")
	ErrInUse       = errors.New("socket path already in use")
	ErrNotSocket   = errors.New("not a socket")
)

// CheckPath reports whether path can become the control socket: 1 to 107
// bytes without NUL, an existing directory, and nothing live there. A
// socket no one listens on is stale and will be replaced; any other file
// is refused rather than removed.
func CheckPath(path string) error {
	if err := checkName(path); err != nil {
		return err
	}
	_, err := stale(path)
	return err
}

// checkName checks the path's length and bytes and that its directory
// exists.
func checkName(path string) error {
	if path == "" || len(path) > MaxPathLen {
		return &PathError{Path: path, Reason: fmt.Sprintf("invalid configuration path (1 to %d bytes)", MaxPathLen), Err: ErrInvalidPath}
	}
	if len(pestowire.SocketName(path)) > MaxPathLen {
		return &PathError{Path: path, Reason: fmt.Sprintf("invalid configuration path (1 to %d bytes when it starts with @)", MaxPathLen-2), Err: ErrInvalidPath}
	}
	for i := 0; i < len(path); i++ {
		if path[i] == 0 {
			return &PathError{Path: path, Reason: "invalid configuration path (NUL byte)", Err: ErrInvalidPath}
		}
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return &PathError{Path: path, Reason: "cannot use directory " + dir + ": " + errText(err), Err: err}
	}
	if !st.IsDir() {
		return &PathError{Path: path, Reason: dir + " is not a directory", Err: syscall.ENOTDIR}
	}
	return nil
}

// stale checks what is at path: nothing (false), a stale socket to
// replace (true), or an error for a live socket or any other file.
func stale(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, &PathError{Path: path, Reason: errText(err), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return false, &PathError{Path: path, Reason: "exists and is not a socket", Err: ErrNotSocket}
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, &PathError{Path: path, Reason: errText(err), Err: err}
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, &unix.SockaddrUnix{Name: pestowire.SocketName(path)})
	if err == nil || !(errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EACCES)) {
		return false, &PathError{Path: path, Reason: "already in use", Err: ErrInUse}
	}
	return true, nil
}

func errText(err error) string {
	var en unix.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return errText(pe.Err)
	}
	return err.Error()
}

// Server is a running control socket.
type Server struct {
	o   Options
	log *slog.Logger
	lim *logging.Limiter
	ln  *net.UnixListener
	// The socket file, to remove it at Close only if it is still ours:
	// its directory (opened at Start, so removal works whatever happens
	// to the file system view later), name, device and inode.
	dirfd    int
	base     string
	dev, ino uint64

	wg     sync.WaitGroup
	mu     sync.Mutex
	cur    *net.UnixConn
	closed bool
}

// Start creates the socket and serves it on a goroutine of its own.
func Start(o Options) (*Server, error) {
	if o.Tables == nil {
		return nil, errors.New("ctlsock: Options.Tables is required")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, log: log, lim: logging.NewLimiter(20, time.Minute)}
	if err := s.listen(); err != nil {
		return nil, err
	}
	log.Info("control socket bound at "+o.Path, "protocol", pestowire.Version)
	s.wg.Add(1)
	go s.run()
	return s, nil
}

func (s *Server) listen() error {
	path := s.o.Path
	if err := checkName(path); err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return &PathError{Path: path, Reason: errText(err), Err: err}
	}
	fail := func(what string, err error) error {
		unix.Close(fd)
		return &PathError{Path: path, Reason: what + ": " + errText(err), Err: err}
	}
	// The socket's own mode becomes the file's at bind(2), less the
	// umask: setting it first leaves no window with a wider mode.
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fail("fchmod", err)
	}
	if st, err := stale(path); err != nil {
		unix.Close(fd)
		return err
	} else if st {
		if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
			return fail("removing the stale socket", err)
		}
	}
	dirfd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("opening its directory", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: pestowire.SocketName(path)}); err != nil {
		unix.Close(dirfd)
		return fail("bind", err)
	}
	s.dirfd, s.base = dirfd, filepath.Base(path)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, s.base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		s.dev, s.ino = st.Dev, st.Ino
	}
	if err := unix.Listen(fd, Backlog); err != nil {
		s.remove()
		return fail("listen", err)
	}
	f := os.NewFile(uintptr(fd), path)
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		s.remove()
		return &PathError{Path: path, Reason: err.Error(), Err: err}
	}
	s.ln = ln.(*net.UnixListener)
	return nil
}

// remove deletes the socket file if it is still the one we bound, and
// closes its directory.
func (s *Server) remove() {
	var st unix.Stat_t
	if err := unix.Fstatat(s.dirfd, s.base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Dev == s.dev && st.Ino == s.ino {
		if err := unix.Unlinkat(s.dirfd, s.base, 0); err != nil {
			s.log.Debug("control socket not removed", "path", s.o.Path, "err", errText(err))
		}
	}
	unix.Close(s.dirfd)
}

// DirFD is the descriptor of the socket file's directory, through which
// Close removes it (unlinkat and fstatat of one name): what a sandbox
// must still allow at exit.
func (s *Server) DirFD() int { return s.dirfd }

// Close stops serving (a client being served is cut off; its update, if
// it was still arriving, is not applied), waits for the goroutine and
// removes the socket file.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.cur != nil {
		s.cur.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
	s.remove()
}

func (s *Server) run() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or memory: the client stays queued;
			// try again shortly rather than spin.
			s.warn("accept on the control socket", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.cur = c
		s.mu.Unlock()
		s.serve(c)
		s.mu.Lock()
		s.cur = nil
		s.mu.Unlock()
		c.Close()
	}
}

// warn logs through the limiter: clients are many and may be hostile.
func (s *Server) warn(msg string, args ...any) {
	if ok, n := s.lim.Allow(time.Now()); ok {
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		s.log.Warn(msg, args...)
	}
}

// serve runs one client's session.
func (s *Server) serve(c *net.UnixConn) {
	pid := peerPID(c)
	c.SetDeadline(time.Now().Add(s.o.Timeout))
	tables := s.o.Tables.Tables()
	pifs := make([]pestowire.PifTable, len(tables))
	for i, t := range tables {
		pifs[i] = pestowire.PifTable{Name: t.Pif.String(), Table: t}
	}
	msg := pestowire.AppendTables(pestowire.AppendHello(nil), pifs)
	if _, err := c.Write(msg); err != nil {
		s.warn("error writing to configuration client, closing it", "pid", pid, "err", errText(err))
		return
	}
	if ok, _ := s.lim.Allow(time.Now()); ok {
		s.log.Info("accepted configuration client", "pid", pid)
	}
	upd, err := pestowire.ReadUpdate(c, tables)
	switch {
	case err == nil:
	case errors.Is(err, pestowire.ErrHangup):
		s.log.Debug("configuration client hangup", "pid", pid)
		return
	case errors.Is(err, net.ErrClosed):
		return // Close cut the session off
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.warn(fmt.Sprintf("configuration client stalled for %v, dropped; forwarding unchanged", s.o.Timeout), "pid", pid)
		return
	default:
		s.warn("configuration update rejected, forwarding unchanged: "+printable(strings.ReplaceAll(err.Error(), "\n", "; ")), "pid", pid)
		return
	}
	for _, t := range upd {
		s.log.Info("New forwarding rules for " + t.Pif.String() + ":")
		for _, r := range t.Rules {
			s.log.Info("    " + printable(r.String()))
		}
	}
	if err := s.o.Tables.Replace(upd); err != nil {
		s.warn("configuration update not applied: "+printable(err.Error()), "pid", pid)
	}
}

// printable is s for a log line: a rule's interface name is 15 bytes
// of the client's choosing, so control characters (a newline would start
// a forged record, an escape drive the terminal) and invalid UTF-8 are
// written as Go escapes.
func printable(s string) string {
	var b strings.Builder
	escaped := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unicode.IsControl(r) {
			if !escaped {
				b.WriteString(s[:i])
				escaped = true
			}
			q := strconv.QuoteToASCII(s[i : i+n])
			b.WriteString(q[1 : len(q)-1])
		} else if escaped {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	if !escaped {
		return s
	}
	return b.String()
}

// peerPID is the client's process ID (0 when the kernel does not say),
// for the log only.
func peerPID(c *net.UnixConn) int32 {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var pid int32
	rc.Control(func(fd uintptr) {
		if uc, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = uc.Pid
		}
	})
	return pid
}
