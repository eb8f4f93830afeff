package splice

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/sock"
)

// BenchmarkExternalLoops answers whether a second splice loop pays for
// itself: the same port is served by one Forwarder, or by two whose
// listeners share it with SO_REUSEPORT (the kernel spreads connections
// over them by hash), as a multi-loop gopasta would. The peers are other
// processes: iperf3 with four streams, and two CRR clients (bench/rr, a
// connection per one-byte transaction) at once. cpu-ns/MiB and cpu-µs/tx
// count this process only, that is the loops.
func BenchmarkExternalLoops(b *testing.B) {
	iperf, err := exec.LookPath("iperf3")
	if err != nil {
		b.Skip("iperf3 not installed")
	}
	rr := filepath.Join(b.TempDir(), "rr")
	if out, err := exec.Command("go", "build", "-o", rr, "../bench/rr").CombinedOutput(); err != nil {
		b.Fatalf("building bench/rr: %v\n%s", err, out)
	}
	for _, loops := range []int{1, 2} {
		b.Run(fmt.Sprintf("iperf3-P4/loops=%d", loops), func(b *testing.B) {
			front := spliceLoops(b, loops, startServer(b, iperf, iperfServer))
			const size = 512 << 20
			b.SetBytes(size)
			var cpu time.Duration
			var bps float64
			for i := 0; i < b.N; i++ {
				cpu0 := cpuTime()
				bps += iperfClient(b, iperf, int(front.Port()), size, 4)
				cpu += cpuTime() - cpu0
			}
			b.ReportMetric(bps/float64(b.N)/1e9, "Gbit/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*size>>20), "cpu-ns/MiB")
		})
		b.Run(fmt.Sprintf("crr-x2/loops=%d", loops), func(b *testing.B) {
			front := spliceLoops(b, loops, startServer(b, rr, rrServer))
			var tx int64
			var secs float64
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				cpu0 := cpuTime()
				var wg sync.WaitGroup
				var mu sync.Mutex
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						n, d, err := crrClient(rr, front)
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							b.Error(err)
							return
						}
						tx += n
						secs = max(secs, d)
					}()
				}
				wg.Wait()
				cpu += cpuTime() - cpu0
			}
			if tx == 0 {
				b.Fatal("no transactions")
			}
			b.ReportMetric(float64(tx)/secs/float64(b.N), "conn/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(tx), "cpu-µs/tx")
		})
	}
}

// rrServer is bench/rr's server command line for startServer.
func rrServer(addr netip.AddrPort) []string {
	return []string{"-server", "-listen", addr.String()}
}

// crrClient runs bench/rr's connect-request-response client for 3 s and
// returns its transactions and the seconds it ran.
func crrClient(rr string, to netip.AddrPort) (int64, float64, error) {
	out, err := exec.Command(rr, "-mode", "crr", "-connect", to.String(), "-time", "3s").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("rr -mode crr: %v\n%s", err, out)
	}
	var r struct {
		Transactions int64   `json:"transactions"`
		Seconds      float64 `json:"seconds"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, 0, fmt.Errorf("rr output: %v\n%s", err, out)
	}
	return r.Transactions, r.Seconds, nil
}

// spliceLoops runs loops Forwarders, each with its own listener on one
// loopback port (SO_REUSEPORT), splicing to back; it returns the port.
func spliceLoops(b *testing.B, loops int, back netip.AddrPort) netip.AddrPort {
	front := netip.AddrPortFrom(sock.Loopback(false), nstest.FreePort(b, "127.0.0.1:0"))
	for range loops {
		r := newRig(b, Options{})
		fd, err := sock.Listen{Addr: front.Addr(), Port: front.Port(), ReusePort: true}.Open()
		if err != nil {
			b.Fatalf("listen %v: %v", front, err)
		}
		if _, err := r.f.AddTCPListener(TCPListener{Fd: fd, Dial: func(netip.AddrPort) (int, error) { return sock.Dial(false, back) }}); err != nil {
			b.Fatalf("AddTCPListener: %v", err)
		}
	}
	return front
}
