// Package vhostkern moves the TAP data path into the kernel's vhost-net
// worker: instead of one read(2) or write(2) per frame, gopasta shares two
// split virtqueues with /dev/vhost-net and exchanges frames through memory,
// with eventfd notifications that are suppressed while either side is busy.
//
// # Queue directions
//
// vhost-net names its queues from the point of view of a virtual machine's
// NIC driver, and gopasta plays that driver:
//
//   - queue 0, "RX" (device -> driver): the kernel puts into our buffers the
//     frames the TAP interface transmits, i.e. what the namespace sends.
//     ReadBatch drains it.
//   - queue 1, "TX" (driver -> device): the kernel takes frames from our
//     buffers and injects them as received by the TAP interface, i.e. it
//     delivers them into the namespace. WriteBatch fills it.
//
// # Frames
//
// Every buffer starts with a 12-byte struct virtio_net_hdr_v1 (VERSION_1 is
// required), which the TAP consumes and produces because it was opened with
// IFF_VNET_HDR and TUNSETVNETHDRSZ 12. Device strips it on the way in and
// writes an all-zero one (no offloads) on the way out, so callers see plain
// Ethernet frames and Device satisfies fwd.Link.
//
// # Memory
//
// Rings and frame buffers live in one anonymous shared mapping outside the
// Go heap, so their addresses never move. The memory table has a single
// region whose "guest physical" address equals our virtual address, which
// makes every descriptor address simply a pointer.
//
// The ring logic (ring.go, queue.go) is free of system calls and is unit
// tested against an in-process model of the kernel's side.
package vhostkern
