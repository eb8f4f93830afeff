# gopasta developer targets. Everything runs from a plain checkout with Go
# (>= the go.mod version) on PATH; `make test` needs root (it creates network
# namespaces and switches to uid 65534), and `bash .ci/run` installs what the
# tests need on a fresh Debian 12 machine before running check, test and
# fuzz-short.

GO        ?= go
# gopasta is built without cgo: its sandbox changes the privileges of every
# thread through syscall.AllThreadsSyscall, which cgo binaries cannot use
# (docs/security.md). Tests and tools are built the same way.
export CGO_ENABLED = 0
BIN       ?= gopasta
# make run CMD='ping -c1 192.0.2.1' runs another command in the namespace.
CMD       ?= ip addr
FUZZTIME  ?= 5s
TESTFLAGS ?=
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
VMTESTS   ?= internal/vmtest/run-vm-tests.sh
# The packages the race detector runs over (it needs cgo, so a C compiler):
# everything but the integration tests, which drive a separately built binary.
RACEPKGS  ?= ./fwd/... ./splice/... ./tap/... ./vhostkern/... ./ns/... ./internal/...

.PHONY: all build run test check bench fuzz-short clean

all: build

## build: compile ./gopasta
build:
	$(GO) build -o $(BIN) .

## run: build, then show a configured namespace: gopasta copies the host's
## addresses and routes into a new user+network namespace and runs $(CMD)
## there (default: `ip addr`, which prints lo and the TAP interface).
run: build
	./$(BIN) --config-net -- $(CMD)

## test: the whole suite as root (unit tests, e2e/ as root and uid 65534),
## the unit tests again under the race detector when a C compiler is there,
## then the vhost-net tests inside a QEMU guest when their runner exists.
#
# The suite runs once, in the seccomp report mode: with GOPASTA_SECCOMP=log
# every gopasta the tests start reports a system call outside its allowlist
# (to a report file, internal/nstest) instead of dying of it, and the run
# fails on any. Once, not twice: the filter is the same but for its default
# action, so this mode catches every call the killing filter would, and
# also those on paths whose outcome no test checks, while a second e2e run
# would add most of `make test` to CI for nothing new. TestSandbox (every
# mode, both users, all traffic), TestInjectedFaults (every error path of
# the loops, package faults) and internal/sandbox's tests keep the killing
# filter; package faults is tested in its faultinject build too.
test:
	GOPASTA_SECCOMP=log $(GO) test -count=1 -timeout 20m $(TESTFLAGS) ./...
	$(GO) test -count=1 -tags faultinject $(TESTFLAGS) ./internal/faults
	@if command -v gcc >/dev/null 2>&1; then \
		echo "== race detector ($(RACEPKGS))"; \
		CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 15m $(TESTFLAGS) $(RACEPKGS); \
	else \
		echo "== race detector skipped: no C compiler (apt-get install gcc libc6-dev)"; \
	fi
	@if [ -f $(VMTESTS) ]; then \
		echo "== VM tests ($(VMTESTS))"; \
		bash $(VMTESTS); \
	else \
		echo "== VM tests skipped: $(VMTESTS) not present"; \
	fi

## check: formatting, go.mod tidy, vet, staticcheck, and a man page that
## matches the CLI.
check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy'"; exit 1; }
	@out=$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./... | sort -u)); \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need formatting:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(GO) generate ./...
	@git diff --exit-code -- man/ || { echo "man/ is stale: run 'go generate ./...' and commit the result"; exit 1; }

## bench: the comparison harness (bench/, needs root): builds gopasta,
## installs iperf3, passt and slirp4netns when missing, then runs every
## workload through gopasta, pasta, slirp4netns and a plain veth pair inside
## a throwaway host namespace as uid 65534, 3 runs of 5 s per row, the
## request/response rows also with every party pinned to one CPU (about 40
## minutes); prints the table, writes bench/results/latest.md and the
## results section of docs/performance.md. BENCHFLAGS adds options, e.g.
## BENCHFLAGS='-filter tcp -runs 1'. (The packages' Go micro-benchmarks:
## go test -run=NONE -bench=. -benchmem ./...)
## PASTA names the pasta to compare with (default: pasta on PATH, Debian's),
## e.g. PASTA=build/passt/pasta make bench for a build from source (make
## pasta); the report names its version, or PASTA_VERSION when its
## --version cannot.
BENCHFLAGS ?=
PASTA     ?= pasta
PASTA_VERSION ?=
bench: build
	bash bench/deps.sh
	$(GO) run ./bench -gopasta ./$(BIN) -pasta $(PASTA) $(if $(PASTA_VERSION),-pasta-version '$(PASTA_VERSION)') -doc docs/performance.md $(BENCHFLAGS)

## bench-quick: the two-minute version: an IPv4 subset, one 3 s run per row,
## pinned request/response included; writes bench/results/latest.md only.
.PHONY: bench-quick
bench-quick: build
	bash bench/deps.sh
	$(GO) run ./bench -quick -gopasta ./$(BIN) -pasta $(PASTA) $(if $(PASTA_VERSION),-pasta-version '$(PASTA_VERSION)') $(BENCHFLAGS)

## pasta: build pasta from passt's source for the table of record, into
## PASTA_BUILD (build/passt, git-ignored; nothing of passt's is committed),
## then `make bench PASTA=build/passt/pasta`. PASST_SRC (default ../passt) is
## a passt checkout, whose working tree is built and named by `git describe`,
## or a bare passt repository, whose PASST_REF (default HEAD) is built; a
## tree without git needs its commit as PASTA_VERSION=<commit>. Needs a C
## compiler and make.
PASST_SRC   ?= ../passt
PASST_REF   ?= HEAD
PASTA_BUILD ?= build/passt
.PHONY: pasta
pasta:
	@PASTA_VERSION='$(PASTA_VERSION)' bash bench/build-pasta.sh '$(PASST_SRC)' '$(PASTA_BUILD)' '$(PASST_REF)'

## bench-vhost: --vhost=on against --vhost=off (and vhost RX from the queue
## against read(2)) on the same TCP transfers inside a QEMU guest, MTU 65520
## and 1500; about a minute per round. Prints medians, ratios and
## notifications per frame (docs/vhost.md); `bench` may call it.
.PHONY: bench-vhost
bench-vhost:
	bash internal/vmtest/bench-vhost.sh

## stress: the stress suite's long form (stress/, needs root; docs/reliability.md):
## 60,000 UDP flows, 20,000 and twice 5,000 held TCP connections and 90 s of
## churn, each against a fresh gopasta with the machine's RLIMIT_NOFILE, then
## a 30-minute soak; about 40 minutes; prints a summary table at the end.
## STRESSFLAGS adds go test flags (STRESSFLAGS='-run TestStress/churn');
## GOPASTA_BIN=PATH runs the suite against that pasta instead.
STRESSFLAGS ?=
.PHONY: stress stress-short
stress:
	GOPASTA_STRESS=long $(GO) test -count=1 -v -timeout 100m $(STRESSFLAGS) ./stress

## stress-short: the short form, which CI runs: a tenth of each load against
## a descriptor limit lowered to 2,000, so the same limits are hit, and a 30 s
## soak; about 3 minutes. STRESS_SECCOMP=log runs gopasta in the seccomp
## report mode (GOPASTA_SECCOMP=log, GOPASTA_SECCOMP_REPORT=a file) and fails
## when the report file is not empty at the end.
STRESS_SECCOMP ?=
stress-short:
	@if [ "$(STRESS_SECCOMP)" = log ]; then \
		dir=$$(mktemp -d /tmp/gopasta-seccomp-XXXXXX) && chmod 0777 $$dir || exit 1; \
		rc=0; \
		GOPASTA_SECCOMP=log GOPASTA_SECCOMP_REPORT=$$dir/report GOPASTA_STRESS=short \
			$(GO) test -count=1 -v -timeout 15m $(STRESSFLAGS) ./stress || rc=$$?; \
		if [ -s $$dir/report ]; then \
			echo "== calls outside the seccomp allowlist (GOPASTA_SECCOMP_REPORT):"; cat $$dir/report; rc=1; \
		fi; \
		rm -rf $$dir; exit $$rc; \
	elif [ -n "$(STRESS_SECCOMP)" ]; then \
		echo "STRESS_SECCOMP=$(STRESS_SECCOMP): want log or nothing"; exit 1; \
	else \
		GOPASTA_STRESS=short $(GO) test -count=1 -v -timeout 15m $(STRESSFLAGS) ./stress; \
	fi

## podman-suite: podman 5's own system tests with ./gopasta as podman's
## pasta and with Debian trixie's pasta, side by side: the files of podman's
## test/system in $(PODMAN_SUITE), at the tag of trixie's podman. Prints the
## podman and passt versions, a summary per binary and file and the tests
## whose results differ; fails if a test passes with pasta and not with
## gopasta. Needs root and Debian's archive; builds a trixie root under
## /srv/gopasta-podman5 on first use (about 2 minutes) and reuses it; the
## three files take 10 to 15 minutes on 2 cores (e2e/podman5/README.md).
PODMAN_SUITE ?= 505-networking-pasta.bats 500-networking.bats 200-pod.bats
.PHONY: podman-suite
podman-suite: build
	bash e2e/podman5/suite.sh ./$(BIN) $(PODMAN_SUITE)

## fuzz-short: run every FuzzXxx target for $(FUZZTIME) each (seed corpora
## already run as part of `make test`).
#
## A run that ends in "context deadline exceeded" without writing a failing
## input is Go's fuzz-coordinator race at the -fuzztime deadline
## (go.dev/issue/75804, fixed in Go 1.27), not a finding: it is reported as a
## flake. Anything else that fails, and every written input, fails the target.
fuzz-short:
	@set -e; flakes=0; for pkg in $$($(GO) list ./...); do \
		list=$$($(GO) test -list '^Fuzz' $$pkg) || { echo "$$list"; exit 1; }; \
		for fz in $$(echo "$$list" | grep '^Fuzz' || true); do \
			echo "== $$pkg $$fz ($(FUZZTIME))"; \
			if out=$$($(GO) test -run=NONE -fuzz="^$$fz\$$" -fuzztime=$(FUZZTIME) $$pkg 2>&1); then \
				echo "$$out" | tail -n 1; \
			elif echo "$$out" | grep -q 'context deadline exceeded' && \
				! echo "$$out" | grep -q 'Failing input written'; then \
				echo "$$out" | tail -n 4; echo "   (flake: go.dev/issue/75804 deadline race, no failing input)"; \
				flakes=$$((flakes + 1)); \
			else \
				echo "$$out"; exit 1; \
			fi; \
		done; \
	done; echo "fuzz-short: all targets passed ($$flakes deadline flakes)"

clean:
	rm -f $(BIN)
