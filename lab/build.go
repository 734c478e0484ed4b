package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// Packages the lab builds, relative to the module root.
const (
	PkgLauncher = "./launcher/cmd/mesh-launcher"
	PkgHost     = "./host/cmd/mesh-host"
	PkgRelease  = "./release/cmd/mesh-release"
	PkgExit1    = "./lab/fixtures/exit1"
	PkgHang     = "./lab/fixtures/hang"
	PkgExit0    = "./lab/fixtures/exit0"
	PkgFlaky    = "./lab/fixtures/flaky"
	PkgLoud     = "./lab/fixtures/loud"
	// PkgLinkCrash links to the bus with the real link, then exits 1 before confirming.
	PkgLinkCrash = "./lab/fixtures/linkcrash"
	// PkgBadLauncher is a launcher that answers its version and fails when run (BuildX
	// main.mode=crash|hang|exit, main.version=…).
	PkgBadLauncher = "./lab/fixtures/badlauncher"
	// PkgCrashLater runs as the real host and confirms, then exits 1 after MESH_LAB_CRASH_AFTER
	// (default 4s): it crashes every few seconds after confirming.
	PkgCrashLater = "./lab/fixtures/crashlater"
	// PkgHangRun passes preflight and, when run, hangs without confirming (ignoring SIGTERM).
	PkgHangRun = "./lab/fixtures/hangrun"
)

// Builder builds static binaries from the source tree, each (package, version) once.
type Builder struct {
	Src string // the module root
	Out string // where binaries go
	// Progress, when set, gets a line before each build starts: a cold build takes minutes, and
	// a person watching `make demo` should see what it is waiting for.
	Progress io.Writer

	mu    sync.Mutex
	built map[string]string
}

// NewBuilder builds from the module that contains dir (or the working directory) into out.
func NewBuilder(ctx context.Context, dir, out string) (*Builder, error) {
	cmd := exec.CommandContext(ctx, "go", "env", "GOMOD")
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("find the module root (is Go installed?): %w", err)
	}
	gomod := strings.TrimSpace(string(b))
	if gomod == "" || gomod == os.DevNull {
		return nil, fmt.Errorf("%s is not inside the mesh-host source tree", dir)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	return &Builder{Src: filepath.Dir(gomod), Out: out, built: map[string]string{}}, nil
}

// Build returns the path of pkg built with version stamped into main.version, for this machine.
// The launcher has its own version (launcher.Version) and is built as `make build` builds it
// (BuildArgs): at ToolVersion it is not stamped at all, so it says the version its code carries;
// at any other version that is stamped into launcher.Version (a "newer launcher").
func (b *Builder) Build(ctx context.Context, pkg, version string) (string, error) {
	return b.BuildFor(ctx, pkg, version, "")
}

// BuildFor is Build for linux/goarch ("" is this machine's architecture): an arm64 launcher or
// host for a node the lab runs under qemu-user, say. A build for another architecture is named
// with its platform (mesh-host-v1.1.0-linux-arm64), this machine's as Build names it.
func (b *Builder) BuildFor(ctx context.Context, pkg, version, goarch string) (string, error) {
	if goarch == runtime.GOARCH {
		goarch = ""
	}
	key := pkg + "@" + version + "@linux/" + goarch
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.built[key]; ok {
		return p, nil
	}
	name := filepath.Base(pkg) + "-" + version
	if goarch != "" {
		name += "-linux-" + goarch
	}
	out := filepath.Join(b.Out, name)
	if b.Progress != nil {
		fmt.Fprintf(b.Progress, "  go build %s as %s%s …\n", pkg, version, forArch(goarch))
	}
	if err := goBuild(ctx, b.Src, goarch, append(BuildArgs(pkg, version), "-o", out, pkg)); err != nil {
		return "", fmt.Errorf("go build %s (%s%s): %w", pkg, version, forArch(goarch), err)
	}
	b.built[key] = out
	return out, nil
}

func forArch(goarch string) string {
	if goarch == "" {
		return ""
	}
	return " for linux/" + goarch
}

// goBuild runs go with args in dir, static (CGO_ENABLED=0), for linux/goarch when goarch is set;
// its error holds what go said.
func goBuild(ctx context.Context, dir, goarch string, args []string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if goarch != "" {
		cmd.Env = append(cmd.Env, "GOOS=linux", "GOARCH="+goarch)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, stderr.String())
	}
	return nil
}

// LauncherVersionVar is the variable holding the launcher's own version, for -ldflags -X.
const LauncherVersionVar = "github.com/novox/mesh-host/launcher.Version"

// BuildArgs are go's arguments (before -o) that build pkg as version. Every build leaves out
// the commit (-buildvcs=false), so the same source gives the same bytes in any checkout.
func BuildArgs(pkg, version string) []string {
	args := []string{"build", "-trimpath", "-buildvcs=false"}
	switch {
	case pkg != PkgLauncher:
		return append(args, "-ldflags", "-s -w -X main.version="+version)
	case version == ToolVersion:
		return append(args, "-ldflags", "-s -w")
	default:
		return append(args, "-ldflags", "-s -w -X "+LauncherVersionVar+"="+version)
	}
}

// BuildX returns pkg built as name (a file name under Out), with each of x given to the
// linker as -X (e.g. "github.com/novox/mesh-host/launcher.Version=v9.0.0"): a launcher of
// another launcher version, or a fixture's mode.
func (b *Builder) BuildX(ctx context.Context, pkg, name string, x ...string) (string, error) {
	key := pkg + "@" + name
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.built[key]; ok {
		return p, nil
	}
	out := filepath.Join(b.Out, name)
	flags := "-s -w"
	for _, v := range x {
		flags += " -X " + v
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", flags, "-o", out, pkg)
	cmd.Dir = b.Src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s (%s): %w\n%s", pkg, name, err, stderr.String())
	}
	b.built[key] = out
	return out, nil
}

// LauncherVersionX is the -X that stamps a launcher version into mesh-launcher.
const LauncherVersionX = LauncherVersionVar + "="

// BuildStory builds what the demo and `mesh-lab up` run: mesh-release, and for each of arches
// (GOARCH names; none is this machine's) the launcher and the host as v1.0.0 (installed); with
// releases, also the host as v1.1.0 (a good release) and broken as v1.2.0 (a broken one:
// PkgCrashRun, or PkgCrashArm64) — what a fleet of one platform ships (a mixed fleet's releases
// are built from the tree by mesh-release itself, Release.BuildTree).
func (b *Builder) BuildStory(ctx context.Context, arches []string, broken string, releases bool) error {
	if _, err := b.Build(ctx, PkgRelease, ToolVersion); err != nil {
		return err
	}
	if len(arches) == 0 {
		arches = []string{runtime.GOARCH}
	}
	for _, a := range arches {
		bins := []struct{ pkg, version string }{{PkgLauncher, ToolVersion}, {PkgHost, "v1.0.0"}}
		if releases {
			bins = append(bins, struct{ pkg, version string }{PkgHost, "v1.1.0"}, struct{ pkg, version string }{broken, "v1.2.0"})
		}
		for _, x := range bins {
			if _, err := b.BuildFor(ctx, x.pkg, x.version, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// ErrNoHistory is BuildAt's error when the checkout does not hold the commit asked for (a
// shallow clone, or a tree copied without .git).
var ErrNoHistory = errors.New("the checkout does not hold that commit")

// BuildAt returns pkg built as version from the tree of commit rev (git archive into a
// directory under Out): an earlier version of this project, for tests of an upgrade from it.
func (b *Builder) BuildAt(ctx context.Context, rev, pkg, version string) (string, error) {
	key := pkg + "@" + version + "@" + rev
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.built[key]; ok {
		return p, nil
	}
	verify := exec.CommandContext(ctx, "git", "-C", b.Src, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err := verify.Run(); err != nil {
		return "", fmt.Errorf("%w: %s (%v)", ErrNoHistory, rev, err)
	}
	src := filepath.Join(b.Out, "src-"+rev)
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		tmp := src + ".tmp"
		os.RemoveAll(tmp)
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return "", err
		}
		archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", b.Src, rev, tmp)
		if out, err := archive.CombinedOutput(); err != nil {
			return "", fmt.Errorf("git archive %s: %w\n%s", rev, err, out)
		}
		if err := os.Rename(tmp, src); err != nil {
			return "", err
		}
	}
	if b.Progress != nil {
		fmt.Fprintf(b.Progress, "  go build %s as %s from %s …\n", pkg, version, rev)
	}
	out := filepath.Join(b.Out, filepath.Base(pkg)+"-"+version+"-"+rev)
	cmd := exec.CommandContext(ctx, "go", append(BuildArgs(pkg, version), "-o", out, pkg)...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s (%s) at %s: %w\n%s", pkg, version, rev, err, stderr.String())
	}
	b.built[key] = out
	return out, nil
}
