package run

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/vmtest"
	"github.com/gopasta/gopasta/tap"
	"github.com/gopasta/gopasta/vhostkern"
)

func TestVhostPerFrame(t *testing.T) {
	for _, tc := range []struct {
		n, frames uint64
		want      string
	}{
		{0, 0, "-"},
		{5, 0, "-"},
		{0, 10, "0.000"},
		{1, 3, "0.333"},
		{10, 10, "1.000"},
		{116, 10176, "0.011"},
	} {
		if got := perFrame(tc.n, tc.frames); got != tc.want {
			t.Errorf("perFrame(%d, %d): got %q, want %q", tc.n, tc.frames, got, tc.want)
		}
	}
}

func TestVhostStatAttrs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("vhost stats", vhostStatAttrs(vhostkern.Stats{
		RxFrames: 100, RxKicks: 1, RxCalls: 4, TxFrames: 50, TxKicks: 5})...)
	for _, want := range []string{"rx_frames=100", "rx_notify_per_frame=0.050", "tx_frames=50", "tx_notify_per_frame=0.100"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("got %q, want it to contain %q", buf.String(), want)
		}
	}
}

func TestVhostErrorUnwrap(t *testing.T) {
	inner := errors.Join(vhostkern.ErrNotSupported, errors.New("open /dev/vhost-net: no such file or directory"))
	var err error = &VhostError{Err: inner}
	if !errors.Is(err, vhostkern.ErrNotSupported) {
		t.Errorf("errors.Is(%v, ErrNotSupported): got false, want true", err)
	}
	if !strings.Contains(err.Error(), "/dev/vhost-net") || !strings.Contains(err.Error(), "--vhost=on") {
		t.Errorf("got %q, want the option and the device named", err)
	}
}

// TestVhostOpenDataLink opens the link for each --vhost mode in a fresh
// network namespace: on the host (no vhost-net) auto falls back with one
// info line and on fails; in the guest both give a vhost device.
func TestVhostOpenDataLink(t *testing.T) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("needs /dev/net/tun: %v", err)
	}
	if !vmtest.Isolated(t, vmtest.NetNS) {
		return
	}
	have := vhostkern.Probe() == nil
	if vmtest.InGuest() && !have {
		t.Fatalf("vhost-net probe fails in the guest: %v", vhostkern.Probe())
	}
	for _, tc := range []struct {
		mode    config.VhostMode
		napi    bool
		rx      string
		wantVh  bool
		wantErr bool
		wantLog string
	}{
		{mode: config.VhostOff},
		{mode: config.VhostOff, napi: true},
		{mode: config.VhostAuto, wantVh: have, wantLog: map[bool]string{false: "vhost-net unavailable", true: "offloaded"}[have]},
		{mode: config.VhostOn, wantVh: have, wantErr: !have},
		{mode: config.VhostOn, rx: "read", wantVh: have, wantErr: !have},
		{mode: config.VhostOn, rx: "bogus", wantErr: true},
	} {
		t.Run(strings.Join([]string{[]string{"off", "auto", "on"}[tc.mode], tc.rx, map[bool]string{true: "napi"}[tc.napi]}, "-"), func(t *testing.T) {
			t.Setenv(vhostRXEnv, tc.rx)
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			cfg := &config.Config{Vhost: tc.mode, TapNAPI: tc.napi}
			dl, err := openDataLink(cfg, tap.Config{Name: "vhtest%d"}, log)
			if tc.wantErr {
				if err == nil {
					dl.Close()
					t.Fatal("got no error, want one")
				}
				if tc.rx != "bogus" && !strings.Contains(err.Error(), "/dev/vhost-net") {
					t.Errorf("got %q, want /dev/vhost-net named", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want a link", err)
			}
			defer dl.Close()
			if got := dl.vh != nil; got != tc.wantVh {
				t.Errorf("vhost in use: got %v, want %v (log: %s)", got, tc.wantVh, buf.String())
			}
			if dl.link() == nil || dl.link().Fd() < 0 {
				t.Errorf("got link %v, want a usable one", dl.link())
			}
			if tc.wantLog != "" && strings.Count(buf.String(), tc.wantLog) != 1 {
				t.Errorf("got log %q, want %q once", buf.String(), tc.wantLog)
			}
			if tc.rx == "read" && dl.vh != nil && dl.link().Fd() != dl.tap.Fd() {
				t.Errorf("RX by read: got link fd %d, want the TAP's %d", dl.link().Fd(), dl.tap.Fd())
			}
			if err := dl.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}
