# Offline download mirror (test tooling; hack/README.md). Include from the
# Makefile (`include hack/mirror.mk`) or paste. Standalone:
#   make -f hack/mirror.mk mirror MIRROR_ARCH=amd64,arm64

GO ?= go

## mirror: build every catalog download from source into MIRROR_DIR with the
## official layout (amd64 only by default, for CI speed; MIRROR_ARCH=amd64,arm64
## for both). Cold ~10-30 min on 2 cores, warm a few seconds.
MIRROR_DIR   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/khw/mirror
MIRROR_ARCH  ?= amd64
MIRROR_FLAGS ?=
# gcc + libc6-dev: static pause (C) and cgo for runc; libseccomp-dev +
# pkg-config: runc's seccomp support (static libseccomp.a); binutils: strip;
# ca-certificates: the CoreDNS image's CA bundle.
DEB_MIRROR_DEPS       := gcc libc6-dev binutils pkg-config libseccomp-dev ca-certificates
DEB_MIRROR_DEPS_ARM64 := gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu libseccomp-dev:arm64

.PHONY: mirror mirror-deps mirror-deps-arm64 mirror-verify mirror-test

mirror: mirror-deps $(if $(findstring arm64,$(MIRROR_ARCH)),mirror-deps-arm64)
	hack/build-mirror.sh --out "$(MIRROR_DIR)" --arch "$(MIRROR_ARCH)" $(MIRROR_FLAGS)

## mirror-verify: re-check an existing mirror against the catalog, build nothing
mirror-verify:
	hack/build-mirror.sh --verify-only --out "$(MIRROR_DIR)" --arch "$(MIRROR_ARCH)" $(MIRROR_FLAGS)

## mirror-test: the builder's fast unit tests (no compilers needed)
mirror-test:
	$(GO) test -count=1 ./hack/mkmirror/

mirror-deps:
	@missing=; for p in $(DEB_MIRROR_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

## mirror-deps-arm64: Debian multiarch cross toolchain for runc (cgo + libseccomp)
## and pause (C); adds the arm64 dpkg architecture once.
mirror-deps-arm64:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then \
	  echo "dpkg --add-architecture arm64"; $$SUDO dpkg --add-architecture arm64; $$SUDO apt-get update -qq; \
	fi; \
	missing=; for p in $(DEB_MIRROR_DEPS_ARM64); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
