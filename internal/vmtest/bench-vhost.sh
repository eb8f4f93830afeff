#!/usr/bin/env bash
# bench-vhost.sh - compare gopasta --vhost=off with --vhost=on (RX from the
# vhost queue, and RX by read(2) on the TAP) on the same TCP transfers, in a
# vmtest guest (the host has no vhost-net). Under TCG absolute figures mean
# nothing: read the ratios and the notifications per frame.
#
# Usage: internal/vmtest/bench-vhost.sh     (make bench-vhost)
# Output: the guest log, then one "mtu <MTU> <case> <up|down> <MiB/s> ratio <vs off>
# frames ... notify/frame ..." line per MTU, case and direction; median of the rounds.
#
# Env:
#   GOPASTA_VHOST_BENCH_ROUNDS   rounds; each figure is their median (default 3)
#   BENCH_VHOST_OUT           also write the BENCH lines to this file
#   plus run-vm-tests.sh's (VMTEST_TIMEOUT default raised to 600 here)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-600}
export VMTEST_GUEST_ENV="GOPASTA_VHOST_BENCH=1 GOPASTA_VHOST_BENCH_ROUNDS=${GOPASTA_VHOST_BENCH_ROUNDS:-3} ${VMTEST_GUEST_ENV:-}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
"$here/run-vm-tests.sh" './e2e@^TestVhostBench$' 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
echo
echo "vhost-net benchmark in the guest (median of the rounds; TCG: compare ratios only):"
grep -E "^[[:space:]]*BENCH " "$log" | sed "s/^[[:space:]]*BENCH //" | tee ${BENCH_VHOST_OUT:+"$BENCH_VHOST_OUT"}
if grep -q '^SKIP: ' "$log"; then
	exit 0
fi
exit "$rc"
