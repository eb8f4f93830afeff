#!/usr/bin/env bash
# build-initramfs.sh - build the base initramfs for vmtest guests.
#
# Contents: static busybox (+ applet symlinks), ./init, and the kernel modules
# named in $modules plus their dependencies (read from each module's
# .modinfo "depends=" field, so no depmod/modules.dep is needed), decompressed
# and listed in load order in /etc/vmtest/modules.
#
# Usage: build-initramfs.sh [OUTPUT]   (default: $VMTEST_CACHE/base-initramfs.cpio.gz)
# Env:
#   VMTEST_CACHE    cache dir with linux/ and kver from setup.sh (default: <repo>/.cache/vmtest)
#   VMTEST_KVER     kernel version (default: contents of $VMTEST_CACHE/kver)
#   VMTEST_MODULES  extra module names to include and load (e.g. "veth macvtap vhost_vsock")
#   VMTEST_BUSYBOX  static busybox binary (default: /bin/busybox from busybox-static)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${VMTEST_CACHE:-$(cd "$here/../.." && pwd)/.cache/vmtest}
kver=${VMTEST_KVER:-$(cat "$cache/kver")}
moddir=$cache/linux/lib/modules/$kver
out=${1:-$cache/base-initramfs.cpio.gz}
busybox=${VMTEST_BUSYBOX:-/bin/busybox}
modules="tun vhost_net ${VMTEST_MODULES:-}"

die() { echo "build-initramfs: $*" >&2; exit 1; }
[ -d "$moddir/kernel" ] || die "no modules in $moddir (run setup.sh)"
[ -x "$busybox" ] || die "no busybox at $busybox (apt-get install busybox-static)"
if head -c 4096 "$busybox" | grep -qa 'ld-linux'; then
	die "$busybox is dynamically linked; install busybox-static"
fi

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT

# Index: module name (dashes folded to underscores) -> file.
declare -A kofile
while IFS= read -r -d '' f; do
	n=${f##*/}
	n=${n%%.ko*}
	kofile[${n//-/_}]=$f
done < <(find "$moddir/kernel" -name '*.ko*' -print0)

# Decompress (or copy) a module file to stdout.
ko_cat() {
	case $1 in
	*.ko.xz) xz -dc "$1" ;;
	*.ko.zst) zstd -qdc "$1" ;;
	*.ko.gz) gzip -dc "$1" ;;
	*) cat "$1" ;;
	esac
}

declare -A seen
order=()
add_module() {
	local name=${1//-/_} dep
	[ -n "${seen[$name]:-}" ] && return 0
	seen[$name]=1
	local f=${kofile[$name]:-}
	if [ -z "$f" ]; then
		# Built into the kernel? Then there is nothing to load.
		if grep -q "/$name.ko" "$moddir/modules.builtin" 2>/dev/null ||
			grep -q "/${1//_/-}.ko" "$moddir/modules.builtin" 2>/dev/null; then
			return 0
		fi
		die "module $1 not found for $kver"
	fi
	ko_cat "$f" >"$staging/lib/modules/$name.ko"
	for dep in $(tr '\0' '\n' <"$staging/lib/modules/$name.ko" | sed -n 's/^depends=//p' | tr ',' ' '); do
		add_module "$dep"
	done
	order+=("$name")
}

mkdir -p "$staging"/{bin,dev,proc,sys,tmp,run,root,etc/vmtest,lib/modules}
for m in $modules; do
	add_module "$m"
done
printf '%s\n' "${order[@]}" >"$staging/etc/vmtest/modules"

cp "$busybox" "$staging/bin/busybox"
for applet in $("$busybox" --list); do
	[ "$applet" = busybox ] || ln -s busybox "$staging/bin/$applet"
done
install -m 0755 "$here/init" "$staging/init"
printf 'root:x:0:0:root:/root:/bin/sh\ntester:x:1000:1000:tester:/tmp:/bin/sh\n' >"$staging/etc/passwd"
printf 'root:x:0:\ntester:x:1000:\n' >"$staging/etc/group"
# The kernel opens /dev/console before /init runs; /init copes if it is missing.
mknod -m 0600 "$staging/dev/console" c 5 1 2>/dev/null || true

mkdir -p "$(dirname "$out")"
(cd "$staging" && find . -mindepth 1 | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
	gzip -6 >"$out.tmp"
mv "$out.tmp" "$out"
echo "build-initramfs: $out ($(du -k "$out" | cut -f1) KiB) kernel $kver, modules: ${order[*]}" >&2
