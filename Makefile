# mesh-host: the launcher, the host, the release tool and the lab.
# Everything here needs only Go; tools are pinned and fetched through `go run`.

GO        ?= go
VERSION   ?= $(shell ./scripts/version)
LDFLAGS   := -s -w -X main.version=$(VERSION)
GOBUILD   := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'
# The launcher has its own version (launcher.Version, launcher/version.go), not the host's: it is
# not stamped, and -buildvcs=false leaves out the commit Go would stamp into it, so an unchanged
# launcher builds to the same bytes in every release (lab/launcher_bytes_test.go checks).
LAUNCHERBUILD := CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '-s -w'
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build launcher test lint demo up bench package lab-systemd clean

all: build

build: launcher
	$(GOBUILD) -o bin/mesh-host ./host/cmd/mesh-host
	$(GOBUILD) -o bin/mesh-release ./release/cmd/mesh-release
	$(GOBUILD) -o bin/mesh-lab ./lab/cmd/mesh-lab

# mesh-launcher alone, into LAUNCHEROUT: its bytes depend on its code, never on VERSION.
LAUNCHEROUT ?= bin/mesh-launcher
launcher:
	$(LAUNCHERBUILD) -o $(LAUNCHEROUT) ./launcher/cmd/mesh-launcher

# -timeout is each package's guard against a hang, never a speed bar: no test has a deadline
# around a build, and dist/'s tests (a cold `make package` first) took 56 minutes on a 2-core
# machine shared by eight jobs (load average about 40).
test:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 90m ./...
	$(GO) test -count=1 -timeout 30m -run 'TestPruningLeavesEveryDecisionAndReportUnchanged|TestRecordsStayUnderTwoMiBOverAHundredThousandStarts' ./rollback
	$(GO) test -run '^$$' -fuzz '^FuzzParseDeclaration$$' -fuzztime 20s ./wire

# mesh-release runs on an operator's laptop as well as on Linux: it (and all of release/) must
# build for macOS and for arm64; the node's binaries are Linux's only.
lint:
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) run $(STATICCHECK) ./...
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) build ./release/...
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./release/cmd/mesh-release
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -o /dev/null ./release/cmd/mesh-release

# -trimpath as the lab's own builds use it, so the packages compiled for mesh-lab are the ones
# its builds of the launcher, the host and mesh-release reuse (a cold cache compiles them once).
# Where the machine runs linux/arm64 binaries (Debian's qemu-user-static and binfmt-support) the
# fleet is four amd64 and two arm64 nodes; elsewhere it says so and runs the machine's platform.
demo:
	@echo 'make demo: compiling mesh-lab (on a fresh machine a minute or two with nothing printed; then it says what it builds)'
	CGO_ENABLED=0 $(GO) run -trimpath ./lab/cmd/mesh-lab demo

# `make up`: a fleet left running to try commands against (`mesh-lab up`, lab/up.go). mesh-lab is
# built as the demo's is (CGO_ENABLED=0, -trimpath: after `make demo` nothing is compiled again)
# and exec'd, not run through `go run`, which ignores a SIGINT sent to it alone and dies of a
# SIGTERM without passing it on: make passes SIGTERM to it, and it stops its fleet when whatever
# started it dies. UPFLAGS='--nodes 5 --dir DIR' says what fleet.
UPFLAGS ?= --nodes 3
up:
	$(GOBUILD) -o bin/mesh-lab ./lab/cmd/mesh-lab && exec bin/mesh-lab up $(UPFLAGS)

# The figures the issues name; each benchmark reports its own units (ms, %, MB, ratio).
BENCH := CGO_ENABLED=0 $(GO) test -run '^$$' -count 1 -timeout 30m
bench:
	$(BENCH) -bench 'StandAsideGap|CrashOnStart|LauncherFootprint|LauncherTakeover' -benchtime 20x ./lab/
	$(BENCH) -bench DeclarationToAppliedHeartbeat -benchtime 500x ./host/
	$(BENCH) -bench Reconcile200 -benchtime 200x ./host/apply/
	$(BENCH) -bench Apply11000Files -benchtime 1x ./host/apply/
	$(BENCH) -bench . -benchtime 2000x ./host/link/
	$(BENCH) -bench FleetOfHosts -benchtime 20x ./lab/
	$(BENCH) -bench SixNodeRollout -benchtime 3x ./lab/
	$(BENCH) -bench RolloutThousandHosts -benchtime 1x ./lab/
	$(BENCH) -bench RolloutTenThousandSimulatedNodes -benchtime 1x ./lab/
	$(BENCH) -bench RolloutHundredThousandSimulatedNodes -benchtime 1x ./lab/
	$(BENCH) -bench RolloutPauseOnServerLoss -benchtime 1x ./lab/
	$(BENCH) -bench FleetRead -benchtime 20x ./release/fleet/
	$(BENCH) -bench ScrapeTenThousandNodes -benchtime 20x ./release/metrics/
	$(BENCH) -bench FleetPageTenThousandNodes -benchtime 20x ./release/web/
	$(BENCH) -bench RolloutStateHundredThousandNodes -benchtime 5x ./release/rollout/
	$(BENCH) -bench Deliver20MB -benchtime 20x ./host/deliver/
	$(BENCH) -bench FetchThrough200KBps -benchtime 1x ./host/deliver/
	$(BENCH) -bench FetchStallAfterAServerKill -benchtime 1x ./host/deliver/
	$(BENCH) -bench . -benchtime 5x ./wire/archive/
	$(BENCH) -bench HostArchive -benchtime 2x ./release/build/
	$(BENCH) -bench DeltaSteps -benchtime 1x ./release/build/
	$(BENCH) -bench RebuildFromDelta -benchtime 20x ./release/build/
	$(BENCH) -bench ParseDeclaration -benchtime 20x ./wire/
	$(BENCH) -bench DecodeHeartbeat -benchtime 20000x ./wire/
	$(BENCH) -bench ThousandNodeUsers -benchtime 1x ./release/trust/
	$(BENCH) -bench EnrolToFirstHeartbeat -benchtime 10x ./release/cmd/mesh-release/
	$(BENCH) -bench ReleasePlatforms -benchtime 1x ./release/cmd/mesh-release/

# `make package`: the node's .deb (nfpm, pinned) and its tarball floor for each of ARCHS, and the
# release tool's .deb and tarball for each of RELEASE_ARCHS and its macOS binary (RELEASE_DARWIN),
# into OUT. docs/decisions/0009-packaging.md and 0033-the-release-tool-packaged.md. Each tarball is
# built from a staging directory, which is also its top-level directory; each file lands in OUT by
# a rename, so OUT never holds half of one. SOURCE_DATE_EPOCH (the last commit's time) stamps every
# file, so the same tree and Go give the same bytes.
# ARCHS are GOARCHs; every artifact is named with Debian's word for it, which is GOARCH's except for
# arm: built GOARM=7 (ARMv7, hard float), Debian's armhf, which nfpm calls arm7. Each tarball's
# install.sh is stamped with that word (its tarball_arch line) and refuses a machine of another.
# The man pages, completions and changelogs are written by dist/gendoc from the four binaries'
# own --help, built for this machine (they must run here) into .stage/native; OUT/man keeps all
# four pages (mesh-lab's included: it is run from a source tree and has no package).
OUT     ?= dist/out
ARCHS   ?= amd64 arm64 arm
RELEASE_ARCHS ?= amd64 arm64
# The release tool for macOS: a GOARCH, or empty for none (the systemd lab builds the node's alone).
RELEASE_DARWIN ?= arm64
NFPM    := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
MAINTAINER := mesh-host maintainers <maintainers@mesh-host.invalid>
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
package: PKGVERSION := $(VERSION)
package: NATIVE = $(OUT)/.stage/native
package: GEN = $(OUT)/.stage/gen
package: READY = $(OUT)/.stage/ready
package: RELFLAGS = -trimpath -ldflags '-s -w -X main.version=$(PKGVERSION)'
package: TAR = tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(SOURCE_DATE_EPOCH) -I 'gzip -n -9'
package:
	@set -e; for a in $(ARCHS); do case $$a in amd64 | arm64 | arm) ;; \
		*) echo "make package: ARCHS names $$a; the node is packaged for amd64, arm64 and arm (armhf)" >&2; exit 2 ;; esac; done
	rm -rf $(OUT)/.stage && mkdir -p $(NATIVE) $(GEN) $(READY)
	$(LAUNCHERBUILD) -o $(NATIVE)/mesh-launcher ./launcher/cmd/mesh-launcher
	CGO_ENABLED=0 $(GO) build $(RELFLAGS) -o $(NATIVE)/ ./host/cmd/mesh-host ./release/cmd/mesh-release ./lab/cmd/mesh-lab
	$(GO) build -o $(NATIVE)/gendoc ./dist/gendoc
	$(NATIVE)/gendoc pages -out $(GEN) -version $(PKGVERSION) -date $(SOURCE_DATE_EPOCH) \
		$(NATIVE)/mesh-host:8 $(NATIVE)/mesh-launcher:8 $(NATIVE)/mesh-release:1 $(NATIVE)/mesh-lab:1
	for p in mesh-host mesh-release; do $(NATIVE)/gendoc changelog -o $(GEN)/$$p/changelog.gz -package $$p \
		-version $(PKGVERSION) -date $(SOURCE_DATE_EPOCH) -maintainer '$(MAINTAINER)' || exit 1; done
	set -e; for a in $(ARCHS); do \
		case $$a in arm) deb=armhf nfpm=arm7 ;; *) deb=$$a nfpm=$$a ;; esac; \
		top=mesh-host-$(PKGVERSION)-linux-$$deb; st=$(OUT)/.stage/$$top; mkdir -p $$st; \
		GOOS=linux GOARCH=$$a GOARM=7 $(LAUNCHERBUILD) -o $$st/mesh-launcher ./launcher/cmd/mesh-launcher; \
		GOOS=linux GOARCH=$$a GOARM=7 CGO_ENABLED=0 $(GO) build $(RELFLAGS) -o $$st/mesh-host ./host/cmd/mesh-host; \
		install -m 0644 dist/mesh-launcher.service dist/tarball/README $$st/; \
		sed "s/^tarball_arch=.*/tarball_arch=$$deb/" dist/tarball/install.sh >$$st/install.sh; chmod 0755 $$st/install.sh; \
		grep -qx "tarball_arch=$$deb" $$st/install.sh; \
		VERSION=$(PKGVERSION) ARCH=$$nfpm STAGE=$$st GEN=$(GEN) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) \
			$(GO) run $(NFPM) package -f dist/nfpm.yaml -p deb -t $(READY)/; \
		$(TAR) -C $(OUT)/.stage -cf $(READY)/$$top.tar.gz $$top; \
	done
	set -e; for a in $(RELEASE_ARCHS); do \
		rs=$(OUT)/.stage/mesh-release-$(PKGVERSION)-linux-$$a; mkdir -p $$rs; \
		GOOS=linux GOARCH=$$a CGO_ENABLED=0 $(GO) build $(RELFLAGS) -o $$rs/mesh-release ./release/cmd/mesh-release; \
		install -m 0644 dist/mesh-release.service dist/release-tarball/README $(GEN)/man/mesh-release.1.gz $(GEN)/zsh/_mesh-release $$rs/; \
		install -m 0644 $(GEN)/bash/mesh-release $$rs/mesh-release.bash; \
		VERSION=$(PKGVERSION) ARCH=$$a STAGE=$$rs GEN=$(GEN) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) \
			$(GO) run $(NFPM) package -f dist/nfpm-release.yaml -p deb -t $(READY)/; \
		$(TAR) -C $(OUT)/.stage -cf $(READY)/mesh-release-$(PKGVERSION)-linux-$$a.tar.gz mesh-release-$(PKGVERSION)-linux-$$a; \
	done
	set -e; for a in $(RELEASE_DARWIN); do GOOS=darwin GOARCH=$$a CGO_ENABLED=0 $(GO) build $(RELFLAGS) \
		-o $(READY)/mesh-release-$(PKGVERSION)-darwin-$$a ./release/cmd/mesh-release; done
	touch -d @$(SOURCE_DATE_EPOCH) $(GEN)/man/*.gz
	sync $(READY)/* $(GEN)/man/*.gz
	mkdir -p $(OUT)/man && mv -f $(GEN)/man/*.gz $(OUT)/man/
	mv -f $(READY)/* $(OUT)/
	rm -rf $(OUT)/.stage
	@ls -l $(OUT)

# The real-systemd lab: Debian nodes booted with systemd as PID 1 under systemd-nspawn. Needs
# root; installs systemd-container and debootstrap with apt-get when they are missing; caches the
# rootfs under $$MESH_LAB_CACHE, $$XDG_CACHE_HOME/mesh-lab or /var/cache/mesh-lab.
# LAB_RUN picks tests as go test's -run does (LAB_RUN=TestPackagedNode/arm64: the arm64 node alone).
LAB_RUN ?=
lab-systemd:
	MESH_LAB_SYSTEMD=1 CGO_ENABLED=0 $(GO) test -count=1 -v -timeout 60m -run '$(LAB_RUN)' ./lab/systemd/

clean:
	rm -rf bin dist/out
