#!/bin/bash
# run-one.sh LABEL USER FILE.bats: one binary's run of one file of podman's
# system tests. suite.sh copies it into the root and runs it there as root,
# inside sandboxed (lib.sh): a network, mount and PID namespace of its own,
# so nothing of it outlives it and nothing an earlier file left running (a
# container's cleanup, a restart policy) reaches the next.
#
# USER runs podman, with its pasta (setup.sh's helper_binaries_dir). Writes
# $RESULTS/LABEL/FILE.{serial,parallel}.tap and prints each result line,
# prefixed with the label and the file; a bats run that did not end (cut at
# $LIMIT seconds) is named in $RESULTS/LABEL/incomplete. Environment:
# RESULTS, JOBS, FILTER, LIMIT (suite.sh's).
set -uo pipefail
label=$1 user=$2 f=$3
out=$RESULTS/$label
mkdir -p "$out"

# The resolvers of /etc/resolv.conf, on host loopback: 127.0.0.53 (where
# systemd-resolved listens; pasta forwards the containers' queries there)
# and ::1 (without an IPv6 one, 500-networking.bats skips "podman ipv6 in
# /etc/resolv.conf"; one on the host's interface would be a second global
# address there, and tests that pick the host's address then race). They
# answer the only names the tests look up, with fixed addresses (the real
# ones of l.root-servers.net; google.com is only checked to resolve),
# because a CI machine reaches no DNS.
dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts \
	--user=nobody --group=nogroup --bind-interfaces --listen-address=127.0.0.53 --listen-address=::1 \
	--address=/l.root-servers.net/199.7.83.42 --address=/l.root-servers.net/2001:500:9f::42 \
	--address=/google.com/198.51.100.1 --address=/google.com/2001:db8:100::1 \
	2>>"$out/dnsmasq.log" &
for _ in $(seq 50); do
	ss -Hlun "sport = 53" | grep -q 127.0.0.53 && break
	sleep 0.1
done

uid=$(id -u "$user")
install -d -m 700 -o "$uid" -g "$uid" "/run/user/$uid"
chown "$uid:$uid" "$out"
asuser() {
	setpriv --reuid="$uid" --regid="$uid" --init-groups env -i \
		PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME="/home/$user" USER="$user" \
		LOGNAME="$user" LANG=C.UTF-8 TERM=dumb XDG_RUNTIME_DIR="/run/user/$uid" \
		PODMAN=/usr/bin/podman "$@"
}

# A clean podman state (an earlier file, or a run cut short, may have left
# containers, pods, networks or images behind), then the test image under
# the name the tests expect, and a first container as a smoke test.
asuser podman system reset --force >/dev/null 2>&1
image=$(cat /var/tmp/testimage.tar.name)
if ! asuser podman import -q --change "WORKDIR /home/podman" \
	--change 'CMD ["/bin/echo", "This container is intended for podman CI testing"]' \
	/var/tmp/testimage.tar "$image" >/dev/null; then
	echo "[$label] $f: podman import failed" | tee -a "$out/incomplete"
	exit 2
fi
exe=$(asuser podman info --format '{{.Host.Pasta.Executable}}')
addr=$(asuser timeout 60 podman run --rm --net=pasta "$image" ip -o -4 addr show scope global 2>&1 | head -n 1)
echo "[$label] $f: podman runs $exe; in a container: $(tr -s ' ' <<<"${addr%%\\*}")"

# As podman's own CI runs them (its Makefile's localsystem): the tests
# tagged ci:parallel in one bats run with --jobs, the others in a run of
# their own, one by one. Under --jobs, GNU parallel runs the file and sets
# PARALLEL_JOBSLOT, which tells podman's helpers that other tests run
# beside theirs (a failing test then leaves the others' containers alone);
# it also holds the file's results back until all of them are done.
filter=()
[ -n "$FILTER" ] && filter=(--filter "$FILTER")
asuser mkdir -p "/home/$user/.parallel"
asuser touch "/home/$user/.parallel/will-cite"
for pass in serial parallel; do
	case $pass in
	serial) args=(--filter-tags '!ci:parallel') ;;
	parallel) args=(--filter-tags ci:parallel --jobs "$JOBS") ;;
	esac
	(cd /opt/podman-tests && asuser timeout -k 30 "$LIMIT" bats --tap --timing "${args[@]}" "${filter[@]}" "system/$f") 2>&1 |
		tee "$out/$f.$pass.tap" | grep --line-buffered -E '^(not )?ok ' | sed -u "s|^|[$label] $f: |"
	# bats exits 1 when a test fails; anything else (124: cut at LIMIT)
	# means this file's results are incomplete.
	rc=${PIPESTATUS[0]}
	if [ "$rc" -gt 1 ]; then
		echo "[$label] $f ($pass): bats ended with status $rc" | tee -a "$out/incomplete"
	fi
done
