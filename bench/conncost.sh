#!/bin/bash
# conncost.sh TOOL [MODE] [PATH]: what one connection (or transaction)
# costs the whole machine beside TOOL (gopasta or pasta): system calls and
# context switches of TOOL's process, per transaction, counted with
# perf stat over a request/response run (bench/rr) with TOOL, client and
# server pinned to one CPU.
#
# MODE: crr (connect, 1-byte request and answer, close; the default) or rr.
# PATH: in (spliced, host 127.0.0.1 -> namespace, -t), out (spliced,
# namespace -> host 127.0.0.1, -T), tapin (host 192.0.2.1 -> namespace over
# the TAP, -t), tapout (namespace -> the gateway, the host's loopback, over
# the TAP). TOOL runs as uid 65534 attached to a rootless namespace
# (unshare -Urn), as podman runs pasta. Needs root, perf and iproute2.
# SECS (default 3) is the length of the run; CPU (default 0) the CPU.
set -eu
tool=$(realpath -s "$1") mode=${2:-crr} path=${3:-in}
secs=${SECS:-3} cpu=${CPU:-0}
cd "$(dirname "$0")/.."
rr=$(mktemp -d)/rr
CGO_ENABLED=0 go build -o "$rr" ./bench/rr
pin="taskset -c $cpu"
host=gopasta-conncost-$$
perfout=$(mktemp)
pids=()
marker=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	pkill -f "^$rr " 2>/dev/null || true
	pkill -f "^sleep $marker\$" 2>/dev/null || true
	ip netns del "$host" 2>/dev/null || true
	rm -rf "$(dirname "$rr")" "$perfout"
}
trap cleanup EXIT

# A host namespace of our own, with an address and a default route.
ip netns add "$host"
ip -n "$host" link set lo up
ip -n "$host" link add d0 type veth peer name d1
ip -n "$host" link set d1 up
ip -n "$host" addr add 192.0.2.1/24 dev d0
ip -n "$host" link set d0 up
ip -n "$host" route add default via 192.0.2.254 dev d0 onlink
in_host() { ip netns exec "$host" "$@"; }

# The rootless namespace TOOL attaches to: a sleep, told apart by its
# length.
marker=599.$$
in_host setpriv --reuid 65534 --regid 65534 --clear-groups unshare -Urn sleep "$marker" &
pids+=($!)
target=
for _ in $(seq 50); do
	target=$(pgrep -n -f "^sleep $marker\$" || true)
	[ -n "$target" ] && break
	sleep 0.1
done
[ -n "$target" ] || { echo "the namespace's process did not start" >&2; exit 1; }
in_ns() { nsenter -t "$target" -U -n --preserve-credentials "$@"; }

in_host perf stat -x, -e 'syscalls:sys_enter_*' -e context-switches -o "$perfout" -- \
	$pin setpriv --reuid 65534 --regid 65534 --clear-groups \
	"$tool" --config-net -f -t 5201 -T 5202 -u none -U none "$target" >/dev/null 2>&1 &
perf=$!
pids+=($perf)
sleep 1.5
in_ns $pin "$rr" -server -listen 0.0.0.0:5201 >/dev/null 2>&1 &
pids+=($!)
in_host $pin "$rr" -server -listen 127.0.0.1:5202 >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
case $path in
in) result=$(in_host $pin "$rr" -mode "$mode" -connect 127.0.0.1:5201 -time "${secs}s") ;;
out) result=$(in_ns $pin "$rr" -mode "$mode" -connect 127.0.0.1:5202 -time "${secs}s") ;;
tapin) result=$(in_host $pin "$rr" -mode "$mode" -connect 192.0.2.1:5201 -time "${secs}s") ;;
tapout) result=$(in_ns $pin "$rr" -mode "$mode" -connect 192.0.2.254:5202 -time "${secs}s") ;;
*) echo "path: in, out, tapin or tapout" >&2; exit 2 ;;
esac
# Stop TOOL (perf's child) so that perf writes its counts.
pkill -TERM -f "^$tool --config-net -f -t 5201 -T 5202 -u none -U none $target\$" || true
for _ in $(seq 100); do kill -0 "$perf" 2>/dev/null || break; sleep 0.1; done
n=$(echo "$result" | sed -n 's/.*"transactions":\([0-9]*\).*/\1/p')
echo "$(basename "$tool") $mode $path: $n transactions in ${secs}s"
awk -F, -v n="$n" '$1 ~ /^[0-9]+$/ && $1 > 0 {
	name = $3; sub("syscalls:sys_enter_", "", name)
	if (name == "context-switches") cs = $1 / n
	else { calls += $1; per[name] = $1 / n }
}
END {
	printf "per transaction: %.1f system calls, %.2f context switches\n", calls / n, cs
	for (k in per) if (per[k] >= 0.05) printf "  %-18s %6.2f\n", k, per[k] | "sort -k2 -nr"
}' "$perfout"
