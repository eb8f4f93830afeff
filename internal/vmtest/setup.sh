#!/usr/bin/env bash
# setup.sh - install the host tools vmtest needs and fetch a guest kernel.
#
# Idempotent; needs root for apt-get (Debian/Ubuntu hosts).
#   - qemu-system-x86 and busybox-static, without recommends (~30 packages, ~87 MB)
#   - the kernel image package linux-image-amd64 currently points to, fetched
#     with `apt-get download` and unpacked into the cache (NOT installed on the
#     host: no initramfs-tools/udev/systemd churn)
#   - cache/vmlinux: the uncompressed kernel ELF cut out of the bzImage, when
#     the kernel has CONFIG_PVH=y. QEMU boots it directly through its PVH entry
#     point, which skips SeaBIOS's bzImage path and the guest's own xz
#     decompression (about 3-4 s of the boot under TCG).
#
# Env:
#   VMTEST_CACHE        cache dir (default: <repo>/.cache/vmtest)
#   VMTEST_KERNEL_PKG   kernel package to use (default: dependency of linux-image-amd64)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${VMTEST_CACHE:-$(cd "$here/../.." && pwd)/.cache/vmtest}
apt_opts=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=600)

log() { echo "vmtest-setup: $*" >&2; }

need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
dpkg-query -W -f='${Status}\n' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
	apt-get install "${apt_opts[@]}" "${need[@]}" >/dev/null
fi

pkg=${VMTEST_KERNEL_PKG:-}
if [ -z "$pkg" ]; then
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
	if [ -z "$pkg" ]; then
		apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
		pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
	fi
fi
[ -n "$pkg" ] || { log "cannot resolve the kernel package behind linux-image-amd64"; exit 1; }
kver=${pkg#linux-image-}

if [ ! -f "$cache/linux/boot/vmlinuz-$kver" ] || [ ! -d "$cache/linux/lib/modules/$kver/kernel" ]; then
	log "fetching $pkg"
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.dl.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	chmod 0777 "$tmp" # let apt's _apt user write there (avoids the unsandboxed-download warning)
	(cd "$tmp" && apt-get -q download "$pkg" >/dev/null)
	rm -rf "$cache/linux.new"
	mkdir -p "$cache/linux.new"
	# Only the kernel image, its config and the modules are needed.
	dpkg-deb --fsys-tarfile "$tmp"/"$pkg"_*.deb |
		tar -x -C "$cache/linux.new" --wildcards './boot/vmlinuz-*' './boot/config-*' './lib/modules/*'
	rm -rf "$cache/linux"
	mv "$cache/linux.new" "$cache/linux"
fi
echo "$kver" >"$cache/kver"
ln -sfn "linux/boot/vmlinuz-$kver" "$cache/vmlinuz"

# Cut the compressed payload out of the bzImage (like scripts/extract-vmlinux).
extract_vmlinux() {
	local img=$1 out=$2 magic cmd off
	for spec in 'fd377a585a00:xz -dc --single-stream' '28b52ffd:zstd -dcq' '1f8b08:gzip -dcq'; do
		magic=$(echo "${spec%%:*}" | sed 's/../\\x&/g')
		cmd=${spec#*:}
		for off in $(LC_ALL=C grep -aboP "$magic" "$img" | cut -d: -f1); do
			# Trailing data after the stream makes some decompressors fail; the ELF check decides.
			tail -c +$((off + 1)) "$img" 2>/dev/null | $cmd >"$out.tmp" 2>/dev/null || true
			if [ "$(head -c 4 "$out.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
				mv "$out.tmp" "$out"
				return 0
			fi
		done
	done
	rm -f "$out.tmp"
	return 1
}
if [ ! -f "$cache/linux/boot/vmlinux-$kver" ] && grep -q '^CONFIG_PVH=y' "$cache/linux/boot/config-$kver" 2>/dev/null; then
	extract_vmlinux "$cache/linux/boot/vmlinuz-$kver" "$cache/linux/boot/vmlinux-$kver" ||
		log "could not extract vmlinux; guests will boot the bzImage (slower)"
fi
if [ -f "$cache/linux/boot/vmlinux-$kver" ]; then
	ln -sfn "linux/boot/vmlinux-$kver" "$cache/vmlinux"
else
	rm -f "$cache/vmlinux"
fi
log "kernel $kver ready in $cache"
