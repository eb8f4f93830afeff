package e2e

// Where messages go (issue 44 rows 13 and 14): the -l file under
// --log-size keeps its newest lines, --trace logs per packet, and in the
// background without -l messages go to the system logger (/dev/log).

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
)

// toGateway matches a log line about frames from the namespace to the
// gateway's port: "... -> 192.0.2.254:PORT ...", as gopasta's and pasta's
// --trace lines put it (lines about the other direction, and pasta's
// debug lines about flows, which bracket addresses, do not match).
var toGateway = regexp.MustCompile(`-> ` + regexp.QuoteMeta(nstest.HostGW4) + `:(\d+)\b`)

// frameCount matches the count of frames a trace line reports: gopasta's
// "N frame(s)", pasta's "(N packet(s))".
var frameCount = regexp.MustCompile(`\b(\d+) (?:frame|packet)s?\b`)

// gatewayPorts returns, in the order of the log's lines, the gateway ports
// of the lines toGateway matches, and the frames they report in all.
func gatewayPorts(log []byte) (ports []int, frames int) {
	for _, line := range strings.Split(string(log), "\n") {
		m := toGateway.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		p, _ := strconv.Atoi(m[1])
		ports = append(ports, p)
		if c := frameCount.FindStringSubmatch(line); c != nil {
			n, _ := strconv.Atoi(c[1])
			frames += n
		}
	}
	return ports, frames
}

// TestTracePerPacket checks that --trace logs what crosses the TAP, packet
// by packet, and -d does not: ten datagrams to one port of the gateway,
// one at a time, are ten frames in --trace lines and in no -d line.
func TestTracePerPacket(t *testing.T) {
	const n, port = 10, 20000
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range []struct {
				flag  string
				trace bool
			}{{"--trace", true}, {"--debug", false}} {
				t.Run(strings.TrimPrefix(tc.flag, "--"), func(t *testing.T) {
					e := newEnv(t, u, hostSetup{})
					log := filepath.Join(nstest.TempDir(t), "log")
					a := e.attachAgent(t, tc.flag, "-l", log)
					for range n {
						a.must(t, 10*time.Second, "udpports", nstest.HostGW4, strconv.Itoa(port), "1")
					}
					var frames int
					err := nstest.WaitFor(5*time.Second, func() error {
						b, err := os.ReadFile(log)
						if err != nil {
							return err
						}
						if _, frames = gatewayPorts(b); frames < n {
							return fmt.Errorf("got %d frames to port %d in the log", frames, port)
						}
						return nil
					})
					b, _ := os.ReadFile(log)
					switch {
					case tc.trace && err != nil:
						t.Errorf("%s: %v, want %d (one line per packet)\nlog:\n%s", tc.flag, err, n, b)
					case !tc.trace && frames != 0:
						t.Errorf("%s: got %d frames to port %d in the log, want no per-packet line\nlog:\n%s", tc.flag, frames, port, b)
					case len(b) == 0:
						t.Errorf("%s: got an empty log, want debug lines", tc.flag)
					}
				})
			}
		})
	}
}

// TestLogFileKeepsNewest checks -l with --log-size: the file never goes
// over the size, and once full its oldest lines make room for new ones.
// The namespace sends datagrams to ever higher ports of the gateway, ten
// at a time, under --trace; after each ten the log must hold the lines of
// a run of ports with no gap, ending with the newest, in order, and once
// the first ones are gone, fill at least half the size (a log emptied
// when full holds a few lines at that point).
func TestLogFileKeepsNewest(t *testing.T) {
	const size, first, batch, maxPorts = 40960, 20000, 10, 5000
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			e := newEnv(t, u, hostSetup{})
			log := filepath.Join(nstest.TempDir(t), "log")
			a := e.attachAgent(t, "--trace", "-l", log, "--log-size", strconv.Itoa(size))
			cuts, oldest := 0, first
			for next := first; cuts < 3; next += batch {
				if next-first >= maxPorts {
					t.Fatalf("after %d ports: got %d cuts of the oldest lines, want 3", maxPorts, cuts)
				}
				a.must(t, 10*time.Second, "udpports", nstest.HostGW4, strconv.Itoa(next), strconv.Itoa(batch))
				last := next + batch - 1
				var b []byte
				var ports []int
				err := nstest.WaitFor(5*time.Second, func() error {
					var err error
					if b, err = os.ReadFile(log); err != nil {
						return err
					}
					if ports, _ = gatewayPorts(b); len(ports) == 0 || ports[len(ports)-1] != last {
						return fmt.Errorf("no line for port %d yet", last)
					}
					return nil
				})
				if err != nil {
					t.Fatalf("log: %v\n%s", err, tail(b, 2000))
				}
				if len(b) > size {
					t.Fatalf("after port %d: got a log of %d bytes, want at most %d", last, len(b), size)
				}
				for i := 1; i < len(ports); i++ {
					if d := ports[i] - ports[i-1]; d != 0 && d != 1 {
						t.Fatalf("after port %d: got port %d after %d in the log, want the ports in order, none missing\n%s", last, ports[i], ports[i-1], tail(b, 2000))
					}
				}
				if ports[0] == first {
					continue
				}
				if len(b) < size/2 {
					t.Fatalf("after port %d, the lines up to port %d dropped: got a log of %d bytes, want at least %d (the oldest lines make room, the rest stays)", last, ports[0]-1, len(b), size/2)
				}
				if ports[0] > oldest {
					cuts++
					oldest = ports[0]
				}
			}
		})
	}
}

// attachAgent runs gopasta with args and -f --config-net, attached to a
// fresh `unshare -Urn` namespace the way podman runs pasta (inside that
// user namespace, --netns), and returns an agent in the namespace once it
// is configured. pasta runs this way as root too, where it cannot spawn.
func (e *env) attachAgent(t *testing.T, args ...string) *agent {
	t.Helper()
	pid := e.startSleeper(t).PID()
	fg := e.h.Start(e.u, slices.Concat([]string{"nsenter", "-t", strconv.Itoa(pid), "-U", "--preserve-credentials", "--"},
		e.gopasta(slices.Concat([]string{"-f", "--config-net"}, args, []string{"--netns", fmt.Sprintf("/proc/%d/ns/net", pid)})...))...)
	if err := waitConfigured(linksOfPID(e, pid), fg); err != nil {
		t.Fatalf("gopasta %q: %v", args, err)
	}
	return e.startAgentIn(t, pid)
}

// tail is the end of b, at most n bytes, for failure messages.
func tail(b []byte, n int) []byte { return b[max(0, len(b)-n):] }

// devLogScript runs its arguments ($3...) with a /dev of its own: a tmpfs
// holding the devices gopasta and pasta use, bound from the real /dev,
// and /dev/log bound to the socket $2 (none when $2 is empty). $1 is a
// scratch directory. It runs as root, in the mount namespace of `ip netns
// exec` (which keeps its mounts from the host's), so the system's /dev is
// untouched: the test can be the system logger without replacing one.
const devLogScript = `set -e
d=$1 log=$2
shift 2
mkdir "$d/dev"
mount --bind /dev "$d/dev"
mount -t tmpfs -o mode=0755,size=64k gopasta-test-dev /dev
for n in null zero full random urandom; do
	touch /dev/$n
	mount --bind "$d/dev/$n" /dev/$n
done
mkdir /dev/net
touch /dev/net/tun
mount --bind "$d/dev/net/tun" /dev/net/tun
if [ -n "$log" ]; then
	touch /dev/log
	mount --bind "$log" /dev/log
fi
umount "$d/dev"
exec "$@"`

// TestSyslogInBackground checks where messages go once gopasta is in the
// background without -l: to the system logger, at /dev/log, as pasta
// sends them; and that a logger that cannot be reached changes nothing
// else. gopasta attaches to a namespace the way podman runs it (inside
// the namespace's user namespace, --netns, no -f); the message looked for
// is the one logged when the namespace goes away, long after stderr went.
func TestSyslogInBackground(t *testing.T) {
	for _, u := range nstest.Users() {
		t.Run(u.Name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				// mode of the socket at /dev/log; 0: no /dev/log
				mode os.FileMode
				// listening: a logger reads the socket (else a stale one)
				listening bool
			}{
				{name: "listening", mode: 0o666, listening: true},
				{name: "not-writable", mode: 0o600, listening: true},
				{name: "refused", mode: 0o666},
				{name: "missing"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					// Root connects whatever the mode says.
					wantMsg := tc.listening && (tc.mode&0o002 != 0 || u.Root())
					syslogInBackground(t, u, tc.mode, tc.listening, wantMsg)
				})
			}
		})
	}
}

func syslogInBackground(t *testing.T, u nstest.User, mode os.FileMode, listening, wantMsg bool) {
	e := newEnv(t, u, hostSetup{})
	dir := nstest.TempDir(t)
	sock := ""
	var logger *syslogReader
	if mode != 0 {
		sock = filepath.Join(dir, "log")
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(sock, mode); err != nil {
			t.Fatal(err)
		}
		if listening {
			logger = readSyslog(t, c)
		} else {
			c.Close() // the file stays: connecting is refused
		}
	}

	sleeper := e.startSleeper(t)
	pid := strconv.Itoa(sleeper.PID())
	pidFile := filepath.Join(dir, "gopasta.pid")
	argv := slices.Concat([]string{"sh", "-c", devLogScript, "sh", dir, sock},
		u.Argv(slices.Concat([]string{"nsenter", "-t", pid, "-U", "--preserve-credentials", "--"},
			e.gopasta("-P", pidFile, "--config-net", "--netns", "/proc/"+pid+"/ns/net"))...))
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	r := e.h.RunContext(ctx, nstest.RootUser, argv...)
	checkNoPanic(t, r)
	if r.Code != 0 {
		t.Fatalf("%q: got exit %d, want 0 (ready in the background)\n%s", argv, r.Code, r)
	}
	gpPID, err := nstest.ReadPIDFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	nstest.KillOnCleanup(t, gpPID)

	// Whatever came before (pasta sends its start-up lines too) is not
	// what this test is about.
	if logger != nil {
		logger.take()
	}
	if err := sleeper.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.WaitGone(gpPID, 10*time.Second); err != nil {
		t.Fatalf("background process after its namespace went: %v, want it gone", err)
	}
	if logger == nil {
		return
	}
	// The message was sent before the process exited; it is read by now
	// or within moments.
	time.Sleep(200 * time.Millisecond)
	got := logger.take()
	i := slices.IndexFunc(got, func(m string) bool {
		pri, err := syslogPri(m)
		return err == nil && pri&7 == 6 && strings.Contains(strings.ToLower(m), "gone")
	})
	switch {
	case wantMsg && i < 0:
		t.Errorf("system logger: got %q, want the namespace's going away, at severity info", got)
	case !wantMsg && len(got) > 0:
		t.Errorf("system logger it may not write to: got %q, want nothing", got)
	}
}

// syslogPri reads the priority at the start of a syslog message, "<PRI>":
// facility times 8 plus severity. gopasta's facility is daemon (<30> for
// info); pasta's is 0 (kern, <6>): it leaves the facility out.
func syslogPri(m string) (int, error) {
	rest, ok := strings.CutPrefix(m, "<")
	end := strings.IndexByte(rest, '>')
	if !ok || end < 1 {
		return 0, fmt.Errorf("no <PRI> at the start of %q", m)
	}
	return strconv.Atoi(rest[:end])
}

// syslogReader is the test's system logger: it reads its socket all the
// time, as a real one does (a datagram socket's queue holds a few
// messages only, and pasta blocks when it is full).
type syslogReader struct {
	mu  sync.Mutex
	got []string
}

// readSyslog reads c until the test ends.
func readSyslog(t *testing.T, c *net.UnixConn) *syslogReader {
	r := &syslogReader{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 8192)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.got = append(r.got, string(bytes.TrimRight(buf[:n], "\n")))
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return r
}

// take returns the messages read so far and forgets them.
func (r *syslogReader) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}
