package meshtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// historyBuilds holds the host built at revisions of this repository, once per test binary:
// by revision and version, the binary's bytes or why it could not be built.
var historyBuilds = struct {
	sync.Mutex
	bin map[string][]byte
	err map[string]error
}{bin: map[string][]byte{}, err: map[string]error{}}

// HostAt builds the real host (./host/cmd/mesh-host) from the tree of git revision rev of the
// repository at root, as releases are built (release/build.GoBuild: CGO_ENABLED=0 GOOS=linux,
// -trimpath, -ldflags "-s -w -X main.version=VERSION"), stamped version, and returns its bytes.
// The tree is exported with `git archive` into a temporary directory: the repository, its
// worktrees and its index are not touched. Each (rev, version) is built once per test binary.
func HostAt(root, rev, version string) ([]byte, error) {
	historyBuilds.Lock()
	defer historyBuilds.Unlock()
	key := rev + " " + version
	if bin, ok := historyBuilds.bin[key]; ok {
		return bin, nil
	}
	if err, ok := historyBuilds.err[key]; ok {
		return nil, err
	}
	bin, err := hostAt(root, rev, version)
	if err != nil {
		historyBuilds.err[key] = err
		return nil, err
	}
	historyBuilds.bin[key] = bin
	return bin, nil
}

func hostAt(root, rev, version string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "meshtest-host-at-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var tarball, stderr bytes.Buffer
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	archive.Stdout, archive.Stderr = &tarball, &stderr
	if err := archive.Run(); err != nil {
		return nil, fmt.Errorf("git archive %s: %v %s", rev, err, strings.TrimSpace(stderr.String()))
	}
	untar := exec.Command("tar", "-x", "-C", dir)
	untar.Stdin = &tarball
	if out, err := untar.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("untar %s: %v %s", rev, err, out)
	}
	out := filepath.Join(dir, "mesh-host")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", out, "./host/cmd/mesh-host")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build the host at %s: %v\n%s", rev, err, strings.TrimSpace(string(b)))
	}
	return os.ReadFile(out)
}

// Commits is how many commits HEAD of the repository at root has, or an error when root is no
// git checkout (a source tarball).
func Commits(root string) (int, error) {
	out, err := exec.Command("git", "-C", root, "rev-list", "--count", "HEAD").Output()
	if err != nil {
		return 0, fmt.Errorf("no git history at %s: %v", root, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}
