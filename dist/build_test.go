package dist

import (
	"bytes"
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

// artifacts is what one `make package` wrote.
type artifacts struct {
	repo    string // the repository root, for the source files the package must carry unchanged
	deb     string
	tarball string
	topDir  string // the tarball's single top-level directory

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
// which is most of this package's run time. The release tool is packaged for this machine's
// architecture only (RELEASE_ARCHS): the other is the same recipe, compiled cold for minutes.
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
	cmd := exec.Command("make", "-C", repo, "package", "OUT="+out, "VERSION="+testVersion, "ARCH="+runtime.GOARCH, "RELEASE_ARCHS="+runtime.GOARCH)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return artifacts{}, fmt.Errorf("make package: %w\n%s", err, log.String())
	}
	top := "mesh-host-" + testVersion + "-linux-" + runtime.GOARCH
	a := artifacts{
		repo:    repo,
		deb:     filepath.Join(out, "mesh-host_"+debVersion+"_"+debArch()+".deb"),
		tarball: filepath.Join(out, top+".tar.gz"),
		topDir:  top,
		out:     out,

		releaseDeb:     filepath.Join(out, "mesh-release_"+debVersion+"_"+debArch()+".deb"),
		releaseTarball: filepath.Join(out, "mesh-release-"+testVersion+"-linux-"+runtime.GOARCH+".tar.gz"),
		releaseTop:     "mesh-release-" + testVersion + "-linux-" + runtime.GOARCH,
		darwin:         filepath.Join(out, "mesh-release-"+testVersion+"-darwin-arm64"),
	}
	for _, f := range []string{a.deb, a.tarball, a.releaseDeb, a.releaseTarball, a.darwin} {
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
	if a, ok := map[string]string{
		"arm": "armhf", "386": "i386", "ppc64le": "ppc64el", "mips64le": "mips64el", "mipsle": "mipsel",
	}[runtime.GOARCH]; ok {
		return a
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
