package logging

// The -l log file, kept under --log-size by starting it again when full.

import (
	"fmt"
	"os"
	"sync"
)

// CappedFile is a log file that never grows past its cap: when a write would
// exceed it, the file is truncated and starts again with a note. Old lines go
// rather than the disk filling up; this is what --log-size promises.
type CappedFile struct {
	mu   sync.Mutex
	f    *os.File
	size int64
	max  int64
}

// OpenCapped opens (creating, truncating) path for logging, capped at max
// bytes (DefaultLogSize when max <= 0).
func OpenCapped(path string, max int64) (*CappedFile, error) {
	if max <= 0 {
		max = DefaultLogSize
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open log file: %w", err)
	}
	return &CappedFile{f: f, max: max}, nil
}

func (c *CappedFile) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	whole := len(p)
	if c.size+int64(len(p)) > c.max {
		if err := c.f.Truncate(0); err != nil {
			return 0, err
		}
		c.size = 0
		n, _ := fmt.Fprintf(c.f, "gopasta: log reached %d bytes, truncated\n", c.max)
		c.size += int64(n)
		if int64(len(p)) > c.max-c.size {
			p = p[:max(0, c.max-c.size)]
		}
	}
	n, err := c.f.Write(p)
	c.size += int64(n)
	if err != nil {
		return n, err
	}
	// A line cut to fit the cap is still reported as written: the caller
	// cannot do better, and a short write would only produce a second error.
	return whole, nil
}

// Close closes the file.
func (c *CappedFile) Close() error { return c.f.Close() }

// Fd is the file's descriptor, for writers that must not take the lock
// (the sandbox's seccomp supervisor writes its one line with write(2)).
func (c *CappedFile) Fd() uintptr { return c.f.Fd() }
