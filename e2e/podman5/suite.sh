#!/usr/bin/env bash
# suite.sh GOPASTA FILE.bats...: runs podman 5's own system tests (the
# given files of podman's test/system) rootless with GOPASTA as podman's
# pasta, and the same files with Debian trixie's pasta, then compares: it
# fails when a test passes with pasta and not with GOPASTA. Run as root.
#
# Environment (all optional):
#   ROOT=/srv/gopasta-podman5  the trixie root (setup.sh builds or reuses it)
#   COMPARE=1                  0: run GOPASTA only, no comparison
#   SIDE_BY_SIDE=1             1: both binaries at once (each in its own
#                              namespaces, as its own user); 0: one after
#                              the other
#   JOBS=$(nproc)              tests tagged ci:parallel run this many at a
#                              time (bats --jobs), the others one by one
#   FILTER=REGEX               only tests whose names match (bats --filter)
#   LIMIT=1800                 seconds each file may take per binary
# Prints every test's result (a file's tests that run side by side once the
# file is done), then the podman and passt versions, one summary line per
# binary, the tests whose results differ, and the output of each test that
# fails with GOPASTA and passes with pasta. Exits 0 if there is none, 1 if
# there is, 2 if a run could not be completed (set-up failed, a file was
# cut at LIMIT, no results at all).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"

[ $# -ge 2 ] || { echo "usage: suite.sh GOPASTA FILE.bats..." >&2; exit 2; }
gopasta=$(realpath "$1"); shift
files=("$@")
COMPARE=${COMPARE:-1}
SIDE_BY_SIDE=${SIDE_BY_SIDE:-1}
JOBS=${JOBS:-$(nproc)}
FILTER=${FILTER:-}
LIMIT=${LIMIT:-1800}
[ "$(id -u)" = 0 ] || die "suite.sh must run as root"
[ -x "$gopasta" ] || die "not an executable: $gopasta"
# Rootless pasta opens the TAP device as the test user: mode 0666, as
# Debian's udev rules make it (and .ci/run and make test need it).
[ -c /dev/net/tun ] || die "no /dev/net/tun (modprobe tun)"
if [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
	log "chmod 0666 /dev/net/tun (was $(stat -c %a /dev/net/tun))"
	chmod 0666 /dev/net/tun
fi

bash "$here/setup.sh" || die "setup.sh failed"

# Each binary is the pasta of one user (setup.sh's helper_binaries_dir):
# p5gopasta runs a copy of GOPASTA, p5pasta trixie's /usr/bin/pasta (a link,
# so passt's own re-execution of its AVX2 build still finds it).
runs="gopasta:p5gopasta"
install -D -m 755 "$gopasta" "$ROOT$UNDER_TEST/p5gopasta/pasta"
if [ "$COMPARE" = 1 ]; then
	runs="$runs pasta:p5pasta"
	mkdir -p "$ROOT$UNDER_TEST/p5pasta"
	ln -sfn /usr/bin/pasta "$ROOT$UNDER_TEST/p5pasta/pasta"
fi

results=/var/tmp/podman5-results
rm -rf "$ROOT$results"
mkdir -p "$ROOT$results"

# One binary's run, inside sandboxed (lib.sh): its own network, mount and
# PID namespaces, so nothing of it outlives it. Arguments: label, user,
# then the files. Writes $results/LABEL/FILE.{serial,parallel}.tap and
# prints each result line, prefixed with the label.
run_one='
set -uo pipefail
label=$1 user=$2; shift 2
results=$RESULTS; out=$results/$label
mkdir -p "$out"

# The resolvers of /etc/resolv.conf: 127.0.0.53 (where systemd-resolved
# listens, so pasta forwards the containers'"'"' queries to host loopback)
# and an IPv6 one, 2001:db8::53, on the host'"'"'s interface (without one,
# 500-networking.bats skips "podman ipv6 in /etc/resolv.conf"). They
# answer the only names the tests look up, with fixed addresses (the
# real ones of l.root-servers.net; google.com is only checked to
# resolve), because a CI machine reaches no DNS.
ip -6 addr add 2001:db8::53/64 dev eth0 nodad
dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts \
	--user=nobody --group=nogroup --bind-interfaces --listen-address=127.0.0.53 --listen-address=2001:db8::53 \
	--address=/l.root-servers.net/199.7.83.42 --address=/l.root-servers.net/2001:500:9f::42 \
	--address=/google.com/198.51.100.1 --address=/google.com/2001:db8:100::1 \
	2>"$out/dnsmasq.log" &
for i in $(seq 50); do ss -Hlun "sport = 53" | grep -q 127.0.0.53 && break; sleep 0.1; done

uid=$(id -u "$user")
install -d -m 700 -o "$uid" -g "$uid" "/run/user/$uid"
chown "$uid:$uid" "$out"
asuser() {
	setpriv --reuid="$uid" --regid="$uid" --init-groups env -i \
		PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME="/home/$user" USER="$user" \
		LOGNAME="$user" LANG=C.UTF-8 TERM=dumb XDG_RUNTIME_DIR="/run/user/$uid" \
		PODMAN=/usr/bin/podman PODMAN_IGNORE_CGROUPSV1_WARNING=1 "$@"
}
# A clean podman state: an earlier run may have been cut short and left
# containers, pods or networks behind. Then the test image, under the name
# the tests expect.
asuser podman system reset --force >/dev/null 2>&1
image=$(cat /var/tmp/testimage.tar.name)
asuser podman import -q --change "WORKDIR /home/podman" \
	--change "CMD [\"/bin/echo\", \"This container is intended for podman CI testing\"]" \
	/var/tmp/testimage.tar "$image" >/dev/null || { echo "[$label] podman import failed"; exit 2; }
exe=$(asuser podman info --format "{{.Host.Pasta.Executable}}")
echo "[$label] podman runs $exe: $(asuser "$exe" --version | head -n1)"
echo "[$label] smoke test: $(asuser timeout 60 podman run --rm --net=pasta "$image" ip -o -4 addr show scope global 2>&1 | head -n 3)"

# As podman'"'"'s own CI runs them (its Makefile'"'"'s localsystem): the tests
# tagged ci:parallel in one bats run with --jobs, the others in a run of
# their own, one by one. Under --jobs, GNU parallel runs each file and sets
# PARALLEL_JOBSLOT, which tells podman'"'"'s helpers that other tests run
# beside theirs (a failing test then leaves the others'"'"' containers alone);
# it also holds a file'"'"'s results back until the file is done.
filter=()
[ -n "$FILTER" ] && filter=(--filter "$FILTER")
asuser mkdir -p "/home/$user/.parallel"
asuser touch "/home/$user/.parallel/will-cite"
for f in "$@"; do
	for pass in serial parallel; do
		case $pass in
		serial) args=(--filter-tags "!ci:parallel") ;;
		parallel) args=(--filter-tags "ci:parallel" --jobs "$JOBS") ;;
		esac
		( cd /opt/podman-tests && asuser timeout -k 30 "$LIMIT" bats --tap --timing "${args[@]}" "${filter[@]}" "system/$f" ) 2>&1 |
			tee "$out/$f.$pass.tap" | grep --line-buffered -E "^(not )?ok " | sed -u "s|^|[$label] $f: |"
		# bats exits 1 when a test fails; anything else (124: cut at
		# LIMIT) means this file'"'"'s results are incomplete.
		rc=${PIPESTATUS[0]}
		if [ "$rc" -gt 1 ]; then
			echo "[$label] $f ($pass): bats ended with status $rc" | tee -a "$out/incomplete"
		fi
	done
done
'

log "running ${files[*]} for: $runs (JOBS=$JOBS, side by side: $SIDE_BY_SIDE)"
t0=$SECONDS
pids=()
for r in $runs; do
	label=${r%%:*} user=${r#*:}
	RESULTS=$results JOBS=$JOBS FILTER=$FILTER LIMIT=$LIMIT sandboxed "$run_one" "$label" "$user" "${files[@]}" &
	pids+=($!)
	[ "$SIDE_BY_SIDE" = 1 ] || wait "${pids[-1]}"
done
wait "${pids[@]}"
log "tests took $((SECONDS - t0))s"

# Results as "FILE<TAB>pass|fail|skip<TAB>NAME", one line per test.
results_of() {
	for tap in "$ROOT$results/$1"/*.tap; do
		[ -e "$tap" ] || continue
		f=$(basename "$tap"); f=${f%.*.tap}
		awk -v f="$f" '
			!/^(not )?ok [0-9]+ / { next }
			{ r = /^not/ ? "fail" : / # skip/ ? "skip" : "pass"
			  sub(/^(not )?ok [0-9]+ /, ""); sub(/ # skip.*/, ""); sub(/ in [0-9]+ms$/, "")
			  print f "\t" r "\t" $0 }' "$tap"
	done | sort -t "$(printf '\t')" -k1,1 -k3
}
summary() {
	awk -F '\t' -v l="$1" '{n++; c[$2]++} END {printf "%-8s %d tests, %d passed, %d failed, %d skipped\n", l ":", n, c["pass"], c["fail"], c["skip"]}'
}

echo
echo "== podman 5 system tests: ${files[*]}"
echo "podman $(inroot dpkg-query -W -f '${Version}' podman) (tests $(cat "$ROOT/opt/podman-tests/TAG")), bats $(inroot bats --version | awk '{print $2}'), runtime runc $(inroot dpkg-query -W -f '${Version}' runc)"
echo "gopasta: $("$gopasta" --version | head -n1)"
[ "$COMPARE" = 1 ] && echo "pasta:   Debian trixie passt $(inroot dpkg-query -W -f '${Version}' passt)"
results_of gopasta >"$ROOT$results/gopasta.txt"
summary gopasta <"$ROOT$results/gopasta.txt"
status=0
if [ "$COMPARE" = 1 ]; then
	results_of pasta >"$ROOT$results/pasta.txt"
	summary pasta <"$ROOT$results/pasta.txt"
	# Every test of either run, with its result under each binary ("none":
	# it did not run there, e.g. the run was cut short).
	awk -F '\t' '
		FNR == NR { p[$1 "\t" $3] = $2; keys[$1 "\t" $3]; next }
		          { g[$1 "\t" $3] = $2; keys[$1 "\t" $3] }
		END {
			for (k in keys) {
				gs = (k in g) ? g[k] : "none"; ps = (k in p) ? p[k] : "none"
				if (gs != ps) printf "%s\t%s\t%s\n", (ps == "pass" ? "REGRESSION" : "differs"), "gopasta " gs ", pasta " ps, k
			}
		}' "$ROOT$results/pasta.txt" "$ROOT$results/gopasta.txt" | sort >"$ROOT$results/diff.txt"
	if [ -s "$ROOT$results/diff.txt" ]; then
		echo "results that differ:"
		sed 's/^/  /' "$ROOT$results/diff.txt"
	else
		echo "every test has the same result with both binaries"
	fi
	regressions=$(grep -c '^REGRESSION' "$ROOT$results/diff.txt")
	if [ "$regressions" -gt 0 ]; then
		status=1
		echo
		echo "== $regressions test(s) pass with pasta and not with gopasta; their output with gopasta:"
		grep '^REGRESSION' "$ROOT$results/diff.txt" | cut -f3,4 | while IFS="$(printf '\t')" read -r f name; do
			cat "$ROOT$results/gopasta/$f".*.tap | awk -v n="$name" '
				/^(not )?ok [0-9]+ / { on = index($0, "not ok") == 1 && index($0, n) > 0 }
				on'
		done
	fi
else
	grep -q "	fail	" "$ROOT$results/gopasta.txt" && status=1
fi
# A run with no results, or one cut short, proves nothing either way.
for r in $runs; do
	[ -s "$ROOT$results/${r%%:*}.txt" ] || { echo "no results from the run of ${r%%:*}"; status=2; }
	if [ -e "$ROOT$results/${r%%:*}/incomplete" ]; then
		sed 's/^/incomplete: /' "$ROOT$results/${r%%:*}/incomplete"
		status=2
	fi
done
echo "results and logs: $ROOT$results"
exit $status
