# Shared by setup.sh and suite.sh (sourced, not run): where things live, and
# how a command runs inside the test root.
#
# The tests run in a Debian trixie root (podman 5.4 and its helpers; Debian
# 12 ships podman 4.3) rather than on the host, so the host only needs
# debootstrap, util-linux and Go. Nothing of it is mounted outside a run:
# every command that needs /proc, /dev or /sys in the root gets them in a
# mount namespace of its own, which the kernel tears down with it.
# shellcheck shell=bash disable=SC2034,SC2016

ROOT=${ROOT:-/srv/gopasta-podman5}
# Debian's archive as this host's apt sees it (a local mirror, if any), else
# deb.debian.org.
MIRROR=${MIRROR:-$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
# Where each binary under test is copied in the root, and the unprivileged
# user that runs podman with it: one user per binary, so each has its own
# podman state and two runs may go side by side.
UNDER_TEST=/opt/pasta-under-test
USERS="p5gopasta p5pasta"
# The test image's rootfs is assembled here, then imported by each user.
IMAGE_TAR=/var/tmp/testimage.tar

export LC_ALL=C DEBIAN_FRONTEND=noninteractive

log() { printf '## podman5: %s\n' "$*" >&2; }
die() { printf '## podman5: FATAL: %s\n' "$*" >&2; exit 2; }
# setup.sh removes $ROOT to start again: never / or a top directory.
case $ROOT in
/*/*) ;;
*) die "ROOT=$ROOT: want an absolute path below a top directory" ;;
esac

# inroot CMD...: CMD as root inside the root, with /proc and /dev (for apt,
# dpkg, useradd), in a throwaway mount namespace.
inroot() {
	unshare --mount --propagation private /bin/sh -ec '
		root=$1; shift
		mount -t proc proc "$root/proc"
		mount --rbind /dev "$root/dev"
		exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LC_ALL=C DEBIAN_FRONTEND=noninteractive "$@"' sh "$ROOT" "$@"
}

# sandboxed CMD [ARGS...]: runs CMD (a path in the root) as root in new
# mount, network and PID namespaces whose root directory is $ROOT, and
# returns its status.
#
# - Mount: the root is made / with pivot_root(2), not chroot(2), because the
#   kernel refuses to create a user namespace in a chrooted process, and
#   rootless podman needs one. / is then made shared, as on a systemd host
#   (podman warns on every call otherwise, and the tests compare its
#   output). /run and /tmp are fresh tmpfs: each run starts with no podman
#   runtime state and no files of an earlier run. /sys/fs/cgroup is the
#   cgroup v2 hierarchy, as on Debian 12 and later hosts, whatever the host
#   mounted there (a hybrid v1 tree on some): crun, podman's default
#   runtime, refuses a hybrid tree, and podman's tests skip on v1 what needs
#   --uidmap, the pasta restart test among them. Rootless podman with
#   cgroupfs and no systemd session has no cgroup it may write to either
#   way, so which controllers the hierarchy has does not matter to the
#   tests run here (the one that checks a pod's memory limit fails).
# - Network: a namespace of its own with the same documentation addresses as
#   the Go tests' fixture (an interface eth0 with 192.0.2.1/24 and
#   2001:db8::1/64, default routes via 192.0.2.254 and 2001:db8::fe; a veth
#   whose peer stays in the namespace, unaddressed), so the
#   results do not depend on the machine's network (IPv6 present or not,
#   other services' ports) and two runs cannot take each other's ports.
#   Nothing beyond this namespace is reached by the tests we run; names are
#   answered by a local resolver (see run-one.sh). ping_group_range allows
#   every group, as systemd sets it on Debian hosts.
# - PID: when CMD ends, the kernel kills whatever it left behind (podman's
#   rootless pause process, pasta, conmon, the resolver): no process of a run
#   outlives it, and none is killed by name.
sandboxed() {
	unshare --mount --net --pid --fork --kill-child --propagation private /bin/sh -ec '
		root=$1; shift
		mount --rbind "$root" "$root"
		mount --rbind /dev "$root/dev"
		mount -t sysfs sysfs "$root/sys"        # as this network namespace sees it
		mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
		mount -t proc proc "$root/proc"         # as this PID namespace sees it
		cd "$root"
		mkdir -p .oldroot
		pivot_root . .oldroot
		umount -l /.oldroot
		mount -t tmpfs -o mode=755 tmpfs /run
		mount -t tmpfs -o mode=1777 tmpfs /tmp
		mount --make-rshared /
		ip link set lo up
		ip link add eth0 type veth peer name eth0peer
		ip link set eth0peer up
		ip link set eth0 up
		ip addr add 192.0.2.1/24 dev eth0
		ip -6 addr add 2001:db8::1/64 dev eth0 nodad
		ip route add default via 192.0.2.254 dev eth0
		ip -6 route add default via 2001:db8::fe dev eth0
		echo "0 2147483647" >/proc/sys/net/ipv4/ping_group_range
		exec "$@"' sh "$ROOT" "$@"
}
