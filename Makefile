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

.PHONY: all build launcher test lint demo bench package lab-systemd clean

all: build

build: launcher
	$(GOBUILD) -o bin/mesh-host ./host/cmd/mesh-host
	$(GOBUILD) -o bin/mesh-release ./release/cmd/mesh-release
	$(GOBUILD) -o bin/mesh-lab ./lab/cmd/mesh-lab

# mesh-launcher alone, into LAUNCHEROUT: its bytes depend on its code, never on VERSION.
LAUNCHEROUT ?= bin/mesh-launcher
launcher:
	$(LAUNCHERBUILD) -o $(LAUNCHEROUT) ./launcher/cmd/mesh-launcher

test:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m ./...
	$(GO) test -count=1 -timeout 10m -run 'TestPruningLeavesEveryDecisionAndReportUnchanged|TestRecordsStayUnderTwoMiBOverAHundredThousandStarts' ./rollback
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
demo:
	@echo 'make demo: compiling mesh-lab (on a fresh machine a minute or two with nothing printed; then it says what it builds)'
	CGO_ENABLED=0 $(GO) run -trimpath ./lab/cmd/mesh-lab demo

# The figures the issues name; each benchmark reports its own units (ms, %, MB, ratio).
BENCH := CGO_ENABLED=0 $(GO) test -run '^$$' -count 1 -timeout 30m
bench:
	$(BENCH) -bench 'StandAsideGap|CrashOnStart|LauncherFootprint|LauncherTakeover' -benchtime 20x ./lab/
	$(BENCH) -bench DeclarationToAppliedHeartbeat -benchtime 500x ./host/
	$(BENCH) -bench Reconcile200 -benchtime 200x ./host/apply/
	$(BENCH) -bench . -benchtime 2000x ./host/link/
	$(BENCH) -bench FleetOfHosts -benchtime 20x ./lab/
	$(BENCH) -bench SixNodeRollout -benchtime 3x ./lab/
	$(BENCH) -bench RolloutThousandHosts -benchtime 1x ./lab/
	$(BENCH) -bench RolloutTenThousandSimulatedNodes -benchtime 1x ./lab/
	$(BENCH) -bench RolloutHundredThousandSimulatedNodes -benchtime 1x ./lab/
	$(BENCH) -bench RolloutPauseOnServerLoss -benchtime 1x ./lab/
	$(BENCH) -bench FleetRead -benchtime 20x ./release/fleet/
	$(BENCH) -bench RolloutStateHundredThousandNodes -benchtime 5x ./release/rollout/
	$(BENCH) -bench Deliver20MB -benchtime 20x ./host/deliver/
	$(BENCH) -bench FetchThrough200KBps -benchtime 1x ./host/deliver/
	$(BENCH) -bench . -benchtime 5x ./wire/archive/
	$(BENCH) -bench HostArchive -benchtime 2x ./release/build/
	$(BENCH) -bench DeltaSteps -benchtime 1x ./release/build/
	$(BENCH) -bench RebuildFromDelta -benchtime 20x ./release/build/
	$(BENCH) -bench ParseDeclaration -benchtime 20x ./wire/
	$(BENCH) -bench DecodeHeartbeat -benchtime 20000x ./wire/
	$(BENCH) -bench ThousandNodeUsers -benchtime 1x ./release/trust/
	$(BENCH) -bench EnrolToFirstHeartbeat -benchtime 10x ./release/cmd/mesh-release/

# `make package`: the .deb (nfpm, pinned) and the tarball floor for one architecture, into OUT.
# docs/decisions/0009-packaging.md. Both are built from one staging directory, which is also the
# tarball's top-level directory; each file lands in OUT by a rename, so OUT never holds half of one.
# SOURCE_DATE_EPOCH (the last commit's time) stamps every file in both, so the same tree and Go
# give the same bytes. nfpm names Debian's architecture from GOARCH, except plain arm: Go builds
# for ARMv7 by default, which Debian calls armhf and nfpm arm7.
OUT     ?= dist/out
ARCH    ?= $(shell $(GO) env GOARCH)
NFPM    := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
package: PKGVERSION := $(VERSION)
package: TARNAME = mesh-host-$(PKGVERSION)-linux-$(ARCH)
package: STAGE = $(OUT)/.stage/$(TARNAME)
package:
	rm -rf $(OUT)/.stage && mkdir -p $(STAGE)
	GOOS=linux GOARCH=$(ARCH) $(LAUNCHERBUILD) -o $(STAGE)/mesh-launcher ./launcher/cmd/mesh-launcher
	GOOS=linux GOARCH=$(ARCH) CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X main.version=$(PKGVERSION)' -o $(STAGE)/mesh-host ./host/cmd/mesh-host
	install -m 0644 dist/mesh-launcher.service dist/tarball/README $(STAGE)/
	install -m 0755 dist/tarball/install.sh $(STAGE)/
	VERSION=$(PKGVERSION) ARCH=$(if $(filter arm,$(ARCH)),arm7,$(ARCH)) STAGE=$(STAGE) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) \
		$(GO) run $(NFPM) package -f dist/nfpm.yaml -p deb -t $(OUT)/.stage/
	tar -C $(OUT)/.stage --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(SOURCE_DATE_EPOCH) \
		-I 'gzip -n -9' -cf $(OUT)/.stage/$(TARNAME).tar.gz $(TARNAME)
	sync $(OUT)/.stage/*.deb $(OUT)/.stage/$(TARNAME).tar.gz
	mv -f $(OUT)/.stage/*.deb $(OUT)/.stage/$(TARNAME).tar.gz $(OUT)/
	rm -rf $(OUT)/.stage
	@ls -l $(OUT)

# The real-systemd lab: Debian nodes booted with systemd as PID 1 under systemd-nspawn. Needs
# root; installs systemd-container and debootstrap with apt-get when they are missing; caches the
# rootfs under $$MESH_LAB_CACHE, $$XDG_CACHE_HOME/mesh-lab or /var/cache/mesh-lab.
lab-systemd:
	MESH_LAB_SYSTEMD=1 CGO_ENABLED=0 $(GO) test -count=1 -v -timeout 30m ./lab/systemd/

clean:
	rm -rf bin dist/out
