package dist

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// testVersion is a prerelease on purpose: nfpm must turn it into the Debian version
// debVersion, which sorts before 1.2.3 as the semantic version does.
const (
	testVersion = "v1.2.3-dev.4"
	debVersion  = "1.2.3~dev.4"
)

// nodeArch is one architecture the node is packaged for.
type nodeArch struct {
	goarch  string      // GOARCH (arm is built GOARM=7)
	name    string      // Debian's name for it, in every artifact's name
	machine elf.Machine // the binaries' ELF machine
	uname   string      // what `uname -m` says on such a machine
}

// nodeArchs are the architectures `make package` packages the node for (its ARCHS).
var nodeArchs = []nodeArch{
	{"amd64", "amd64", elf.EM_X86_64, "x86_64"},
	{"arm64", "arm64", elf.EM_AARCH64, "aarch64"},
	{"arm", "armhf", elf.EM_ARM, "armv7l"},
}

// nodePackage is the node's .deb and tarball for one architecture.
type nodePackage struct {
	nodeArch
	deb     string
	tarball string
	topDir  string // the tarball's single top-level directory
}

// artifacts is what one `make package` wrote.
type artifacts struct {
	repo    string // the repository root, for the source files the package must carry unchanged
	deb     string // the node's .deb for this machine's architecture
	tarball string
	topDir  string        // the tarball's single top-level directory
	nodes   []nodePackage // the node's packages for every architecture, this machine's among them

	out            string // OUT: everything make package wrote
	releaseDeb     string // mesh-release's .deb for this machine's architecture
	releaseTarball string
	releaseTop     string // its single top-level directory
	darwin         string // mesh-release for darwin/arm64
}

// outDir holds every test's build; TestMain removes it.
var outDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mesh-dist-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	outDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build runs `make package` once for the whole test binary: it builds the binaries and nfpm,
// which is most of this package's run time. The node is packaged for every architecture (the
// default ARCHS), all checked from this one build; the release tool for this machine's only
// (RELEASE_ARCHS): the other is the same recipe, compiled for minutes more.
// It has no deadline of its own: a cold build on a loaded machine takes what it takes (over 10
// minutes on a busy 2-core one), and only go test's -timeout bounds it.
var build = sync.OnceValues(func() (artifacts, error) {
	repo, err := filepath.Abs("..")
	if err != nil {
		return artifacts{}, err
	}
	if _, err := exec.LookPath("make"); err != nil {
		return artifacts{}, fmt.Errorf("make is not installed: %w", err)
	}
	out := filepath.Join(outDir, "out")
	cmd := exec.Command("make", "-C", repo, "package", "OUT="+out, "VERSION="+testVersion, "RELEASE_ARCHS="+runtime.GOARCH)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return artifacts{}, fmt.Errorf("make package: %w\n%s", err, log.String())
	}
	a := artifacts{
		repo: repo,
		out:  out,

		releaseDeb:     filepath.Join(out, "mesh-release_"+debVersion+"_"+debArch()+".deb"),
		releaseTarball: filepath.Join(out, "mesh-release-"+testVersion+"-linux-"+runtime.GOARCH+".tar.gz"),
		releaseTop:     "mesh-release-" + testVersion + "-linux-" + runtime.GOARCH,
		darwin:         filepath.Join(out, "mesh-release-"+testVersion+"-darwin-arm64"),
	}
	files := []string{a.releaseDeb, a.releaseTarball, a.darwin}
	for _, arch := range nodeArchs {
		top := "mesh-host-" + testVersion + "-linux-" + arch.name
		p := nodePackage{
			nodeArch: arch,
			deb:      filepath.Join(out, "mesh-host_"+debVersion+"_"+arch.name+".deb"),
			tarball:  filepath.Join(out, top+".tar.gz"),
			topDir:   top,
		}
		a.nodes = append(a.nodes, p)
		if arch.goarch == runtime.GOARCH {
			a.deb, a.tarball, a.topDir = p.deb, p.tarball, p.topDir
		}
		files = append(files, p.deb, p.tarball)
	}
	if a.deb == "" {
		return artifacts{}, fmt.Errorf("the node is not packaged for this machine's architecture, %s", runtime.GOARCH)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return artifacts{}, fmt.Errorf("make package did not write %s: %w\n%s", f, err, log.String())
		}
	}
	return a, nil
})

// built returns the artifacts, failing the test when `make package` failed.
func built(t *testing.T) artifacts {
	t.Helper()
	a, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// debArch is Debian's name for the architecture the package is built for, where it is not
// GOARCH's.
func debArch() string {
	for _, a := range nodeArchs {
		if a.goarch == runtime.GOARCH {
			return a.name
		}
	}
	return runtime.GOARCH
}

// run runs a command and returns its stdout, failing the test with its output when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %q: %v\n%s%s", name, args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
