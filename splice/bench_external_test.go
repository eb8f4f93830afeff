package splice

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/gopasta/gopasta/internal/nstest"
	"github.com/gopasta/gopasta/internal/sock"
)

// BenchmarkExternal puts the proxy between two other processes (iperf3
// client and server), as gopasta sits between a host client and a namespace
// service. This is the fair comparison: in BenchmarkStream the endpoints
// are goroutines the Go scheduler can interleave with io.Copy's goroutines
// on the same threads, which no real deployment gets. Each op is one
// 256 MiB iperf3 transfer; cpu-ns/MiB counts this process only, i.e. the
// proxy.
func BenchmarkExternal(b *testing.B) {
	iperf, err := exec.LookPath("iperf3")
	if err != nil {
		b.Skip("iperf3 not installed")
	}
	for _, tc := range []struct {
		name    string
		forward func(b *testing.B, front net.Listener, back string)
	}{
		{"splice", forwardSplice},
		{"iocopy", forwardIOCopy},
	} {
		for _, streams := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/streams=%d", tc.name, streams), func(b *testing.B) {
				externalBench(b, iperf, streams, tc.forward)
			})
		}
	}
}

func externalBench(b *testing.B, iperf string, streams int, forward func(*testing.B, net.Listener, string)) {
	const size = 256 << 20
	back := startServer(b, iperf, iperfServer)
	front := listen(b)
	go forward(b, front, back.String())
	frontPort := front.Addr().(*net.TCPAddr).Port

	b.SetBytes(size)
	b.ResetTimer()
	var cpu time.Duration
	var bps float64
	for i := 0; i < b.N; i++ {
		cpu0 := cpuTime()
		bps += iperfClient(b, iperf, frontPort, size, streams)
		cpu += cpuTime() - cpu0
	}
	b.StopTimer()
	b.ReportMetric(bps/float64(b.N)/1e9, "Gbit/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*size>>20), "proxy-cpu-ns/MiB")
}

// startServer runs a server process on a free loopback port, whose
// command line args gives, and waits until it listens there.
func startServer(b *testing.B, path string, args func(addr netip.AddrPort) []string) netip.AddrPort {
	b.Helper()
	addr := netip.AddrPortFrom(sock.Loopback(false), nstest.FreePort(b, "127.0.0.1:0"))
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, path, args(addr)...)
	if err := srv.Start(); err != nil {
		cancel()
		b.Fatalf("%s: %v", path, err)
	}
	b.Cleanup(func() { cancel(); srv.Wait() })
	waitListening(b, addr.String())
	return addr
}

// iperfServer is iperf3 -s's command line for startServer.
func iperfServer(addr netip.AddrPort) []string {
	return []string{"-s", "-B", addr.Addr().String(), "-p", fmt.Sprint(addr.Port())}
}

// iperfClient moves size bytes over streams connections to port and
// returns what the receiver got, in bit/s.
func iperfClient(b *testing.B, iperf string, port, size, streams int) float64 {
	b.Helper()
	out, err := exec.Command(iperf, "-c", "127.0.0.1", "-p", fmt.Sprint(port),
		"-n", fmt.Sprint(size), "-P", fmt.Sprint(streams), "-J").Output()
	if err != nil {
		b.Fatalf("iperf3 -c: %v\n%s", err, out)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("iperf3 JSON: %v", err)
	}
	return res.End.SumReceived.BitsPerSecond
}

func waitListening(b *testing.B, addr string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("iperf3 server not listening on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func forwardSplice(b *testing.B, front net.Listener, back string) {
	r := newRig(b, Options{})
	dst := netipMust(back)
	for {
		c, err := front.Accept()
		if err != nil {
			return
		}
		fd := dupFd(b, c.(*net.TCPConn))
		c.Close()
		if err := forwardTCP(r.f, fd, dst, dialTCP); err != nil {
			b.Errorf("forwardTCP: %v", err)
		}
	}
}

func forwardIOCopy(b *testing.B, front net.Listener, back string) {
	for {
		c, err := front.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", back)
		if err != nil {
			c.Close()
			continue
		}
		pipeConns(c.(*net.TCPConn), s.(*net.TCPConn))
	}
}
