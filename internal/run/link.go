package run

// --vhost and --tap-napi: how the engine's link to the namespace is built.
// Plain TAP I/O is one read(2)/write(2) per frame on gopasta's thread; with
// vhost-net the kernel's worker thread moves frames between the TAP and
// rings shared with us (package vhostkern), and we only touch memory and,
// rarely, an eventfd.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/gopasta/gopasta/fwd"
	"github.com/gopasta/gopasta/internal/config"
	"github.com/gopasta/gopasta/internal/header"
	"github.com/gopasta/gopasta/tap"
	"github.com/gopasta/gopasta/vhostkern"
	"golang.org/x/sys/unix"
)

// vhostRXEnv selects where vhost-mode RX comes from: "read" (readv(2) on
// the TAP, vhost-net for TX only; the default) or "queue" (the vhost RX
// virtqueue). It exists for the benchmark behind the default
// (docs/vhost.md): read(2) is the faster, because the queue costs a
// second copy of each frame. Not a user-facing option.
const vhostRXEnv = "GOPASTA_VHOST_RX"

// dataLink is the TAP and, when vhost-net carries its frames, the vhost
// device on top of it.
type dataLink struct {
	tap *tap.Device
	vh  *vhostkern.Device // nil: plain TAP I/O
	log *slog.Logger
	// statsAtExit logs the vhost counters on Close (--stats or --debug).
	statsAtExit bool
	// vnet: the engine sees the virtio-net header (fwd.Options.VnetHdr)
	// and the TAP has offloads: plain TAP I/O or vhost-net, unless
	// GOPASTA_OFFLOAD=0.
	vnet bool
}

// VhostError is the start-up failure of --vhost=on: the device is missing
// or does not work here. Unwrap gives vhostkern's error, which wraps
// vhostkern.ErrNotSupported when the kernel or permissions are the cause.
type VhostError struct {
	Err error
}

func (e *VhostError) Error() string {
	return fmt.Sprintf("--vhost=on: cannot use /dev/vhost-net: %v", e.Err)
}

func (e *VhostError) Unwrap() error { return e.Err }

// openDataLink opens the namespace's TAP as tc describes (name, MAC) and,
// as cfg.Vhost says, puts vhost-net on it. It runs on the namespace thread,
// because the TAP must be created in the namespace; /dev/vhost-net is a
// plain device node and does not care where it is opened.
func openDataLink(cfg *config.Config, tc tap.Config, log *slog.Logger) (*dataLink, error) {
	tc.NAPI = cfg.TapNAPI
	dl := &dataLink{log: log, statsAtExit: cfg.Stats > 0 || cfg.Debug}
	offload := os.Getenv(offloadEnv) != "0"
	if cfg.Vhost == config.VhostOff {
		return dl, dl.openPlain(tc, offload, log)
	}
	// Probe first: without it a missing device would cost a TAP opened
	// with a virtio-net header that plain I/O cannot use.
	err := vhostkern.Probe()
	if err == nil {
		var tapErr bool
		if dl.tap, dl.vh, tapErr, err = openVhostTap(tc, offload, log); err == nil {
			dl.vnet = offload
			return dl, nil
		} else if tapErr {
			return nil, err // plain TAP I/O would fail the same way
		}
	}
	if cfg.Vhost == config.VhostOn {
		return nil, &VhostError{Err: err}
	}
	log.Info(fmt.Sprintf("vhost-net unavailable (%v): using plain TAP I/O", err))
	return dl, dl.openPlain(tc, offload, log)
}

// offloadEnv set to "0" turns the TAP's offloads off, for measuring what
// they bring (docs/performance.md) and for testing the plain path; it is
// not a user-facing option.
const offloadEnv = "GOPASTA_OFFLOAD"

// openPlain opens the TAP for gopasta's own I/O, with a virtio-net header
// and checksum and TSO offloads where the kernel has them, so that frames
// cross the TAP as 64 KiB GSO frames whatever the MTU and no checksum is
// computed on either side (docs/architecture.md, "Offloads"). Each step
// falls back: no TSO (the namespace then sends MTU-sized frames, which the
// engine still takes), or no virtio-net header at all. offload false
// (GOPASTA_OFFLOAD=0) goes straight to the last.
func (dl *dataLink) openPlain(tc tap.Config, offload bool, log *slog.Logger) error {
	if offload {
		vc := tc
		vc.VnetHdr, vc.VnetHdrSize = true, header.VirtioNetHdrSize
		t, err := openTap(vc, log)
		if err == nil {
			dl.tap, dl.vnet = t, true
			setOffloads(t, log)
			return nil
		}
		log.Debug("TAP virtio-net header unavailable: plain frames", "err", err)
	}
	var err error
	dl.tap, err = openTap(tc, log)
	return err
}

// setOffloads turns on the TAP's checksum and TCP segmentation offloads
// (TUNSETOFFLOAD; the TAP must carry a virtio-net header). USO (Linux 6.2)
// is left off: a UDP super-frame would have to be cut into datagrams here.
// A kernel that refuses keeps MTU-sized frames, which the engine takes too.
func setOffloads(t *tap.Device, log *slog.Logger) {
	if err := t.SetOffload(unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6); err != nil {
		log.Debug("TAP offloads unavailable: frames from the namespace stay MTU-sized", "err", err)
	}
}

// openVhostTap opens the TAP with the 12-byte virtio-net header vhost-net
// speaks and attaches a vhost device to it. On failure nothing stays open,
// and tapErr says whether it was the TAP that failed rather than vhost-net.
func openVhostTap(tc tap.Config, offload bool, log *slog.Logger) (_ *tap.Device, _ *vhostkern.Device, tapErr bool, _ error) {
	tc.VnetHdr, tc.VnetHdrSize = true, header.VirtioNetHdrSize
	t, err := openTap(tc, log)
	if err != nil {
		return nil, nil, true, err
	}
	// The engine reads and writes the virtio-net header itself, as with
	// plain TAP I/O, so the TAP's offloads work through vhost-net too:
	// 64 KiB TSO frames from the namespace, 64 KiB GSO frames into it.
	vc := vhostkern.Config{TapFd: t.Fd(), PassHdr: offload}
	if offload {
		setOffloads(t, log)
	}
	switch rx := os.Getenv(vhostRXEnv); rx {
	case "", "read":
		vc.RXFromTap = true
	case "queue":
	default:
		t.Close()
		return nil, nil, false, fmt.Errorf("%s=%q: want queue or read", vhostRXEnv, rx)
	}
	vh, err := vhostkern.Open(vc)
	if err != nil {
		t.Close()
		return nil, nil, false, err
	}
	rx := "vhost RX queue"
	if vc.RXFromTap {
		rx = "read(2) on the TAP"
	}
	log.Info("vhost-net: TAP data path offloaded to the kernel",
		"features", vhostkern.FeatureString(vh.Features()), "rx", rx, "offloads", vc.PassHdr)
	return t, vh, false, nil
}

// openTap is tap.Open that treats IFF_NAPI as a wish: a kernel before 4.15
// rejects the flag (EINVAL), and then the TAP opens without it.
func openTap(tc tap.Config, log *slog.Logger) (*tap.Device, error) {
	t, err := tap.Open(tc)
	if err == nil || !tc.NAPI || !errors.Is(err, unix.EINVAL) {
		return t, err
	}
	tc.NAPI = false
	t, err2 := tap.Open(tc)
	if err2 != nil {
		return nil, err
	}
	log.Warn("--tap-napi: the kernel refused IFF_NAPI, TAP opened without it", "err", err)
	return t, nil
}

// link is what the engine reads and writes.
func (dl *dataLink) link() fwd.Link {
	if dl.vh != nil {
		return dl.vh
	}
	return dl.tap
}

// Close releases the vhost device, then the TAP: the kernel must stop using
// the TAP as a backend before the TAP goes. The engine must have stopped.
func (dl *dataLink) Close() error {
	if dl == nil {
		return nil
	}
	var errs []error
	if dl.vh != nil {
		if dl.statsAtExit {
			dl.logVhostStats("vhost stats at exit")
		}
		errs = append(errs, dl.vh.Close())
		dl.vh = nil
	}
	if dl.tap != nil {
		errs = append(errs, dl.tap.Close())
		dl.tap = nil
	}
	return errors.Join(errs...)
}

// startStats logs the vhost counters every interval (--stats), next to the
// engine's own line (logStats). Nothing to do without vhost.
func (dl *dataLink) startStats(ctx context.Context, interval time.Duration) {
	if dl.vh == nil || interval <= 0 {
		return
	}
	go every(ctx, interval, func() { dl.logVhostStats("vhost stats") })
}

func (dl *dataLink) logVhostStats(msg string) {
	s := dl.vh.Stats()
	dl.log.Info(msg, vhostStatAttrs(s)...)
}

// vhostStatAttrs renders the counters with the figure that matters:
// notifications (our kicks plus the kernel's calls) per frame, each way.
// "rx" is what the namespace sent, "tx" what we delivered into it.
func vhostStatAttrs(s vhostkern.Stats) []any {
	return []any{
		"rx_frames", s.RxFrames, "rx_kicks", s.RxKicks, "rx_calls", s.RxCalls,
		"rx_notify_per_frame", perFrame(s.RxKicks+s.RxCalls, s.RxFrames),
		"tx_frames", s.TxFrames, "tx_kicks", s.TxKicks, "tx_calls", s.TxCalls,
		"tx_notify_per_frame", perFrame(s.TxKicks+s.TxCalls, s.TxFrames),
		"rx_dropped", s.RxDropped, "tx_full", s.TxFull,
		"rx_polled", s.RxPolled, "rx_armed", s.RxArmed,
	}
}

// perFrame is n/frames with three decimals, "-" before the first frame.
func perFrame(n, frames uint64) string {
	if frames == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", float64(n)/float64(frames))
}

// adoptDataLink takes --fd's TAP, which the caller opened in the target
// namespace, as the data link: plain TAP I/O, with the virtio-net header
// and offloads when the caller opened it with IFF_VNET_HDR (its header
// is then sized as ours, 12 bytes), plain frames otherwise. vhost-net is
// not put on it (--vhost=on is refused with --fd, auto is off). mac
// (--ns-mac-addr), when set, becomes the interface's. It runs on the
// namespace thread, where the TAP must be.
func adoptDataLink(cfg *config.Config, fd int, mac net.HardwareAddr, log *slog.Logger) (*dataLink, error) {
	t, err := tap.FromFD(fd)
	if err != nil {
		return nil, fmt.Errorf("--fd %d: %w", cfg.TapFD, err)
	}
	dl := &dataLink{tap: t, log: log, statsAtExit: cfg.Stats > 0 || cfg.Debug}
	if t.VnetHdr() {
		if err := t.SetVnetHdrSize(header.VirtioNetHdrSize); err != nil {
			dl.Close()
			return nil, fmt.Errorf("--fd %d: %w", cfg.TapFD, err)
		}
		dl.vnet = true
		if os.Getenv(offloadEnv) != "0" {
			setOffloads(t, log)
		}
	}
	if mac != nil {
		if err := t.SetMAC(mac); err != nil {
			dl.Close()
			return nil, fmt.Errorf("--fd %d: %w", cfg.TapFD, err)
		}
	}
	log.Debug("--fd: using the TAP passed in", "interface", t.Name(), "virtio-net header", dl.vnet)
	return dl, nil
}
