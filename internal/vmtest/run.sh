#!/usr/bin/env bash
# run.sh - boot a throwaway QEMU guest, run one static binary in it, and exit
# with that binary's exit status.
#
# Usage: run.sh [-e KEY=VALUE]... [--] BINARY [ARGS...]
#   e.g. run.sh ./pkg.test -test.v -test.run 'TestVhost'
#
# The binary (static, e.g. CGO_ENABLED=0 go test -c) is added to the base
# initramfs as /vmtest/bin/<name> and run as root from /tmp by the guest's
# /init, with VMTEST_GUEST=1 and the -e variables in its environment. Its
# output and the guest console stream to stdout (and to $VMTEST_LOG if set).
# Needs on the host: qemu-system-x86_64, busybox (for cpio), coreutils.
#
# Exit status: the binary's, or 124 on timeout, or 125 if the guest ended
# without reporting one (kernel panic, QEMU failure, ...).
#
# Env:
#   VMTEST_CACHE    dir from setup.sh/build-initramfs.sh (default: <repo>/.cache/vmtest)
#   VMTEST_KERNEL   kernel: PVH ELF or bzImage (default: $VMTEST_CACHE/vmlinux if
#                   setup.sh extracted one, else $VMTEST_CACHE/vmlinuz)
#   VMTEST_INITRD   base initramfs (default: $VMTEST_CACHE/base-initramfs.cpio.gz)
#   VMTEST_ACCEL    auto | kvm | tcg (default auto: kvm only with kvm_intel/kvm_amd, else tcg)
#   VMTEST_MACHINE  QEMU machine type (default pc)
#   VMTEST_MEM      guest memory (default 512M)
#   VMTEST_SMP      guest vCPUs (default 2)
#   VMTEST_TIMEOUT  seconds before the guest is killed (default 300)
#   VMTEST_APPEND   extra kernel command line
#   VMTEST_LOG      also write the console log here
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${VMTEST_CACHE:-$(cd "$here/../.." && pwd)/.cache/vmtest}
kernel=${VMTEST_KERNEL:-}
if [ -z "$kernel" ]; then
	kernel=$cache/vmlinuz
	[ -f "$cache/vmlinux" ] && kernel=$cache/vmlinux
fi
base=${VMTEST_INITRD:-$cache/base-initramfs.cpio.gz}
machine=${VMTEST_MACHINE:-pc}
mem=${VMTEST_MEM:-512M}
smp=${VMTEST_SMP:-2}
timeout_s=${VMTEST_TIMEOUT:-300}
accel=${VMTEST_ACCEL:-auto}

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
die() { echo "vmtest: $*" >&2; exit 125; }

envs=()
while [ $# -gt 0 ]; do
	case $1 in
	-e) [ $# -ge 2 ] || usage; envs+=("$2"); shift 2 ;;
	--) shift; break ;;
	-h | --help) usage ;;
	-*) usage ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || usage
bin=$1
shift
[ -f "$bin" ] && [ -x "$bin" ] || die "$bin: not an executable file"
if head -c 4096 "$bin" | grep -qa 'ld-linux'; then
	die "$bin is dynamically linked; build it static (CGO_ENABLED=0)"
fi
[ -f "$kernel" ] || die "no kernel at $kernel (run setup.sh)"
[ -f "$base" ] || die "no base initramfs at $base (run build-initramfs.sh)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not installed (run setup.sh)"

if [ "$accel" = auto ]; then
	accel=tcg
	# Only VMX/SVM-backed KVM. A PVM host's /dev/kvm (module kvm_pvm) runs a
	# stock kernel in slow emulation and dies with an emulation failure.
	if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
		accel=kvm
	fi
fi
case $accel in
kvm) accel_args=(-accel kvm -cpu host) ;;
tcg) accel_args=(-accel tcg,thread=multi -cpu max) ;;
*) die "VMTEST_ACCEL must be auto, kvm or tcg" ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/vmtest.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Per-run overlay: the binary, its command line, and a nonce for the exit marker.
name=${bin##*/}
mkdir -p "$work/root/vmtest/bin"
install -m 0755 "$bin" "$work/root/vmtest/bin/$name"
nonce=$(od -An -N8 -tx8 /dev/urandom | tr -d ' \n')
echo "$nonce" >"$work/root/vmtest/nonce"
q() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
{
	for e in ${envs[@]+"${envs[@]}"}; do printf 'export %s\n' "$(q "$e")"; done
	printf 'set -- %s' "$(q "/vmtest/bin/$name")"
	for a in "$@"; do printf ' %s' "$(q "$a")"; done
	printf '\nexec "$@"\n'
} >"$work/root/vmtest/cmd"
# The kernel merges concatenated cpio archives. The overlay stays uncompressed
# (no gunzip under TCG) and goes first: the kernel's unpacker cannot resume
# after a gzip member, while an uncompressed archive may precede one.
(cd "$work/root" && find . -mindepth 1 | LC_ALL=C sort | busybox cpio -o -H newc -R 0:0 2>/dev/null) >"$work/overlay.cpio"
cat "$work/overlay.cpio" "$base" >"$work/initrd"

log=${VMTEST_LOG:-$work/console.log}
set +e
timeout -k 10 "$timeout_s" qemu-system-x86_64 \
	-nodefaults -no-user-config -display none -no-reboot \
	-machine "$machine" "${accel_args[@]}" -smp "$smp" -m "$mem" \
	-serial stdio \
	-kernel "$kernel" -initrd "$work/initrd" \
	-append "console=ttyS0 quiet panic=-1 ${VMTEST_APPEND:-}" \
	</dev/null 2>&1 | sed -u 's/\r$//' | tee "$log"
qemu_rc=${PIPESTATUS[0]}
set -e

if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
	echo "vmtest: guest timed out after ${timeout_s}s" >&2
	exit 124
fi
code=$(sed -n "s/.*vmtest-exit:$nonce:\([0-9][0-9]*\).*/\1/p" "$log" | tail -n1)
[ -n "$code" ] || die "guest ended without reporting an exit status (qemu exit $qemu_rc)"
exit "$code"
