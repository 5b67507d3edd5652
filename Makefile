# khw — build, test and lint. Every prerequisite is installed from here
# (`make deps`), so a fresh Debian 12 machine with Go needs nothing else.

GO       ?= go
# `sudo make up` runs with sudo's secure_path, which lacks Go: add where the
# official Go installer puts it (the scripts below call go too).
export PATH := $(PATH):/usr/local/go/bin
BIN      ?= bin/khw
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
PKGS     := ./...

.PHONY: all build test test-unit testbins lint fmt vet size fuzz bench versions-check docs deps clean e2e e2e-challenges e2e-day2 e2e-drills e2e-labs e2e-nspawn up

include hack/mirror.mk

all: lint test build

## build: compile bin/khw
build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/khw

## deps: install the host tools the tests use as real witnesses: openssl (certs),
## haproxy (haproxy -c on the rendered config), jq + iproute2 + iptables (the
## mybridge CNI plugin run in a throwaway network namespace), shellcheck, and
## openssh-server + sudo (internal/remote runs against a real sshd on 127.0.0.1),
## systemd-container + debootstrap (internal/vm/nspawn boots real nspawn nodes in a
## network namespace of their own), golang-cfssl (cfssl and cfssljson, which the
## commands of khw lab 02 --by-hand run in make e2e-labs), chromium (headless: the
## HTML reports are loaded and their screenshots read in internal/drill).
DEB_TEST_DEPS := openssl haproxy jq iproute2 iptables shellcheck util-linux openssh-server sudo rsync \
                 systemd-container debootstrap golang-cfssl chromium
deps:
	@missing=; for p in $(DEB_TEST_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

## test: unit and integration tests. Installs prerequisites and builds (or
## reuses) the offline mirror of the binaries the real control-plane test runs
## (kube-apiserver, kube-controller-manager, kube-scheduler, etcd) first:
## ~20 min on a cold 2-core machine, seconds once cached in $(MIRROR_DIR).
## The nspawn node image comes first too (one nspawn boot test, which runs
## debootstrap when the image is missing, ~5 min cold): the
## packages run in parallel, and the nspawn tests of cmd/khw and
## internal/lab skip when it is not there yet.
TEST_MIRROR_ONLY ?= kubernetes,etcd
test: deps testbins
	[ "$$(id -u)" != 0 ] || $(GO) test -count=1 -run '^TestNspawnOneNodeBootSSHPowerOff$$' ./internal/vm/nspawn
	KHW_BROWSER_TEST=1 KHW_MIRROR="$(MIRROR_DIR)" KHW_MIRROR_DIGEST="$$(hack/mirror-pin.sh "$(MIRROR_DIR)")" $(GO) test -count=1 $(PKGS)

## test-unit: the tests that need no built binaries (the control-plane test skips;
## the browser test skips without chromium)
test-unit: deps
	$(GO) test -count=1 $(PKGS)

testbins: mirror-deps
	hack/build-mirror.sh --out "$(MIRROR_DIR)" --arch "$$($(GO) env GOARCH)" --only $(TEST_MIRROR_ONLY)

## lint: gofmt and go vet must be clean, and the size limits hold
lint: fmt vet size

fmt:
	@out=$$(gofmt -l cmd internal templates 2>/dev/null); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

## size: cmd/khw at most 41 lines of code per command (cobra wiring; the logic lives in
## the packages that own it), no Go file over 650 lines (hack/check-size.sh)
size:
	hack/check-size.sh

## fuzz: fuzz the cluster.yaml parser (FUZZTIME=60s by default)
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./internal/config

## docs: regenerate the CLI reference (docs/cli/*.md, docs/man/*.1) from the
## cobra commands and the challenge catalogue's table (docs/challenges.md)
## from the faults; TestCLIReference and TestCatalogueDoc in make test fail
## while they are stale
docs:
	$(GO) test -count=1 -run '^TestCLIReference$$' ./cmd/khw -update-cli-docs
	$(GO) test -count=1 -run '^TestCatalogueDoc$$' ./internal/lab/challenge -update-catalogue-doc

## versions-check: each pinned version line against the newest patch the Go
## module proxy serves (hack/check-versions.sh; exit 1 when one is stale)
versions-check:
	hack/check-versions.sh

## bench: benchmarks (full PKI generation vs the cfssl CLI anchor)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/pki

clean:
	rm -rf bin

## e2e: a real cluster on nspawn nodes, offline (root): build, mirror, init,
## up, status, up again (no-op), down; prints the wall time of each phase
e2e: deps mirror-deps
	hack/e2e.sh

## e2e-day2: make e2e on a cluster of the previous minor (UPGRADE_FROM, made
## with khw init --kubernetes-version; the mirror gets its Kubernetes too) plus
## the day-2 operations: the etcd restore, khw pki renew --all, and lab 15 to
## the default version (by hand in khw shell, khw lab reset 15, then by khw
## upgrade), each checked with openssl, etcdctl, kubectl and a clean khw up
## afterwards (root); e2e-nspawn runs labs 13 and 14
UPGRADE_FROM ?= v1.36.5
e2e-day2: deps mirror-deps
	E2E_DAY2=1 E2E_FROM=$(UPGRADE_FROM) hack/e2e.sh

## e2e-drills: make e2e plus the failover drills (etcd x1, power off cp2,
## etcd x2) before khw down; each must pass its verdict
e2e-drills: deps mirror-deps
	E2E_DRILLS=1 hack/e2e.sh

## e2e-labs: the cluster built by the 12 labs in order, by hand (the
## commands khw lab NN --by-hand shows, run in khw shell) instead of khw up,
## then the witnesses, the no-op khw up, hand-made mistakes (one node each)
## that khw lab check must name, a variant it must pass, khw lab reset
## 10-tls-bootstrap and labs 10-12 again with --yes, then lab 13 (the etcd
## restore) and lab 14 (certificate renewal) with --yes (root); e2e-nspawn
## ends with 10 and 11 --yes, a drill that passes for 12, and labs 13 and 14
e2e-labs: deps mirror-deps
	E2E_LABS=1 hack/e2e.sh

## e2e-nspawn: e2e-labs and e2e-drills on one cluster (what CI runs): the
## labs build it, four troubleshooting challenges proven on it (a rotating
## part of the catalogue: other ones each day), the drills and the mistakes,
## then khw down
E2E_CHALLENGES_CI ?= rotate:4
e2e-nspawn: deps mirror-deps
	E2E_LABS=1 E2E_DRILLS=1 E2E_CHALLENGES=$(E2E_CHALLENGES_CI) hack/e2e.sh

## e2e-challenges: make e2e plus the proof of every troubleshooting challenge
## on the cluster (each injected, named by khw lab check, fixed in khw shell
## as its text says, graded solved, khw up clean); prints a table of fault,
## the check that named it and seconds (root; about 1 min per fault)
e2e-challenges: deps mirror-deps
	E2E_CHALLENGES=all hack/e2e.sh

## up: the main job (root): host packages, khw, the offline mirror, then a
## cluster on nspawn nodes with khw up, and how to use it
up: deps mirror-deps build
	hack/up.sh

.PHONY: libvirt-deps libvirt-deps-arm64 test-libvirt e2e-libvirt e2e-libvirt-arm64

## libvirt-deps: QEMU (x86 and arm), libvirtd, UEFI firmware, dnsmasq, xmllint,
## debootstrap, installed without starting any daemon (hack/libvirt-deps.sh)
libvirt-deps:
	hack/libvirt-deps.sh

## libvirt-deps-arm64: libvirt-deps plus qemu-user-static (arm64 images built
## on an amd64 host: debootstrap and chroots through binfmt_misc)
libvirt-deps-arm64:
	hack/libvirt-deps.sh --arm64

## test-libvirt: the libvirt provider's tests (root): XML, seed and preflight unit
## tests, then a real libvirtd in a throwaway network namespace: the KVM/TCG
## probe, an aarch64 domain to its UEFI boot manager, and one TCG VM from the
## debootstrap test image (hack/libvirt-test-image.sh, direct kernel boot,
## built once, cached) through its life cycle. The default image path (the
## Ubuntu-like stand-in from the mirror) is e2e-libvirt's.
test-libvirt: libvirt-deps
	img=$$(hack/libvirt-test-image.sh | tail -1) && \
	KHW_LIBVIRT_TEST=1 KHW_LIBVIRT_IMAGE="$$img" \
		$(GO) test -count=1 -timeout 60m -v ./internal/vm/libvirt/

## e2e-libvirt: khw init --provider libvirt, then khw up through 11-smoke on
## lb, cp1, w1 and w3 (TLS bootstrap) as TCG VMs from the Ubuntu-like stand-in
## image, offline from the mirror, with libvirtd in a throwaway network
## namespace; then witnesses, a no-op khw up, khw lab check 10, the lb drill,
## khw down; prints the time of each phase and each step (22-35 min on 2 cores
## with warm caches; CI runs it). E2E_UNTIL=06-lb stops there with lb, cp1 and w1 (~12 min).
e2e-libvirt: deps mirror-deps libvirt-deps build
	hack/e2e-libvirt.sh

## e2e-libvirt-arm64: the same on arm64 nodes (aarch64 virt machines with
## UEFI, emulated by TCG on an amd64 host; the images built through
## qemu-user): lb, cp1, w1 through 07-workers, with each node's uname -m and
## w1's host preparation checked (too slow for CI: over 70 min on 2 cores)
e2e-libvirt-arm64: deps mirror-deps mirror-deps-arm64 libvirt-deps-arm64 build
	E2E_ARCH=arm64 hack/e2e-libvirt.sh
