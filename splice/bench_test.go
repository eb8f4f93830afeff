package splice

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The benchmarks compare three ways of carrying one loopback TCP stream:
//   direct  client -> server, no proxy (the cost of the endpoints alone)
//   splice  client -> Forwarder -> server
//   iocopy  client -> io.Copy between two *net.TCPConn -> server (Go splices
//           TCPConn to TCPConn internally, through its own 1 MiB-capable pipes)
// Each op moves 1 MiB; run with -benchtime=256x for the 256 MiB transfer.
// cpu-ns/MiB is process CPU (user+system, all threads); subtracting the
// direct figure leaves what the proxy costs.

type connector func(b *testing.B) (client, server *net.TCPConn)

// dialAccept connects to l and returns both ends.
func dialAccept(b *testing.B, l net.Listener) (dialled, accepted *net.TCPConn) {
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func directConnector(b *testing.B) connector {
	l := listen(b)
	return func(b *testing.B) (*net.TCPConn, *net.TCPConn) { return dialAccept(b, l) }
}

func spliceConnector(b *testing.B, opts Options) connector {
	r := newRig(b, opts)
	return func(b *testing.B) (*net.TCPConn, *net.TCPConn) { return r.connect(b) }
}

func ioCopyConnector(b *testing.B) connector {
	front, back := listen(b), listen(b)
	return func(b *testing.B) (*net.TCPConn, *net.TCPConn) {
		c, in := dialAccept(b, front)
		out, s := dialAccept(b, back)
		pipeConns(in, out)
		return c, s
	}
}

// pipeConns is the idiomatic Go proxy: io.Copy each way, half-close after.
func pipeConns(a, b *net.TCPConn) {
	var wg sync.WaitGroup
	cp := func(dst, src *net.TCPConn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			dst.SetLinger(0)
			dst.Close()
			src.Close()
			return
		}
		dst.CloseWrite()
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	go func() { wg.Wait(); a.Close(); b.Close() }()
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// streamBench moves b.N MiB over each of streams connections at once.
func streamBench(b *testing.B, connect connector, streams int) {
	const chunk = 1 << 20
	block := randomBytes(b, chunk)
	type pair struct{ c, s *net.TCPConn }
	pairs := make([]pair, streams)
	for i := range pairs {
		pairs[i].c, pairs[i].s = connect(b)
	}
	b.SetBytes(int64(chunk * streams))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, wall0 := cpuTime(), time.Now()
	var wg sync.WaitGroup
	for _, p := range pairs {
		wg.Add(2)
		go func(c *net.TCPConn) {
			defer wg.Done()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(block); err != nil {
					b.Error(err)
					return
				}
			}
			c.CloseWrite()
		}(p.c)
		go func(s *net.TCPConn) {
			defer wg.Done()
			buf := make([]byte, chunk)
			var n int64
			for {
				m, err := s.Read(buf)
				n += int64(m)
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
			if n != int64(b.N)*chunk {
				b.Errorf("got %d bytes, want %d", n, int64(b.N)*chunk)
			}
		}(p.s)
	}
	wg.Wait()
	b.StopTimer()
	cpu, wall := cpuTime()-cpu0, time.Since(wall0)
	mib := float64(b.N * streams)
	b.ReportMetric(float64(cpu.Nanoseconds())/mib, "cpu-ns/MiB")
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu%")
	b.ReportMetric(mib*8*(1<<20)/wall.Seconds()/1e9, "Gbit/s")
	for _, p := range pairs {
		p.c.Close()
		p.s.Close()
	}
}

func BenchmarkStream(b *testing.B) {
	for _, streams := range []int{1, 4} {
		b.Run(fmt.Sprintf("direct/streams=%d", streams), func(b *testing.B) {
			streamBench(b, directConnector(b), streams)
		})
		b.Run(fmt.Sprintf("splice/streams=%d", streams), func(b *testing.B) {
			streamBench(b, spliceConnector(b, Options{}), streams)
		})
		b.Run(fmt.Sprintf("iocopy/streams=%d", streams), func(b *testing.B) {
			streamBench(b, ioCopyConnector(b), streams)
		})
	}
}

// BenchmarkSplicePipeSize shows what the F_SETPIPE_SZ probe buys.
func BenchmarkSplicePipeSize(b *testing.B) {
	for _, size := range []int{64 << 10, 256 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			streamBench(b, spliceConnector(b, Options{PipeSize: size}), 1)
		})
	}
}

// BenchmarkPingPong is the latency side: 64-byte request, 64-byte answer.
func BenchmarkPingPong(b *testing.B) {
	for _, tc := range []struct {
		name string
		mk   func(b *testing.B) connector
	}{
		{"direct", directConnector},
		{"splice", func(b *testing.B) connector { return spliceConnector(b, Options{}) }},
		{"iocopy", ioCopyConnector},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, s := tc.mk(b)(b)
			defer c.Close()
			defer s.Close()
			go echo64(s)
			msg, buf := make([]byte, 64), make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
