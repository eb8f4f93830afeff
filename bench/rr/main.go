// Command rr measures TCP request/response rates with one-byte messages, the
// way netperf's TCP_RR and TCP_CRR do, so the benchmark harness needs nothing
// beyond iperf3 and this program inside the namespaces it compares.
//
//	rr -server -listen ADDR:PORT         echo one byte per byte received, forever
//	rr -mode rr  -connect ADDR:PORT -time 5s   one connection, ping-pong
//	rr -mode crr -connect ADDR:PORT -time 5s   connect, ping-pong, close, repeat
//
// The client prints one JSON object (see Result) on standard output. The
// server prints "listening" once its socket is bound, so the harness can
// start the client without polling the port (a poll would be a transaction).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// Result is what the client reports.
type Result struct {
	Mode         string  `json:"mode"`
	Transactions int64   `json:"transactions"`
	Seconds      float64 `json:"seconds"`
	Rate         float64 `json:"rate"`
	Error        string  `json:"error,omitempty"`
	// Warning is an error that ended the run early after some transactions.
	Warning string `json:"warning,omitempty"`
}

func main() {
	server := flag.Bool("server", false, "run the echo server")
	listen := flag.String("listen", "127.0.0.1:5202", "server: address to listen on")
	mode := flag.String("mode", "rr", "client: rr (one connection) or crr (a connection per transaction)")
	connect := flag.String("connect", "127.0.0.1:5202", "client: server address")
	dur := flag.Duration("time", 5*time.Second, "client: how long to run")
	opTimeout := flag.Duration("op-timeout", 3*time.Second, "client: give up when one transaction takes longer")
	flag.Parse()

	if *server {
		err := serve(*listen) // returns only on failure
		fmt.Fprintln(os.Stderr, "rr:", err)
		os.Exit(1)
	}
	var r Result
	switch *mode {
	case "rr":
		r = runRR(*connect, *dur, *opTimeout)
	case "crr":
		r = runCRR(*connect, *dur, *opTimeout)
	default:
		fmt.Fprintf(os.Stderr, "rr: unknown -mode %q (want rr or crr)\n", *mode)
		os.Exit(2)
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	if r.Error != "" {
		os.Exit(1)
	}
}

func serve(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go echo(c)
	}
}

// echo answers each byte with one byte and closes when the client does. For
// crr the server closes right after its answer, as an HTTP/1.0 server would,
// so TIME_WAIT lands on the server's side and the client's ephemeral ports
// are not exhausted within a run.
func echo(c net.Conn) {
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	var b [1]byte
	for {
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return
		}
		if b[0] == 'c' { // crr: one transaction per connection
			_, _ = c.Write(b[:])
			return
		}
		if _, err := c.Write(b[:]); err != nil {
			return
		}
	}
}

func runRR(addr string, dur, opTimeout time.Duration) Result {
	r := Result{Mode: "rr"}
	c, err := net.DialTimeout("tcp", addr, opTimeout)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetNoDelay(true)
	b := []byte{'r'}
	start := time.Now()
	end := start.Add(dur)
	for {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		// A deadline per transaction bounds a stalled path without paying
		// for a deadline syscall on every one: re-arm every 1024.
		if r.Transactions%1024 == 0 {
			_ = c.SetDeadline(now.Add(opTimeout))
		}
		if _, err := c.Write(b); err != nil {
			r.Error = err.Error()
			break
		}
		if _, err := io.ReadFull(c, b); err != nil {
			r.Error = err.Error()
			break
		}
		r.Transactions++
	}
	return finish(r, start, dur)
}

func runCRR(addr string, dur, opTimeout time.Duration) Result {
	r := Result{Mode: "crr"}
	start := time.Now()
	end := start.Add(dur)
	b := []byte{'c'}
	for time.Now().Before(end) {
		if err := oneCRR(addr, b, opTimeout); err != nil {
			r.Error = err.Error()
			break
		}
		r.Transactions++
	}
	return finish(r, start, dur)
}

func oneCRR(addr string, b []byte, opTimeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, opTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetNoDelay(true)
	_ = c.SetDeadline(time.Now().Add(opTimeout))
	if _, err := c.Write(b); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	// Wait for the server's FIN so its side closes first (see echo).
	var x [1]byte
	if _, err := c.Read(x[:]); err != io.EOF && err != nil {
		return err
	}
	return nil
}

func finish(r Result, start time.Time, dur time.Duration) Result {
	// A run cut short by an error counts over the whole intended duration:
	// the path moved nothing for the rest of it.
	r.Seconds = max(time.Since(start).Seconds(), dur.Seconds())
	r.Rate = float64(r.Transactions) / r.Seconds
	// A path that stalls for good mid-run still produced a rate worth
	// reporting; only a run with no transaction at all is a failure.
	if r.Transactions > 0 && r.Error != "" {
		r.Warning, r.Error = r.Error, ""
	}
	return r
}
