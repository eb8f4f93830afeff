#!/bin/bash
# Installs what the benchmark harness runs, when missing: iperf3, Debian's
# passt (for pasta), slirp4netns, and the util-linux/iproute2 tools it
# drives. Only as root with apt-get; otherwise it says what is missing and
# lets the harness mark those tools "n/a".
set -u
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have iperf3      || need+=(iperf3)
have pasta       || need+=(passt)
have slirp4netns || need+=(slirp4netns)
have setpriv     || need+=(util-linux)
have nsenter     || need+=(util-linux)
have taskset     || need+=(util-linux)
have ip          || need+=(iproute2)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! have apt-get; then
	echo "bench/deps.sh: missing ${need[*]}; install them (the harness marks missing tools n/a)" >&2
	exit 0
fi
echo "bench/deps.sh: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Bounded: a hung mirror must not hang `make bench`.
timeout 300 apt-get update -qq >/dev/null || true
timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
	echo "bench/deps.sh: apt-get install ${need[*]} failed; continuing" >&2
exit 0
