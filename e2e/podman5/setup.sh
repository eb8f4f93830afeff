#!/usr/bin/env bash
# setup.sh: makes the Debian trixie root in which podman 5's system tests
# run ($ROOT, default /srv/gopasta-podman5), or checks that an earlier one is
# complete and keeps it. Run as root; suite.sh calls it. Each step records
# that it finished in $ROOT/.podman5-STEP-KEY, where KEY sums what the step
# depends on (the package list, this script): an interrupted set-up resumes
# where it stopped, a finished one costs nothing, and a step whose recipe
# changed is done again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
. ./lib.sh
[ "$(id -u)" = 0 ] || die "setup.sh must run as root"

# What the root holds, and why:
#   podman, passt                 the program that drives pasta, and trixie's
#                                 pasta, the one gopasta is compared with
#   crun conmon catatonit uidmap  what rootless podman runs: its default OCI
#                                 runtime, monitor, pause process, id maps
#   netavark aardvark-dns         bridge networks (500-networking.bats), whose
#   nftables iptables             rootless namespace is also set up by pasta
#   bats parallel                 the test runner; GNU parallel runs the tests
#                                 tagged ci:parallel side by side (bats --jobs)
#   socat iproute2 procps jq      what the tests run on the host side: servers
#   curl ncat netcat-openbsd      and clients of forwarded ports, ss, ip -j,
#                                 ps, jq
#   dnsmasq-base                  the local resolver of run-one.sh
#   busybox-static iputils-ping   the test image's userland (see testimage below)
PKGS="podman passt crun conmon catatonit uidmap netavark aardvark-dns nftables iptables
      bats parallel socat iproute2 procps jq curl ncat netcat-openbsd dnsmasq-base
      busybox-static iputils-ping"

# step_done STEP KEY, mark_done STEP KEY: whether STEP was done with KEY,
# and recording that it was (forgetting any other KEY).
step_done() { [ -e "$ROOT/.podman5-$1-$2" ]; }
mark_done() { rm -f "$ROOT/.podman5-$1"-*; : >"$ROOT/.podman5-$1-$2"; }
sum() { sha256sum | cut -c1-12; }
# shellcheck disable=SC2086
pkgs_key=$(echo $PKGS | sum)
recipe_key=$(cat setup.sh lib.sh | sum)

# 1. A minimal trixie with the packages above. debootstrap resolves their
#    dependencies itself (Depends only, as --no-install-recommends), which
#    spares a second download of the package lists by apt.
if ! step_done root "$pkgs_key"; then
	command -v debootstrap >/dev/null || {
		log "installing debootstrap on the host"
		apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 debootstrap >/dev/null ||
			{ apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 debootstrap >/dev/null; } ||
			die "cannot install debootstrap"
	}
	rm -rf "$ROOT"
	mkdir -p "$ROOT"
	log "debootstrap trixie into $ROOT from $MIRROR"
	t0=$SECONDS
	# shellcheck disable=SC2086
	if ! debootstrap --variant=minbase --include="$(echo $PKGS | tr ' ' ,)" trixie "$ROOT" "$MIRROR" \
		>"$ROOT.debootstrap.log" 2>&1; then
		tail -n 20 "$ROOT.debootstrap.log" >&2
		die "debootstrap failed (whole log: $ROOT.debootstrap.log)"
	fi
	rm -rf "$ROOT"/var/cache/apt/archives/*.deb
	log "debootstrap: $((SECONDS - t0))s"
	# resolv.conf names the local resolver every run starts (run-one.sh).
	printf 'nameserver 127.0.0.53\nnameserver ::1\n' >"$ROOT/etc/resolv.conf"
	mark_done root "$pkgs_key"
fi

# 2. The users that run podman: subordinate ids for their containers' user
#    namespaces (distinct ranges), and a podman configuration that makes
#    podman run the pasta under test: helper_binaries_dir lists
#    $UNDER_TEST/USER (suite.sh puts a pasta there) before podman's own
#    directories, which it replaces, so they are listed again. cgroupfs and
#    a file event log because there is no systemd user session in the root.
if ! step_done users "$recipe_key"; then
	base=200000
	for u in $USERS; do
		inroot id "$u" >/dev/null 2>&1 || inroot useradd -m -s /bin/bash "$u"
		grep -q "^$u:" "$ROOT/etc/subuid" || echo "$u:$base:65536" >>"$ROOT/etc/subuid"
		grep -q "^$u:" "$ROOT/etc/subgid" || echo "$u:$base:65536" >>"$ROOT/etc/subgid"
		base=$((base + 65536))
		conf="$ROOT/home/$u/.config/containers"
		mkdir -p "$conf"
		cat >"$conf/containers.conf" <<-CONF
		[engine]
		cgroup_manager = "cgroupfs"
		events_logger = "file"
		helper_binaries_dir = ["$UNDER_TEST/$u", "/usr/local/libexec/podman", "/usr/local/lib/podman", "/usr/libexec/podman", "/usr/lib/podman"]
		CONF
		uid=$(inroot id -u "$u")
		chown -R "$uid:$uid" "$ROOT/home/$u/.config"
	done
	mark_done users "$recipe_key"
fi

# 3. podman's system tests, at the tag of the podman in the root, from the Go
#    module proxy (podman is a Go module, and the proxy serves its whole
#    tree, test/system included).
podver=$(inroot dpkg-query -W -f '${Version}' podman)
tag=v$(sed 's/[+~-].*//' <<<"$podver")
if ! step_done tests "$tag"; then
	log "podman $podver: test/system of $tag from the Go module proxy"
	moddir=$(cd / && GOFLAGS=-modcacherw GO111MODULE=on go mod download -json "github.com/containers/podman/v5@$tag" |
		sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -d "$moddir/test/system" ] || die "go mod download github.com/containers/podman/v5@$tag: no test/system"
	rm -rf "$ROOT/opt/podman-tests"
	mkdir -p "$ROOT/opt/podman-tests"
	cp -r "$moddir/test/system" "$ROOT/opt/podman-tests/"
	chmod -R a+rX,go-w "$ROOT/opt/podman-tests"
	echo "$tag" >"$ROOT/opt/podman-tests/TAG"
	mark_done tests "$tag"
fi

# 4. The test image. The tests run quay.io/libpod/testimage:TAG (Alpine with
#    busybox, busybox-extras, iproute2 and socat, and a few scripts of
#    podman's test/system/build-testimage), which cannot be pulled here. Its
#    stand-in is assembled from the root's own files: Debian's static
#    busybox with all its applets, the commands of Alpine's packages that
#    the tests run (iproute2's ip, whose -j output they parse, and ss;
#    socat; musl-utils' getent) with the libraries they load, and the same
#    scripts. Copying binaries keeps it to a few megabytes and needs no
#    second download. Where Debian's busybox differs from Alpine's in what
#    the tests use, the stand-in has another command:
#    - ping is iputils': Debian's busybox ping needs a raw socket, which a
#      rootless container lacks; Alpine's, like iputils', falls back to an
#      ICMP datagram socket.
#    - nc: Debian's busybox nc is the small one; Alpine's is the full one,
#      whose -n and -v the tests use to see which address a connection came
#      from, and whose messages are musl's. The nc below is that nc's
#      listening side, made of socat.
if ! step_done image "$recipe_key-$tag"; then
	imgtag=$(sed -n 's/^PODMAN_TEST_IMAGE_TAG=.*:-"\([0-9]*\)".*/\1/p' "$ROOT/opt/podman-tests/system/helpers.bash")
	[ -n "$imgtag" ] || die "no PODMAN_TEST_IMAGE_TAG in helpers.bash"
	log "assembling the stand-in of quay.io/libpod/testimage:$imgtag"
	img=$(mktemp -d "$ROOT/var/tmp/testimage.XXXXXX")
	mkdir -p "$img"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,home/podman,root,tmp,var/tmp,proc,sys,dev,run}
	chmod 1777 "$img/tmp" "$img/var/tmp"
	for l in bin sbin lib lib64; do ln -s "usr/$l" "$img/$l"; done
	# Those commands and the shared objects they load (their loader
	# included), at the same paths.
	cmds="/usr/bin/ip /usr/bin/ss /usr/bin/socat /usr/bin/getent /usr/bin/ping"
	# shellcheck disable=SC2046,SC2086
	cp $(printf "$ROOT%s " $cmds) "$img/usr/bin/"
	# shellcheck disable=SC2086
	for lib in $(inroot ldd $cmds | grep -o '/[^ ]*\.so[^ ]*' | sort -u); do
		mkdir -p "$img$(dirname "$lib")"
		cp -L "$ROOT$lib" "$img$lib"
	done
	[ -d "$ROOT/usr/share/iproute2" ] && mkdir -p "$img/usr/share" && cp -r "$ROOT/usr/share/iproute2" "$img/usr/share/"
	cat >"$img/usr/bin/nc" <<-'SCRIPT'
	#!/bin/sh
	# nc -l [-n] [-v] -p PORT as the full busybox nc has it: -v says
	# "listening on [::]:PORT ..." once it listens and "connect to ADDR
	# from PEER (PEER)" when it accepts, in its address forms; a port in
	# use is "nc: bind: Address in use" (musl's words). Any other form
	# goes to busybox's own nc.
	listen= verbose= port=
	while getopts lnvp: o 2>/dev/null; do
	    case $o in
	    l) listen=1 ;;
	    n) ;;
	    v) verbose=1 ;;
	    p) port=$OPTARG ;;
	    *) exec busybox nc "$@" ;;
	    esac
	done
	shift $((OPTIND - 1))
	[ -n "$listen" ] && [ -n "$port" ] && [ $# = 0 ] || exec busybox nc "$@"

	# [0000:0000:0000:0000:0000:ffff:7f00:0001] (socat's form) as
	# [::ffff:127.0.0.1]; other addresses as they are.
	addr() {
	    case $1 in
	    \[0000:0000:0000:0000:0000:ffff:*)
	        set -- $(echo "$1" | sed 's/.*ffff:\(..\)\(..\):\(..\)\(..\)\]/\1 \2 \3 \4/')
	        echo "[::ffff:$((0x$1)).$((0x$2)).$((0x$3)).$((0x$4))]" ;;
	    *) echo "$1" ;;
	    esac
	}
	# The data goes between the connection and our stdin and stdout;
	# socat's notices (-d -d: "2025/01/01 00:00:00 socat[PID] N MESSAGE")
	# become nc's messages.
	exec 3>&1
	socat -d -d -t 30 TCP6-LISTEN:"$port",ipv6only=0 STDIO 2>&1 >&3 3>&- | {
	    status=0
	    while read -r _ _ _ level msg; do
	        case $level:$msg in
	        "N:listening on "*)
	            [ -n "$verbose" ] && echo "listening on [::]:$port ..." >&2 ;;
	        "N:accepting connection from "*)
	            # accepting connection from AF=10 [PEER]:PORT on AF=10 [OURS]:PORT
	            set -- $msg
	            peer=$(addr "${5%:*}"):${5##*:}
	            [ -n "$verbose" ] && echo "connect to $(addr "${8%:*}"):$port from $peer ($peer)" >&2 ;;
	        E:*"Address already in use"*)
	            echo "nc: bind: Address in use" >&2; status=1 ;;
	        E:*)
	            echo "nc: $msg" >&2; status=1 ;;
	        esac
	    done
	    exit $status
	}
	SCRIPT
	chmod 755 "$img/usr/bin/nc"
	# busybox and a link for each applet that has no real command above;
	# busybox-extras is Alpine's second busybox (httpd), the same here.
	cp "$ROOT/usr/bin/busybox" "$img/usr/bin/busybox"
	for a in $(inroot busybox --list); do
		[ -e "$img/usr/bin/$a" ] || ln -s busybox "$img/usr/bin/$a"
	done
	ln -s busybox "$img/usr/bin/busybox-extras"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$img/etc/passwd"
	printf 'root:x:0:\nnobody:x:65534:\n' >"$img/etc/group"
	: >"$img/etc/resolv.conf"
	echo testimage >"$img/etc/hostname"
	# The scripts of build-testimage, with the behaviour the tests check.
	echo "$imgtag" >"$img/home/podman/testimage-id"
	touch --date=@1600000000 "$img/home/podman/testimage-id" # 'run --tz' reads its date
	cat >"$img/home/podman/pause" <<-'SCRIPT'
	#!/bin/sh
	trap 'exit 0' SIGTERM
	echo Confirmed: testimage pause invoked as $0
	while :; do
	    sleep 0.1
	done
	SCRIPT
	cat >"$img/home/podman/healthcheck" <<-'SCRIPT'
	#!/bin/sh
	if test -e /uh-oh || test -e /uh-oh-only-once; then
	    echo "Uh-oh on stdout!"
	    echo "Uh-oh on stderr!" >&2
	    rm -f /uh-oh-only-once
	    exit 1
	else
	    echo "Life is Good on stdout"
	    echo "Life is Good on stderr" >&2
	    exit 0
	fi
	SCRIPT
	cat >"$img/home/podman/bytecheck" <<-'SCRIPT'
	#!/bin/sh
	tmpfile=`mktemp bytecheck.XXXXXXX`
	cat >$tmpfile
	size=`stat -c %s $tmpfile`
	hash=`md5sum <$tmpfile`
	odl=`head -c8 $tmpfile | od -An -tx1`
	odr=`tail -c8 $tmpfile | od -An -tx1`
	rm -f $tmpfile
	echo size=$size hash=$hash head=$odl tail=$odr
	SCRIPT
	chmod 755 "$img/home/podman/"{pause,healthcheck,bytecheck}
	tar -C "$img" --numeric-owner --owner=0 --group=0 -cf "$ROOT$IMAGE_TAR" .
	chmod 644 "$ROOT$IMAGE_TAR"
	echo "quay.io/libpod/testimage:$imgtag" >"$ROOT$IMAGE_TAR.name"
	rm -rf "$img"
	mark_done image "$recipe_key-$tag"
fi
log "root ready: $ROOT (podman $podver, tests $tag, passt $(inroot dpkg-query -W -f '${Version}' passt)), in ${SECONDS}s"
