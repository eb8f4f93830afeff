package fwd

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/logging"
	"github.com/gopasta/gopasta/internal/nstest"
)

// TestTrace checks --trace's lines: one per flow and batch of frames from
// the namespace, one per host socket event, and none below trace level.
func TestTrace(t *testing.T) {
	for _, tc := range []struct {
		level slog.Level
		want  []string
	}{
		{logging.LevelTrace, []string{
			"tap: UDP 10.0.2.100:1000 -> 192.0.2.7:53, 2 frames",
			"tap: UDP 10.0.2.100:1001 -> 192.0.2.7:53, 1 frame",
			"tap: ICMP 10.0.2.100 -> 192.0.2.7, 1 frame",
			"host socket ",
		}},
		{slog.LevelDebug, nil},
	} {
		var lb nstest.SyncBuffer
		d := newDriven(t, Options{Logger: slog.New(slog.NewTextHandler(&lb, &slog.HandlerOptions{Level: tc.level}))})
		if got := d.e.trace; got != (tc.want != nil) {
			t.Errorf("level %v: got trace %v, want %v", tc.level, got, tc.want != nil)
		}
		d.cycle(udpFrame(ns4, ext, 1000, 53, []byte("a")), udpFrame(ns4, ext, 1001, 53, []byte("b")),
			udpFrame(ns4, ext, 1000, 53, []byte("c")), echoFrame(ns4, ext, 7, 1, []byte("x")))
		idx := d.e.ft.active[0]
		d.e.sockEvent(idx, d.e.ft.flows[idx].gen, 1)
		out := lb.String()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("level %v: got log\n%s\nwant a line with %q", tc.level, out, w)
			}
		}
		if tc.want == nil && strings.Contains(out, "tap: ") {
			t.Errorf("level %v: got log\n%s\nwant no per-packet line", tc.level, out)
		}
	}
}
