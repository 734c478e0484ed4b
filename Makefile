# mesh-host: the launcher, the host, the release tool and the lab.
# Everything here needs only Go; tools are pinned and fetched through `go run`.

GO        ?= go
VERSION   ?= $(shell ./scripts/version)
LDFLAGS   := -s -w -X main.version=$(VERSION)
GOBUILD   := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build test lint demo bench clean

all: build

build:
	$(GOBUILD) -o bin/mesh-launcher ./launcher/cmd/mesh-launcher
	$(GOBUILD) -o bin/mesh-host ./host/cmd/mesh-host
	$(GOBUILD) -o bin/mesh-release ./release/cmd/mesh-release
	$(GOBUILD) -o bin/mesh-lab ./lab/cmd/mesh-lab

test:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m ./...

lint:
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) run $(STATICCHECK) ./...

demo:
	CGO_ENABLED=0 $(GO) run ./lab/cmd/mesh-lab demo

# The figures the issues name; each benchmark reports its own units (ms, %, MB, ratio).
BENCH := CGO_ENABLED=0 $(GO) test -run '^$$' -count 1 -timeout 30m
bench:
	$(BENCH) -bench 'StandAsideGap|CrashOnStart|LauncherFootprint' -benchtime 20x ./lab/
	$(BENCH) -bench DeclarationToAppliedHeartbeat -benchtime 500x ./host/
	$(BENCH) -bench . -benchtime 2000x ./host/link/
	$(BENCH) -bench FleetOfHosts -benchtime 20x ./lab/
	$(BENCH) -bench SixNodeRollout -benchtime 3x ./lab/
	$(BENCH) -bench RolloutThousandHosts -benchtime 1x ./lab/
	$(BENCH) -bench RolloutTenThousandSimulatedNodes -benchtime 1x ./lab/
	$(BENCH) -bench FleetRead -benchtime 20x ./release/fleet/
	$(BENCH) -bench Deliver20MB -benchtime 20x ./host/deliver/
	$(BENCH) -bench . -benchtime 5x ./wire/archive/
	$(BENCH) -bench HostArchive -benchtime 2x ./release/build/
	$(BENCH) -bench ParseDeclaration -benchtime 20x ./wire/

clean:
	rm -rf bin
