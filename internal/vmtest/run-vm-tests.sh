#!/usr/bin/env bash
# run-vm-tests.sh - run the tests that need kernel features the host may lack
# (vhost-net) inside throwaway QEMU guests. One entry point for make and CI.
#
# Usage: internal/vmtest/run-vm-tests.sh [PACKAGE...]
#   Packages are Go package paths relative to the repository root, each
#   optionally followed by @REGEXP, its default -test.run (VMTEST_RUN wins);
#   default: $VMTEST_PACKAGES, else the list below. Each package's tests are built as
#   one static binary (CGO_ENABLED=0 GOARCH=amd64 go test -c) and run as root
#   in its own guest with -test.v; inside, VMTEST_GUEST=1 and /dev/vhost-net
#   and /dev/net/tun are mode 0666.
#
# Steps: (1) host setup: apt-get install qemu-system-x86 busybox-static
# --no-install-recommends, guest kernel fetched with apt-get download into
# the cache (setup.sh); (2) base initramfs (build-initramfs.sh); (3) test
# binaries; (4) one guest per package (run.sh).
#
# Exit status: 0 when every package passed; 1 when one failed or setup
# failed. When qemu cannot be installed at all (no apt-get, not root, apt
# failing) it prints "SKIP: qemu cannot be installed: <why>" and exits 0.
#
# Env:
#   VMTEST_CACHE     cache dir (default: <repo>/.cache/vmtest, git-ignored)
#   VMTEST_PACKAGES  space-separated packages (default: see packages below)
#   VMTEST_RUN       passed as -test.run to every binary (default: all tests,
#                    or the package's @REGEXP)
#   VMTEST_GUEST_ENV space-separated KEY=VALUE pairs for the binaries' environment
#   VMTEST_TIMEOUT   seconds per guest before it is killed (default 240)
#   plus run.sh's VMTEST_ACCEL, VMTEST_MEM, VMTEST_SMP, VMTEST_LOG
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export VMTEST_CACHE=${VMTEST_CACHE:-$repo/.cache/vmtest}
export VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-240}

# Packages with tests that only run in the guest. ./e2e holds gopasta's
# other end-to-end tests too (they need tools the guest lacks): only its
# vhost tests run here.
packages=(./vhostkern './e2e@^TestVhost')
if [ $# -gt 0 ]; then
	packages=("$@")
elif [ -n "${VMTEST_PACKAGES:-}" ]; then
	read -r -a packages <<<"$VMTEST_PACKAGES"
fi

log() { echo "run-vm-tests: $*" >&2; }
skip() {
	echo "SKIP: qemu cannot be installed: $*"
	exit 0
}

# (1a) qemu and busybox: the only reason to skip is not being able to get them.
have_tools() {
	command -v qemu-system-x86_64 >/dev/null 2>&1 &&
		dpkg-query -W -f='${Status}\n' busybox-static 2>/dev/null | grep -q 'ok installed'
}
if ! have_tools; then
	command -v apt-get >/dev/null 2>&1 || skip "no apt-get on this host (install qemu-system-x86_64 and a static busybox by hand)"
	[ "$(id -u)" = 0 ] || skip "apt-get needs root, running as uid $(id -u)"
	aptlog=$(mktemp)
	trap 'rm -f "$aptlog"' EXIT
	log "installing qemu-system-x86 busybox-static"
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get -q -o DPkg::Lock::Timeout=600 update &&
		apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 \
			qemu-system-x86 busybox-static; } >"$aptlog" 2>&1; then
		skip "apt-get failed: $(grep -E '^(E|W):' "$aptlog" | tail -n 3 | tr '\n' ' ')"
	fi
	have_tools || skip "apt-get succeeded but qemu-system-x86_64 or busybox-static is still missing"
fi

# (1b) guest kernel, cached; from here on every failure is a real failure.
"$here/setup.sh"
# (2) base initramfs: about a second, cheap enough to rebuild every time.
"$here/build-initramfs.sh"

# (3) static test binaries.
work=$(mktemp -d "${TMPDIR:-/tmp}/vmtest-bins.XXXXXX")
trap 'rm -rf "$work" ${aptlog:+"$aptlog"}' EXIT
bins=()
runs=()
for i in "${!packages[@]}"; do
	pkg=${packages[$i]}
	run=
	if [[ $pkg == *@* ]]; then
		run=${pkg#*@}
		pkg=${pkg%%@*}
		packages[i]=$pkg
	fi
	runs+=("${VMTEST_RUN:-$run}")
	name=$(echo "${pkg#./}" | tr '/.' '__')
	[ -n "$name" ] && [ "$name" != _ ] || name=root
	log "building $pkg"
	(cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c -o "$work/$name.test" "$pkg")
	bins+=("$work/$name.test")
done

# (4) one guest per package.
args=(-test.v -test.count=1 "-test.timeout=$((VMTEST_TIMEOUT - 30))s")
envargs=()
for e in ${VMTEST_GUEST_ENV:-}; do envargs+=(-e "$e"); done
failed=()
for i in "${!packages[@]}"; do
	pkg=${packages[$i]}
	log "running $pkg in a guest"
	start=$SECONDS
	pargs=("${args[@]}")
	[ -n "${runs[$i]}" ] && pargs+=("-test.run=${runs[$i]}")
	if "$here/run.sh" ${envargs[@]+"${envargs[@]}"} "${bins[$i]}" "${pargs[@]}"; then
		log "PASS $pkg ($((SECONDS - start)) s)"
	else
		rc=$?
		log "FAIL $pkg: exit status $rc ($((SECONDS - start)) s; 124 = guest timed out, 125 = guest died)"
		failed+=("$pkg")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	log "failed: ${failed[*]}"
	exit 1
fi
log "all passed: ${packages[*]}"
