#!/bin/bash
# Builds pasta from a passt source tree for `make bench PASTA=...`: `make
# pasta` runs it. The source is copied into a build directory of its own
# (passt's Makefile builds in place, and the source tree stays untouched),
# and passt's make builds pasta there with its version compiled in, so that
# `pasta --version`, and the bench report with it, names what was built.
#
#	bench/build-pasta.sh SRC OUT [REF]
#
# SRC is a passt checkout (its working tree is built, version `git describe
# --tags --always --dirty`), a bare passt repository (REF is built, default
# HEAD), or a tree without git, whose version PASTA_VERSION must give.
# OUT (build/passt from the Makefile, git-ignored) is replaced when an
# earlier run made it, and never otherwise.
set -euo pipefail

die() {
	echo "make pasta: $*" >&2
	exit 1
}

src=${1:-}
out=${2:-}
ref=${3:-HEAD}
version=${PASTA_VERSION:-}
marker=.gopasta-pasta-build

[ -n "$src" ] && [ -d "$src" ] ||
	die "no passt source tree at '$src': clone git://passt.top/passt there, or give PASST_SRC=/path/to/passt"
[ -n "$out" ] || die "no build directory given (PASTA_BUILD)"
src=$(cd "$src" && pwd -P)

# A checkout only counts as one when SRC is its top: a tree extracted inside
# some other repository must not take that repository's commit.
toplevel=$(git -C "$src" rev-parse --show-toplevel 2>/dev/null || true)
bare=$(git -C "$src" rev-parse --is-bare-repository 2>/dev/null || true)
if [ -f "$src/passt.c" ]; then
	kind=tree
	if [ -z "$version" ] && [ "$toplevel" = "$src" ]; then
		version=$(git -C "$src" describe --tags --always --dirty)
	fi
elif [ "$bare" = true ]; then
	kind=bare
	git -C "$src" rev-parse --verify -q "$ref^{commit}" >/dev/null ||
		die "no commit '$ref' in the repository at $src (PASST_REF)"
	[ -n "$version" ] || version=$(git -C "$src" describe --tags --always "$ref")
else
	die "$src is neither a passt source tree (no passt.c) nor a bare passt repository"
fi
[ -n "$version" ] ||
	die "$src is not a git checkout, so its commit is unknown: give it as PASTA_VERSION=<commit>"
# passt's Makefile puts the version in a C string on the compiler's command
# line.
case $version in
*[!A-Za-z0-9._+~-]*) die "PASTA_VERSION '$version': only letters, digits and ._+~- please" ;;
esac

if [ -e "$out" ]; then
	[ -f "$out/$marker" ] || [ -z "$(ls -A "$out")" ] ||
		die "$out exists and was not made by make pasta: not replacing it (give PASTA_BUILD=another/dir)"
	rm -rf "$out"
fi
mkdir -p "$out"
case $kind in
tree) tar -C "$src" --exclude=.git -cf - . | tar -C "$out" -xf - ;;
bare) git -C "$src" archive "$ref" | tar -C "$out" -xf - ;;
esac
echo "$src $ref" >"$out/$marker"

# Binaries copied from a source tree that was built in place would look up
# to date to make: clean them, then build pasta, and on x86_64 the AVX2
# build that pasta runs in its own place when the CPU has AVX2 (as passt's
# default make and the distributions' packages do).
targets=(pasta)
[ "$(uname -m)" = x86_64 ] && targets+=(pasta.avx2)
make -s -C "$out" clean >/dev/null
make -C "$out" -j"$(nproc)" VERSION="$version" "${targets[@]}" ||
	die "passt's make failed in $out"
echo "$version" >"$out/VERSION"
got=$("$out/pasta" --version 2>/dev/null | head -n 1 || true)
echo "make pasta: built $out/pasta ($got); compare with it: make bench PASTA=$out/pasta"
