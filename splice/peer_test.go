package splice

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as an out-of-process peer for the latency
// benchmark, so that the proxy under test is the only thing in this
// process: SPLICE_PEER=echo serves, SPLICE_PEER=ping:ADDR:N measures.
func TestMain(m *testing.M) {
	if mode := os.Getenv("SPLICE_PEER"); mode != "" {
		if err := runPeer(mode); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runPeer(mode string) error {
	if mode == "echo" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		fmt.Println(l.Addr())
		for {
			c, err := l.Accept()
			if err != nil {
				return err
			}
			go func() {
				defer c.Close()
				echo64(c)
			}()
		}
	}
	parts := strings.Split(mode, ",")
	if len(parts) != 3 || parts[0] != "ping" {
		return fmt.Errorf("bad SPLICE_PEER %q", mode)
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil {
		return err
	}
	c, err := net.Dial("tcp", parts[1])
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 64)
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return nil
}

// BenchmarkExternalPingPong: 64-byte request/response round trips between
// two child processes through the proxy; rtt-ns is the client's view.
func BenchmarkExternalPingPong(b *testing.B) {
	for _, tc := range []struct {
		name    string
		forward func(b *testing.B, front net.Listener, back string)
	}{
		{"direct", nil},
		{"splice", forwardSplice},
		{"iocopy", forwardIOCopy},
	} {
		b.Run(tc.name, func(b *testing.B) {
			echo := exec.Command(os.Args[0])
			echo.Env = append(os.Environ(), "SPLICE_PEER=echo")
			out, err := echo.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := echo.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { echo.Process.Kill(); echo.Wait() }()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				b.Fatalf("echo peer: %v", err)
			}
			target := strings.TrimSpace(line)
			if tc.forward != nil {
				front := listen(b)
				go tc.forward(b, front, target)
				target = front.Addr().String()
			}
			b.ResetTimer()
			cpu0 := cpuTime()
			ping := exec.Command(os.Args[0])
			ping.Env = append(os.Environ(), fmt.Sprintf("SPLICE_PEER=ping,%s,%d", target, b.N))
			res, err := ping.Output()
			cpu := cpuTime() - cpu0
			if err != nil {
				b.Fatalf("ping peer: %v", err)
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(res)), 10, 64)
			if err != nil {
				b.Fatalf("ping peer output %q: %v", res, err)
			}
			b.ReportMetric(float64(ns)/float64(b.N), "rtt-ns")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "proxy-cpu-ns/op")
		})
	}
}

// echo64 sends each 64-byte message c brings back to it, until c fails.
func echo64(c net.Conn) {
	buf := make([]byte, 64)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}
