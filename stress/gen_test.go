package stress

// The load generator: this test binary re-executed with genFlag first,
// either in the host namespace (as root, through nstest.Host) or in the
// test's namespace (as uid 65534, through nsenter). Each mode prints
// "ready" once it is under way, where the test waits for that, and
// "result JSON" as its last line:
//
//	serve ADDR             TCP and UDP echo on ADDR until SIGTERM; several
//	                       processes share the port (SO_REUSEPORT), so a
//	                       load is not bounded by one process's descriptors
//	hold [flags] DST       -n connections to DST, each echoes a message of
//	                       its own, all are held for -hold, each echoes
//	                       again, then all close (holdResult)
//	spray [flags] ADDR     one datagram to each of -n ports of ADDR from
//	                       one socket: as many UDP flows (sprayResult)
//	churn [flags] TARGET.. connect, echo, close, in a loop on every target
//	                       for -d (churnResult)
//	steady TARGET...       one connection per target moving verified data
//	                       in rounds until SIGTERM (steadyResult)
//	probe [flags] TARGET.. a fresh connection per target with a byte-exact
//	                       echo, retried until one works or -timeout
//	                       passes (probeResult)
//
// A TARGET is tcp:HOST:PORT or udp:HOST:PORT. Every process keeps to its
// RLIMIT_NOFILE (the test cannot raise the hard limit: root may lack
// CAP_SYS_RESOURCE), so the test spreads large loads over processes.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// genFlag as the test binary's first argument makes it the generator.
const genFlag = "-stress-gen"

// genArgv is the command line running the generator self in mode.
func genArgv(self, mode string, args ...string) []string {
	return append([]string{self, genFlag, mode}, args...)
}

func genMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(os.Stderr, "usage: %s serve|hold|spray|churn|steady|probe ...\n", genFlag)
		return 2
	}
	modes := map[string]func([]string) (any, error){
		"serve": genServe, "hold": genHold, "spray": genSpray,
		"churn": genChurn, "steady": genSteady, "probe": genProbe,
	}
	f, ok := modes[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "stress generator: unknown mode %q\n", args[0])
		return 2
	}
	res, err := f(args[1:])
	if res != nil {
		b, _ := json.Marshal(res)
		fmt.Printf("result %s\n", b)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "stress generator %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// content is the pseudo-random content of stream seed: both ends of an
// echo compute it, so a corrupted or misplaced byte shows.
func content(seed uint64) io.Reader {
	var key [32]byte
	binary.BigEndian.PutUint64(key[:], seed)
	binary.BigEndian.PutUint64(key[8:], 0x5354524553530000) // "STRESS"
	return rand.NewChaCha8(key)
}

// target is a parsed TARGET argument.
type target struct {
	network string // "tcp4" or "udp4"
	addr    string
}

func (t target) String() string { return strings.TrimSuffix(t.network, "4") + ":" + t.addr }

func parseTargets(args []string) ([]target, error) {
	var ts []target
	for _, a := range args {
		proto, addr, ok := strings.Cut(a, ":")
		if !ok || (proto != "tcp" && proto != "udp") {
			return nil, fmt.Errorf("target %q: want tcp:HOST:PORT or udp:HOST:PORT", a)
		}
		ts = append(ts, target{proto + "4", addr})
	}
	if len(ts) == 0 {
		return nil, errors.New("no target")
	}
	return ts, nil
}

// errClass names an error for the tallies: an errno's name, "timeout",
// "eof", "short" (a partial echo), "mismatch", or the error's text.
func errClass(err error) string {
	var errno syscall.Errno
	var ne net.Error
	switch {
	case errors.Is(err, errMismatch):
		return "mismatch"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "short"
	case errors.Is(err, io.EOF):
		return "eof"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// cleanRefusal reports whether class is a refusal a kernel would give at a
// limit: a reset (to the SYN or after it) or a close before any data,
// neither of which leaves the client waiting.
func cleanRefusal(class string) bool {
	switch class {
	case "ECONNREFUSED", "ECONNRESET", "EPIPE", "eof":
		return true
	}
	return false
}

var errMismatch = errors.New("echo differs from what was sent")

// tally counts outcomes by class, safely from many goroutines.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (t *tally) add(class string) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[string]int{}
	}
	t.m[class]++
	t.mu.Unlock()
}

func (t *tally) snapshot() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.m))
	for k, v := range t.m {
		out[k] = v
	}
	return out
}

// echoOnce writes msg on c and wants it back, exactly, within timeout.
func echoOnce(c net.Conn, msg, buf []byte, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(msg); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
		return err
	}
	if !bytes.Equal(buf[:len(msg)], msg) {
		return errMismatch
	}
	return nil
}

// reusePort lets several generator processes listen on one port.
func reusePort(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// untilTerm returns a channel closed on SIGTERM or SIGINT.
func untilTerm() <-chan struct{} {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() { <-c; close(done) }()
	return done
}

// serveResult is what a server did.
type serveResult struct {
	Accepted     int64
	AcceptErrors map[string]int
}

// genServe is the serve mode: TCP echo (each connection until its peer's
// EOF, then closed) and UDP echo on ADDR.
func genServe(args []string) (any, error) {
	if len(args) != 1 {
		return nil, errors.New("want serve ADDR")
	}
	term := untilTerm()
	lc := net.ListenConfig{Control: reusePort}
	l, err := lc.Listen(context.Background(), "tcp4", args[0])
	if err != nil {
		return nil, err
	}
	pc, err := lc.ListenPacket(context.Background(), "udp4", args[0])
	if err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	var res serveResult
	var errs tally
	var accepted atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				// Out of descriptors, or the like: as a real server
				// would, wait a little and go on.
				errs.add(errClass(err))
				time.Sleep(10 * time.Millisecond)
				continue
			}
			accepted.Add(1)
			go echoConn(c)
		}
	}()
	fmt.Println("ready")
	<-term
	l.Close()
	pc.Close()
	res.Accepted, res.AcceptErrors = accepted.Load(), errs.snapshot()
	return res, nil
}

// echoConn echoes c until EOF or an error, then closes it. The buffer is
// small: a server holds thousands of these.
func echoConn(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 2048)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// holdResult is the outcome of a hold: every connection is exactly one of
// held (both echoes right), refused (cleanly: cleanRefusal) or failed
// (anything else: a timeout, wrong bytes, a connection lost while held,
// or never tried before -deadline).
type holdResult struct {
	Conns, Held, Refused, Failed int
	// Lost counts connections that echoed once but not after the hold
	// (among Failed).
	Lost int
	// Classes tallies refusals and failures by errClass, prefixed
	// "dial ", "echo " or "held ".
	Classes map[string]int
	// SlowDials counts dials that took a second or more: the SYN, or its
	// answer, was lost and sent again (among Held, or whatever followed).
	SlowDials int
	// DialMaxMS is the slowest successful dial; TookMS the whole hold.
	DialMaxMS, TookMS int64
}

// genHold is the hold mode.
func genHold(args []string) (any, error) {
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	n := fs.Int("n", 1000, "connections")
	conc := fs.Int("conc", 64, "dials at once")
	hold := fs.Duration("hold", 5*time.Second, "how long every connection is held")
	timeout := fs.Duration("timeout", 10*time.Second, "bound of each dial and each echo")
	deadline := fs.Duration("deadline", 2*time.Minute, "bound of the dialing phase; what is not dialed by then fails")
	seed := fs.Uint64("seed", 0, "tells this process's messages from other processes'")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 1 {
		return nil, errors.New("want hold [flags] HOST:PORT")
	}
	dst := fs.Arg(0)
	start := time.Now()
	msg := func(i, round int) []byte {
		return []byte(fmt.Sprintf("hold %016x %08d %d ....", *seed, i, round)[:32])
	}
	conns := make([]net.Conn, *n)
	var classes tally
	var refused, failed atomic.Int64
	var dialMax, slow atomic.Int64
	outcome := func(stage string, err error) {
		c := errClass(err)
		classes.add(stage + " " + c)
		if cleanRefusal(c) {
			refused.Add(1)
		} else {
			failed.Add(1)
		}
	}
	stopDial := time.Now().Add(*deadline)
	each := func(fn func(i int)) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range *conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= *n {
						return
					}
					fn(i)
				}
			}()
		}
		wg.Wait()
	}
	each(func(i int) {
		if time.Now().After(stopDial) {
			classes.add("dial not tried before -deadline")
			failed.Add(1)
			return
		}
		d := net.Dialer{Timeout: *timeout}
		t0 := time.Now()
		c, err := d.Dial("tcp4", dst)
		if err != nil {
			outcome("dial", err)
			return
		}
		if time.Since(t0) >= time.Second {
			slow.Add(1)
		}
		for ms := time.Since(t0).Milliseconds(); ; {
			old := dialMax.Load()
			if ms <= old || dialMax.CompareAndSwap(old, ms) {
				break
			}
		}
		buf := make([]byte, 32)
		if err := echoOnce(c, msg(i, 0), buf, *timeout); err != nil {
			c.Close()
			outcome("echo", err)
			return
		}
		conns[i] = c
	})
	time.Sleep(*hold)
	var held, lost atomic.Int64
	each(func(i int) {
		c := conns[i]
		if c == nil {
			return
		}
		buf := make([]byte, 32)
		if err := echoOnce(c, msg(i, 1), buf, *timeout); err != nil {
			classes.add("held " + errClass(err))
			lost.Add(1)
			failed.Add(1)
			return
		}
		held.Add(1)
	})
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	return holdResult{
		Conns: *n, Held: int(held.Load()), Refused: int(refused.Load()), Failed: int(failed.Load()),
		Lost: int(lost.Load()), Classes: classes.snapshot(), SlowDials: int(slow.Load()),
		DialMaxMS: dialMax.Load(), TookMS: time.Since(start).Milliseconds(),
	}, nil
}

// sprayResult is what a spray sent.
type sprayResult struct {
	// Sent counts datagrams sent, Resent those sent again because the
	// namespace's interface dropped some of their window.
	Sent, Resent int
	// Dropped is what the interface dropped (its transmit drops), and
	// MinRate the slowest pace the spray came down to, per second.
	Dropped, MinRate int
	Errors           map[string]int
	TookMS           int64
}

// genSpray is the spray mode: one datagram to each of -n consecutive
// ports from -first, so that each reaches gopasta. It sends windows of
// sprayWindow datagrams at up to -rate a second; a window during which
// the namespace's interfaces dropped frames on transmit (their queue
// toward gopasta was full) is sent again at half the pace, and the pace
// grows back by a tenth after each clean window.
func genSpray(args []string) (any, error) {
	fs := flag.NewFlagSet("spray", flag.ContinueOnError)
	n := fs.Int("n", 1000, "ports, one datagram each")
	first := fs.Int("first", 1024, "first port")
	rate := fs.Int("rate", 20000, "datagrams per second at most")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 1 || *first+*n > 65536 {
		return nil, errors.New("want spray [-n N] [-first P] [-rate R] HOST, ports within 65535")
	}
	ip := net.ParseIP(fs.Arg(0))
	if ip == nil {
		return nil, fmt.Errorf("address %q", fs.Arg(0))
	}
	pc, err := net.ListenPacket("udp4", ":0")
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	const sprayWindow = 200
	res := sprayResult{MinRate: *rate}
	var errs tally
	start := time.Now()
	msg := []byte("stress spray")
	drops, err := txDrops()
	if err != nil {
		return nil, err
	}
	pace := float64(*rate)
	for i := 0; i < *n; {
		end := min(i+sprayWindow, *n)
		t0 := time.Now()
		for j := i; j < end; j++ {
			if _, err := pc.WriteTo(msg, &net.UDPAddr{IP: ip, Port: *first + j}); err != nil {
				errs.add(errClass(err))
				continue
			}
			res.Sent++
		}
		if wait := time.Duration(float64(end-i)/pace*float64(time.Second)) - time.Since(t0); wait > 0 {
			time.Sleep(wait)
		}
		d, err := txDrops()
		if err != nil {
			return nil, err
		}
		if d > drops {
			res.Dropped += d - drops
			res.Resent += end - i
			drops = d
			pace = max(pace/2, 100)
			res.MinRate = min(res.MinRate, int(pace))
			continue
		}
		pace = min(pace*1.1, float64(*rate))
		i = end
	}
	res.Errors = errs.snapshot()
	res.TookMS = time.Since(start).Milliseconds()
	return res, nil
}

// txDrops sums the transmit drops of the interfaces other than loopback
// in the caller's network namespace (/proc/net/dev).
func txDrops() (int, error) {
	b, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		return 0, err
	}
	total := 0
	for _, l := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(l, ":")
		if !ok || strings.TrimSpace(name) == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 12 {
			continue
		}
		d, err := strconv.Atoi(f[11]) // receive: 8 fields; transmit: bytes, packets, errs, drop
		if err != nil {
			continue
		}
		total += d
	}
	return total, nil
}

// churnTarget is what churn did on one target.
type churnTarget struct {
	Target              string
	Tx, Refused, Failed int
	Classes             map[string]int
}

// churnResult is what churn did on each target.
type churnResult struct{ Targets []churnTarget }

// genChurn is the churn mode: on each TCP target, -conc workers each
// connect, send a message, shut down their side, read the echo and the
// server's EOF, and close; on each UDP target, -udprate transactions a
// second (a new socket, one datagram echoed, up to 3 tries): until -d.
func genChurn(args []string) (any, error) {
	fs := flag.NewFlagSet("churn", flag.ContinueOnError)
	d := fs.Duration("d", 10*time.Second, "how long")
	conc := fs.Int("conc", 4, "workers per TCP target")
	udpRate := fs.Int("udprate", 50, "transactions per second per UDP target")
	timeout := fs.Duration("timeout", 10*time.Second, "bound of one transaction")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	ts, err := parseTargets(fs.Args())
	if err != nil {
		return nil, err
	}
	end := time.Now().Add(*d)
	res := churnResult{Targets: make([]churnTarget, len(ts))}
	var wg sync.WaitGroup
	for ti, tg := range ts {
		var tx, refused, failed atomic.Int64
		var classes tally
		count := func(err error) {
			if err == nil {
				tx.Add(1)
				return
			}
			c := errClass(err)
			classes.add(c)
			if cleanRefusal(c) {
				refused.Add(1)
			} else {
				failed.Add(1)
			}
		}
		var twg sync.WaitGroup
		if tg.network == "tcp4" {
			for w := range *conc {
				twg.Add(1)
				go func() {
					defer twg.Done()
					buf := make([]byte, 64)
					for i := 0; time.Now().Before(end); i++ {
						count(tcpTransaction(tg.addr, fmt.Appendf(nil, "churn %d %d %d", ti, w, i), buf, *timeout))
					}
				}()
			}
		} else {
			const workers = 4
			interval := time.Second * workers / time.Duration(max(*udpRate, 1))
			for w := range workers {
				twg.Add(1)
				go func() {
					defer twg.Done()
					buf := make([]byte, 256)
					next := time.Now().Add(interval * time.Duration(w) / workers)
					for i := 0; time.Now().Before(end); i++ {
						if wait := time.Until(next); wait > 0 {
							time.Sleep(wait)
						}
						next = next.Add(interval)
						count(udpTransaction(tg.addr, fmt.Appendf(nil, "churn %d %d %d", ti, w, i), buf))
					}
				}()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			twg.Wait()
			res.Targets[ti] = churnTarget{Target: tg.String(), Tx: int(tx.Load()),
				Refused: int(refused.Load()), Failed: int(failed.Load()), Classes: classes.snapshot()}
		}()
	}
	wg.Wait()
	return res, nil
}

// tcpTransaction is one churn connection: the client ends its side first,
// so each connection is over on both sides when it returns.
func tcpTransaction(addr string, msg, buf []byte, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp4", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(msg); err != nil {
		return err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
		return err
	}
	if !bytes.Equal(buf[:len(msg)], msg) {
		return errMismatch
	}
	if n, err := c.Read(buf); err != io.EOF {
		if err == nil {
			return fmt.Errorf("%d bytes after the echo", n)
		}
		return err
	}
	return nil
}

// udpTransaction is one datagram echoed from a new socket (so a new flow
// each time), up to 3 tries a second apart: a datagram may be lost.
func udpTransaction(addr string, msg, buf []byte) error {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	var lastErr error
	for range 3 {
		if _, err := c.Write(msg); err != nil {
			lastErr = err
			time.Sleep(100 * time.Millisecond)
			continue
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err != nil {
			lastErr = err
			continue
		}
		if !bytes.Equal(buf[:n], msg) {
			return errMismatch
		}
		return nil
	}
	return lastErr
}

// steadyTarget is what one steady connection did.
type steadyTarget struct {
	Target        string
	Rounds, Bytes int64
	// MaxGapMS is the longest time between two completed rounds (from
	// "ready" on).
	MaxGapMS int64
	// Err is why the connection stopped before SIGTERM, ErrAtMS when.
	Err     string `json:",omitempty"`
	ErrAtMS int64  `json:",omitempty"`
}

type steadyResult struct{ Targets []steadyTarget }

// genSteady is the steady mode: per target, one connection echoing
// -chunk bytes of its own content stream a round, every -interval, each
// round checked byte for byte, until SIGTERM. It prints "ready" once every
// connection has completed a round.
func genSteady(args []string) (any, error) {
	fs := flag.NewFlagSet("steady", flag.ContinueOnError)
	chunk := fs.Int("chunk", 16<<10, "bytes echoed per round")
	interval := fs.Duration("interval", 10*time.Millisecond, "pause between rounds")
	timeout := fs.Duration("timeout", 20*time.Second, "bound of one round")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	ts, err := parseTargets(fs.Args())
	if err != nil {
		return nil, err
	}
	term := untilTerm()
	var stop atomic.Bool
	res := steadyResult{Targets: make([]steadyTarget, len(ts))}
	var ready, done sync.WaitGroup
	start := time.Now()
	for i, tg := range ts {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			st := &res.Targets[i]
			st.Target = tg.String()
			readyOnce := sync.OnceFunc(ready.Done)
			defer readyOnce()
			fail := func(err error) {
				st.Err, st.ErrAtMS = err.Error(), time.Since(start).Milliseconds()
			}
			var c net.Conn
			var err error
			for try := 0; try < 50; try++ {
				if c, err = net.DialTimeout(tg.network, tg.addr, 2*time.Second); err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				fail(err)
				return
			}
			defer c.Close()
			src := content(uint64(1000 + i))
			out := make([]byte, *chunk)
			in := make([]byte, *chunk)
			last := time.Now()
			for !stop.Load() {
				io.ReadFull(src, out)
				if err := echoOnce(c, out, in, *timeout); err != nil {
					fail(err)
					return
				}
				now := time.Now()
				if st.Rounds > 0 {
					st.MaxGapMS = max(st.MaxGapMS, now.Sub(last).Milliseconds())
				}
				last = now
				st.Rounds++
				st.Bytes += int64(*chunk)
				readyOnce()
				time.Sleep(*interval)
			}
		}()
	}
	ready.Wait()
	fmt.Println("ready")
	<-term
	stop.Store(true)
	done.Wait()
	return res, nil
}

// probeTarget is how a probe of one target went.
type probeTarget struct {
	Target string
	OK     bool
	// MS is how long until an echo worked (or until the probe gave up),
	// over all -par probes of the target.
	MS    int64
	Tries int
	Err   string `json:",omitempty"`
}

type probeResult struct{ Targets []probeTarget }

// genProbe is the probe mode: per target, -par probes at once, each
// retrying every 100 ms until a fresh connection (TCP: -size bytes each
// way; UDP: 3 datagrams of 1000 bytes, each echoed) comes back intact, for
// up to -timeout.
func genProbe(args []string) (any, error) {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 10*time.Second, "how long to retry")
	par := fs.Int("par", 1, "probes at once per target")
	size := fs.Int("size", 256<<10, "bytes echoed per TCP probe")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	ts, err := parseTargets(fs.Args())
	if err != nil {
		return nil, err
	}
	res := probeResult{Targets: make([]probeTarget, len(ts))}
	start := time.Now()
	var wg sync.WaitGroup
	for i, tg := range ts {
		var mu sync.Mutex
		pt := &res.Targets[i]
		pt.Target, pt.OK = tg.String(), true
		for p := range *par {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				tries := 0
				for deadline := start.Add(*timeout); ; {
					tries++
					seed := uint64(i)<<32 | uint64(p)<<16 | uint64(tries)
					if tg.network == "tcp4" {
						err = tcpProbe(tg.addr, *size, seed)
					} else {
						err = udpProbe(tg.addr, seed)
					}
					if err == nil || time.Now().After(deadline) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				pt.Tries += tries
				pt.MS = max(pt.MS, time.Since(start).Milliseconds())
				if err != nil {
					pt.OK, pt.Err = false, err.Error()
				}
			}()
		}
	}
	wg.Wait()
	return res, nil
}

// tcpProbe sends size bytes of content(seed) on a fresh connection while
// reading the echo back, checks it, and wants the server's EOF after.
func tcpProbe(addr string, size int, seed uint64) error {
	c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := io.CopyN(c, content(seed), int64(size))
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	want := content(seed)
	got := make([]byte, 32<<10)
	exp := make([]byte, len(got))
	total := 0
	for {
		n, err := c.Read(got)
		if n > 0 {
			io.ReadFull(want, exp[:n])
			if !bytes.Equal(got[:n], exp[:n]) || total+n > size {
				return fmt.Errorf("after %d bytes: %w", total, errMismatch)
			}
			total += n
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("after %d of %d bytes: %w", total, size, err)
		}
	}
	if total != size {
		return fmt.Errorf("got %d bytes back, want %d", total, size)
	}
	return <-werr
}

// udpProbe wants 3 datagrams of 1000 bytes of content(seed) echoed, each
// within a second (no retry: the probe as a whole retries).
func udpProbe(addr string, seed uint64) error {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	src := content(seed)
	msg := make([]byte, 1000)
	buf := make([]byte, 2048)
	for range 3 {
		io.ReadFull(src, msg)
		if _, err := c.Write(msg); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if !bytes.Equal(buf[:n], msg) {
			return errMismatch
		}
	}
	return nil
}

// sortedClasses formats a tally for a log line, largest first.
func sortedClasses(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var kvs []kv
	for k, v := range m {
		kvs = append(kvs, kv{k, v})
	}
	sort.Slice(kvs, func(i, j int) bool {
		if kvs[i].v != kvs[j].v {
			return kvs[i].v > kvs[j].v
		}
		return kvs[i].k < kvs[j].k
	})
	var parts []string
	for _, p := range kvs {
		parts = append(parts, fmt.Sprintf("%s=%d", p.k, p.v))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
