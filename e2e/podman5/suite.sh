#!/usr/bin/env bash
# suite.sh GOPASTA FILE.bats...: runs podman 5's own system tests (the
# given files of podman's test/system) rootless with GOPASTA as podman's
# pasta, and with Debian trixie's pasta, then compares: it fails when a
# test passes with pasta and not with GOPASTA. Run as root.
#
# A test that does not pass with GOPASTA (COMPARE=all: and passes with
# pasta) runs once more with both binaries, side by side, and counts only
# if it fails again; one that passes then is listed as flaky.
#
# Environment (all optional):
#   ROOT=/srv/gopasta-podman5  the trixie root (setup.sh builds or reuses it)
#   COMPARE=all                all: every test with both binaries, side by
#                              side (each in its own namespaces, as its own
#                              user); failed: pasta runs only in the second
#                              runs (the same verdict, in half the time when
#                              all pass); none: GOPASTA only, once, failing
#                              on any failure
#   JOBS=$(nproc)              tests tagged ci:parallel run this many at a
#                              time (bats --jobs), the others one by one
#   FILTER=REGEX               only tests whose names match (bats --filter)
#   LIMIT=1800                 seconds each file may take per binary and pass
# Prints every test's result (a file's tests that run side by side once the
# file is done), then the podman and passt versions, one summary line per
# binary and file, the tests whose results differ, those that fail with
# both, and the output of each test that passes with pasta and not with
# GOPASTA. Exits 0 if there is none, 1 if there is, 2 if a run could not be
# completed (set-up failed, a file was cut at LIMIT, no results at all).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"

[ $# -ge 2 ] || { echo "usage: suite.sh GOPASTA FILE.bats..." >&2; exit 2; }
gopasta=$(realpath "$1"); shift
files=("$@")
COMPARE=${COMPARE:-all}
JOBS=${JOBS:-$(nproc)}
FILTER=${FILTER:-}
LIMIT=${LIMIT:-1800}
case $COMPARE in
all | failed | none) ;;
*) die "COMPARE=$COMPARE: want all, failed or none" ;;
esac
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
install -D -m 755 "$gopasta" "$ROOT$UNDER_TEST/p5gopasta/pasta"
mkdir -p "$ROOT$UNDER_TEST/p5pasta"
ln -sfn /usr/bin/pasta "$ROOT$UNDER_TEST/p5pasta/pasta"
# run-one.sh runs inside the root; a copy of this checkout's goes there.
install -D -m 755 "$here/run-one.sh" "$ROOT/opt/podman5/run-one.sh"

results=/var/tmp/podman5-results
rm -rf "$ROOT$results"
mkdir -p "$ROOT$results"
export RESULTS=$results JOBS FILTER LIMIT
tab=$(printf '\t')

# Results as "FILE<TAB>pass|fail|skip<TAB>NAME", one line per test, of
# the run LABEL (of one file, if given).
results_of() {
	for tap in "$ROOT$results/$1"/${2:-*}.*.tap; do
		[ -e "$tap" ] || continue
		f=$(basename "$tap")
		f=${f%.*.tap}
		awk -v f="$f" '
			!/^(not )?ok [0-9]+ / { next }
			{ r = /^not/ ? "fail" : / # skip/ ? "skip" : "pass"
			  sub(/^(not )?ok [0-9]+ /, ""); sub(/ # skip.*/, ""); sub(/ in [0-9]+ms$/, "")
			  print f "\t" r "\t" $0 }' "$tap"
	done | sort -t "$tab" -k1,1 -k3
}

# again_filter FILE: a bats --filter selecting the tests of FILE to run
# again with both binaries, or nothing: those that did not pass with
# gopasta (COMPARE=all: and passed with pasta). A result line names a test
# with podman's prefix (|505| for the tests run side by side, [505] for the
# others), which --filter does not see.
again_filter() {
	awk -F '\t' -v all="$([ "$COMPARE" = all ] && echo 1)" '
		FILENAME == ARGV[1] { p[$3] = $2; next }
		$2 != "pass" && (!all || p[$3] == "pass") { print $3 }' \
		<(results_of pasta "$1") <(results_of gopasta "$1") |
		sed -E 's/^[[|][0-9]+[]|] //; s/[][\.|$(){}?+*^]/\\&/g' | paste -sd '|' |
		sed -E 's/.+/^(&)$/'
}

# Each file's tests run once with gopasta (COMPARE=all: with pasta beside
# it). Those that did not pass (all: that passed with pasta) then run once
# more with both, side by side: under load a test can fail for reasons of
# its own (505's transfers give socat's child half a second to report
# before it is killed), and a second run tells a flake from a difference.
log "running ${files[*]} (compare: $COMPARE, JOBS=$JOBS)"
t0=$SECONDS
for f in "${files[@]}"; do
	t1=$SECONDS
	sandboxed /opt/podman5/run-one.sh gopasta p5gopasta "$f" &
	pids=($!)
	if [ "$COMPARE" = all ]; then
		sandboxed /opt/podman5/run-one.sh pasta p5pasta "$f" &
		pids+=($!)
	fi
	wait "${pids[@]}"
	if [ "$COMPARE" != none ] && again=$(again_filter "$f") && [ -n "$again" ]; then
		log "$f: once more with both, the tests that did not pass with gopasta"
		FILTER=$again sandboxed /opt/podman5/run-one.sh gopasta-again p5gopasta "$f" &
		pids=($!)
		FILTER=$again sandboxed /opt/podman5/run-one.sh pasta-again p5pasta "$f" &
		pids+=($!)
		wait "${pids[@]}"
	fi
	log "$f took $((SECONDS - t1))s"
done
log "tests took $((SECONDS - t0))s"

# summary LABEL [NOTE] <RESULTS: one line per file.
summary() {
	awk -F '\t' -v l="$1" -v note="${2:-}" '
		{ n[$1]++; c[$1, $2]++ }
		END {
			for (f in n)
				printf "%-8s %s: %d tests%s, %d passed, %d failed, %d skipped\n", l ":", f, n[f], note, c[f, "pass"], c[f, "fail"], c[f, "skip"]
		}' | sort -k2
}

echo
echo "== podman 5 system tests: ${files[*]}"
echo "podman $(inroot dpkg-query -W -f '${Version}' podman) (tests $(cat "$ROOT/opt/podman-tests/TAG")), bats $(inroot bats --version | awk '{print $2}'), crun $(inroot dpkg-query -W -f '${Version}' crun)"
rev=$(git -C "$(dirname "$gopasta")" describe --always --dirty 2>/dev/null) && rev=" (checkout $rev)"
echo "gopasta: $("$gopasta" --version | head -n1)${rev:-}"
echo "pasta:   Debian trixie passt $(inroot dpkg-query -W -f '${Version}' passt)"
for label in gopasta pasta gopasta-again pasta-again; do
	results_of "$label" >"$ROOT$results/$label.txt"
done
summary gopasta <"$ROOT$results/gopasta.txt"
[ "$COMPARE" = all ] && summary pasta <"$ROOT$results/pasta.txt"
if [ -s "$ROOT$results/gopasta-again.txt" ]; then
	summary gopasta " run again" <"$ROOT$results/gopasta-again.txt"
	summary pasta " run again" <"$ROOT$results/pasta-again.txt"
fi
status=0
if [ "$COMPARE" != none ]; then
	# Each test's result under each binary, the second run's where there
	# is one ("none": it did not run there, e.g. a run was cut short), for
	# every test of the first runs (all) or the tests run again (failed),
	# where the two differ, and those that fail with both (both.txt). A
	# test that passes with pasta and not with gopasta, twice, is a
	# regression.
	: >"$ROOT$results/both.txt"
	awk -F '\t' -v all="$([ "$COMPARE" = all ] && echo 1)" -v both="$ROOT$results/both.txt" '
		{ k = $1 "\t" $3 }
		FILENAME ~ /\/gopasta.txt$/       { g1[k] = $2; if (all) keys[k] }
		FILENAME ~ /\/pasta.txt$/         { p1[k] = $2; if (all) keys[k] }
		FILENAME ~ /\/gopasta-again.txt$/ { g2[k] = $2 }
		FILENAME ~ /\/pasta-again.txt$/   { p2[k] = $2; keys[k] }
		END {
			for (k in keys) {
				g = (k in g2) ? g2[k] : (k in g1) ? g1[k] : "none"
				p = (k in p2) ? p2[k] : (k in p1) ? p1[k] : "none"
				if (k in g2 && g1[k] != g2[k])
					printf "flaky\tgopasta %s, then %s; pasta %s\t%s\n", g1[k], g2[k], p, k
				else if (g != p)
					printf "%s\tgopasta %s, pasta %s\t%s\n", (p == "pass" ? "REGRESSION" : "differs"), g, p, k
				else if (g == "fail")
					print k >both
			}
		}' "$ROOT$results"/{gopasta,pasta,gopasta-again,pasta-again}.txt | sort >"$ROOT$results/diff.txt"
	if [ -s "$ROOT$results/diff.txt" ]; then
		echo "results that differ:"
		sed 's/^/  /' "$ROOT$results/diff.txt"
	else
		echo "every test that ran with both binaries has the same result with both"
	fi
	if [ -s "$ROOT$results/both.txt" ]; then
		echo "failed with both:"
		sort "$ROOT$results/both.txt" | sed "s/^/  /; s/$tab/: /"
	fi
	regressions=$(grep -c '^REGRESSION' "$ROOT$results/diff.txt")
	if [ "$regressions" -gt 0 ]; then
		status=1
		echo
		echo "== $regressions test(s) pass with pasta and not with gopasta; their output with gopasta:"
		grep '^REGRESSION' "$ROOT$results/diff.txt" | cut -f3,4 | while IFS=$tab read -r f name; do
			awk -v n="$name" '
				FNR == 1 { on = 0 }
				/^(not )?ok [0-9]+ / { on = index($0, "not ok") == 1 && index($0, n) > 0 }
				on' "$ROOT$results"/gopasta*/"$f".*.tap
		done
	fi
elif grep -q "${tab}fail$tab" "$ROOT$results/gopasta.txt"; then
	status=1
fi
# A run with no results, or one cut short, proves nothing either way.
[ -s "$ROOT$results/gopasta.txt" ] || { echo "no results from the run of gopasta"; status=2; }
[ "$COMPARE" = all ] && [ ! -s "$ROOT$results/pasta.txt" ] && { echo "no results from the run of pasta"; status=2; }
for label in gopasta pasta gopasta-again pasta-again; do
	if [ -e "$ROOT$results/$label/incomplete" ]; then
		sed 's/^/incomplete: /' "$ROOT$results/$label/incomplete"
		status=2
	fi
done
echo "results and logs: $ROOT$results"
exit $status
