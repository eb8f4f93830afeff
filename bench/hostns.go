package main

// The throwaway "host" network namespace each tool gets, with documentation
// addresses.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"time"
)

// The per-run "host": a network namespace with documentation addresses and
// default routes, like internal/nstest.HostNS, so every tool sees the same
// template interface and no traffic touches the machine's own network.
const (
	hostIf    = "eth0"
	hostAddr4 = "192.0.2.1"
	hostAddr6 = "2001:db8::1"
	hostGW4   = "192.0.2.254"
	hostGW6   = "2001:db8::fe"
	// The address every namespace under test gets (-a), so the namespace
	// does not shadow the host's own address and traffic to 192.0.2.1
	// really leaves it.
	nsAddr4 = "192.0.2.2"
	nsAddr6 = "2001:db8::2"
)

// Everything runs as this unprivileged identity: the point of these tools.
var asNobody = []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"}

type hostNS struct {
	name string
}

func uniqueName(prefix string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%d%s", prefix, os.Getpid()%100000, hex.EncodeToString(b[:]))
}

func ip(args ...string) error {
	_, err := run(10*time.Second, append([]string{"ip"}, args...)...)
	return err
}

func newHostNS() (*hostNS, error) {
	h := &hostNS{name: uniqueName("gpbench")}
	if err := ip("netns", "add", h.name); err != nil {
		return nil, err
	}
	n := []string{"-n", h.name}
	steps := [][]string{
		{"link", "set", "lo", "up"},
		// No dummy interfaces on these machines: a veth pair with both ends
		// here keeps eth0 up.
		{"link", "add", hostIf, "type", "veth", "peer", "name", "peer0"},
		{"link", "set", hostIf, "up"},
		{"link", "set", "peer0", "up"},
		{"addr", "add", hostAddr4 + "/24", "dev", hostIf},
		{"addr", "add", hostAddr6 + "/64", "dev", hostIf, "nodad"},
		{"route", "add", "default", "via", hostGW4, "dev", hostIf, "onlink"},
		{"-6", "route", "add", "default", "via", hostGW6, "dev", hostIf, "onlink"},
	}
	for _, s := range steps {
		if err := ip(append(n, s...)...); err != nil {
			h.close()
			return nil, fmt.Errorf("setting up host namespace: %w", err)
		}
	}
	return h, nil
}

func (h *hostNS) path() string { return "/run/netns/" + h.name }

// cmd wraps argv to run in the host namespace as uid 65534.
func (h *hostNS) cmd(argv ...string) []string {
	out := []string{"nsenter", "--net=" + h.path(), "--"}
	out = append(out, asNobody...)
	return append(out, argv...)
}

func (h *hostNS) close() {
	if err := ip("netns", "del", h.name); err != nil {
		warnf("deleting %s: %v", h.name, err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
