package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/rollback"
)

// fixtures builds testdata/versioned once per (version, mode) into one directory for the run.
var fixtures = struct {
	sync.Mutex
	dir   string
	built map[string]string
}{built: map[string]string{}}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "launcher-fixtures-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtures.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// versioned is a real binary that prints version for `version` (mode "ok"), or fails ("fail"),
// or prints something else ("garbage"). Tests copy it before changing it.
func versioned(t *testing.T, version, mode string) string {
	t.Helper()
	fixtures.Lock()
	defer fixtures.Unlock()
	key := version + "-" + mode
	if p, ok := fixtures.built[key]; ok {
		return p
	}
	out := filepath.Join(fixtures.dir, "versioned-"+key)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+version+" -X main.mode="+mode, "-o", out, "./testdata/versioned")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the versioned fixture: %v\n%s", err, b)
	}
	fixtures.built[key] = out
	return out
}

// copyOf copies src into the test's temp dir with mode and returns its path.
func copyOf(t *testing.T, src string, mode os.FileMode) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "mesh-host")
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileDigest(t *testing.T, path string) digest.Digest {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return digest.FromBytes(b)
}

// entries lists ROOT/versions, to see nothing was left behind.
func entries(t *testing.T, root string) []string {
	t.Helper()
	es, err := os.ReadDir(rollback.VersionsDir(root))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func lookup(t *testing.T, root, version string) (rollback.Recorded, bool) {
	t.Helper()
	r, err := rollback.OpenForHost(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, ok, err := r.Lookup(context.Background(), version)
	if err != nil {
		t.Fatal(err)
	}
	return rec, ok
}

func TestInstallPlacesTheVersionTheBinaryPrintsAndRecordsItInstalledByHand(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root") // not there yet: install makes it, as on a new machine
	file := versioned(t, "v1.2.0", "ok")
	in, err := Install(ctx, root, file, "")
	if err != nil {
		t.Fatal(err)
	}
	want := fileDigest(t, file)
	if in.Version != "v1.2.0" || in.Digest != want || in.Already || in.Chosen != "v1.2.0" || in.From != file {
		t.Errorf("Install = %+v", in)
	}
	bin := rollback.BinaryPath(root, "v1.2.0")
	if got := fileDigest(t, bin); got != want {
		t.Errorf("installed binary is %s, want the file's %s", got, want)
	}
	if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("installed binary mode %v, %v; want 0755", fi.Mode(), err)
	}
	if got := entries(t, root); len(got) != 1 || got[0] != "v1.2.0" {
		t.Errorf("versions/ holds %v, want only v1.2.0 (no staging left)", got)
	}
	rec, ok := lookup(t, root, "v1.2.0")
	if !ok || rec.Digest != want || rec.Provenance != (rollback.Provenance{Source: rollback.SourceInstalled, From: file}) {
		t.Errorf("records hold %+v (known %v); want digest %s, installed from %s", rec, ok, want, file)
	}
	if s := rec.Provenance.String(); s != "installed by hand" {
		t.Errorf("provenance reads %q", s)
	}
	var out bytes.Buffer
	in.WriteText(&out)
	for _, w := range []string{"installed v1.2.0 in " + in.Dir, string(want), "installed by hand from " + file, "v1.2.0 is the version to run: start mesh-launcher"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}

func TestInstallWithTheVersionTheBinaryPrintsPlacesIt(t *testing.T) {
	root := t.TempDir()
	in, err := Install(context.Background(), root, versioned(t, "v1.0.0", "ok"), "v1.0.0")
	if err != nil || in.Version != "v1.0.0" {
		t.Fatalf("Install = %+v, %v", in, err)
	}
	if _, err := os.Stat(rollback.BinaryPath(root, "v1.0.0")); err != nil {
		t.Error(err)
	}
}

func TestInstallingTheSameBytesAgainChangesNothing(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	file := versioned(t, "v1.0.0", "ok")
	if _, err := Install(ctx, root, file, ""); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(rollback.BinaryPath(root, "v1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := Install(ctx, root, copyOf(t, file, 0o755), "v1.0.0") // the same bytes from elsewhere
	if err != nil || !in.Already {
		t.Fatalf("second Install = %+v, %v; want already there", in, err)
	}
	after, err := os.Stat(rollback.BinaryPath(root, "v1.0.0"))
	if err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the installed file was replaced")
	}
	if rec, _ := lookup(t, root, "v1.0.0"); rec.Provenance.From != file {
		t.Errorf("provenance now says %q; the first install's record is kept", rec.Provenance.From)
	}
	if got := entries(t, root); len(got) != 1 {
		t.Errorf("versions/ holds %v", got)
	}
	var out bytes.Buffer
	in.WriteText(&out)
	if !strings.Contains(out.String(), "v1.0.0 is already installed") || !strings.Contains(out.String(), "nothing changed") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestInstallingAnOlderVersionKeepsItAsADirectoryAndSaysTheNewerStaysChosen(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	if _, err := Install(ctx, root, versioned(t, "v1.1.0", "ok"), ""); err != nil {
		t.Fatal(err)
	}
	in, err := Install(ctx, root, versioned(t, "v1.0.0", "ok"), "")
	if err != nil {
		t.Fatal(err)
	}
	if in.Chosen != "v1.1.0" {
		t.Errorf("Chosen = %q, want v1.1.0", in.Chosen)
	}
	if _, err := os.Stat(rollback.BinaryPath(root, "v1.0.0")); err != nil {
		t.Errorf("the older version was not placed: %v", err)
	}
	var out bytes.Buffer
	in.WriteText(&out)
	if !strings.Contains(out.String(), "v1.1.0 stays chosen: it is newer") {
		t.Errorf("output does not say the newer one stays chosen:\n%s", out.String())
	}
}

// Every refusal says what was wrong and leaves versions/ as it was: no version directory, no
// staging, and records that do not name the refused version (unless they did before).
func TestInstallRefuses(t *testing.T) {
	ok := func(t *testing.T) string { return versioned(t, "v1.0.0", "ok") }
	for _, tc := range []struct {
		name    string
		file    func(t *testing.T) string
		version string
		before  func(t *testing.T, root string) // what the root holds already
		says    []string
	}{
		{name: "a file that does not exist", file: func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") },
			says: []string{"nope does not exist"}},
		{name: "a directory", file: func(t *testing.T) string { return t.TempDir() },
			says: []string{"is not a regular file"}},
		{name: "a file that is not executable", file: func(t *testing.T) string { return copyOf(t, ok(t), 0o644) },
			says: []string{"is not executable (mode 0644)"}},
		{name: "a file that is not a program", file: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "notes.txt")
			if err := os.WriteFile(p, []byte("just some text\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}, says: []string{"cannot be executed on this machine (exec format error)"}},
		{name: "a binary that says another version", file: ok, version: "v1.1.0",
			says: []string{"says it is v1.0.0", "not v1.1.0 as --version says", "make build VERSION=v1.1.0"}},
		{name: "a binary that prints no version", file: func(t *testing.T) string { return versioned(t, "v1.0.0", "garbage") },
			says: []string{`printed "hello, world", which is not a canonical semantic version`}},
		{name: "an unstamped binary asked to be a version", file: func(t *testing.T) string { return versioned(t, "v0.0.0-dev", "ok") }, version: "v1.0.0",
			says: []string{"says it is v0.0.0-dev", "not v1.0.0"}},
		{name: "a binary that cannot run", file: func(t *testing.T) string { return versioned(t, "v1.0.0", "fail") },
			says: []string{"version` failed (exit status 1)", "it said: cannot start: missing library"}},
		{name: "an invalid --version", file: ok, version: "1.0",
			says: []string{`--version "1.0" is not a canonical semantic version`}},
		{name: "a version already there with other bytes", file: ok,
			before: func(t *testing.T, root string) {
				placeByHand(t, root, "v1.0.0", []byte("#!/bin/sh\necho v1.0.0\n"))
			},
			says: []string{"v1.0.0 is already installed with other bytes", "a version's bytes never change"}},
		{name: "a version recorded with other bytes, its directory retired", file: ok,
			before: func(t *testing.T, root string) {
				placeByHand(t, root, "v1.0.0", []byte("#!/bin/sh\necho v1.0.0\n"))
				seeAll(t, root)
				if err := os.RemoveAll(rollback.VersionDir(root, "v1.0.0")); err != nil {
					t.Fatal(err)
				}
			},
			says: []string{"this node recorded v1.0.0 as sha256:", "a version's bytes never change"}},
		{name: "a version marked bad here", file: ok,
			before: func(t *testing.T, root string) {
				ctx := context.Background()
				r, _, err := rollback.OpenForLauncher(ctx, root)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if err := r.RecordVersion(ctx, "v1.0.0", fileDigest(t, versioned(t, "v1.0.0", "ok")), rollback.Provenance{Source: rollback.SourceDelivered}); err != nil {
					t.Fatal(err)
				}
				if err := r.MarkBad(ctx, "v1.0.0", "failed 3 times without confirming"); err != nil {
					t.Fatal(err)
				}
			},
			says: []string{"v1.0.0 is marked bad on this node (failed 3 times without confirming)", "would never run"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.before != nil {
				tc.before(t, root)
			}
			before := entries(t, root)
			recBefore, knownBefore := recordOf(t, root, "v1.0.0")
			_, err := Install(context.Background(), root, tc.file(t), tc.version)
			if err == nil {
				t.Fatal("installed; want a refusal")
			}
			for _, w := range tc.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
			if got := entries(t, root); strings.Join(got, " ") != strings.Join(before, " ") {
				t.Errorf("versions/ went from %v to %v", before, got)
			}
			if rec, known := recordOf(t, root, "v1.0.0"); known != knownBefore || rec != recBefore {
				t.Errorf("records of v1.0.0 went from %+v (%v) to %+v (%v)", recBefore, knownBefore, rec, known)
			}
		})
	}
}

// placeByHand puts content in versions/<v>/mesh-host without install, as an operator copying a
// file does.
func placeByHand(t *testing.T, root, version string, content []byte) {
	t.Helper()
	if err := os.MkdirAll(rollback.VersionDir(root, version), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rollback.BinaryPath(root, version), content, 0o755); err != nil {
		t.Fatal(err)
	}
}

// seeAll lets Choose see (and record) what is under versions/.
func seeAll(t *testing.T, root string) {
	t.Helper()
	r, _, err := rollback.OpenForLauncher(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Choose(context.Background(), root); err != nil {
		t.Fatal(err)
	}
}

// recordOf is what the records say of version, or nothing when there are no records yet.
func recordOf(t *testing.T, root, version string) (rollback.Recorded, bool) {
	t.Helper()
	if _, err := os.Stat(rollback.RecordsPath(root)); err != nil {
		return rollback.Recorded{}, false
	}
	return lookup(t, root, version)
}

func TestInstallSaysWhenTheRootIsNotWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes anywhere; lab/install_test.go runs this refusal as an unprivileged user")
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(root, 0o700) })
	_, err := Install(context.Background(), root, versioned(t, "v1.0.0", "ok"), "")
	if err == nil || !strings.Contains(err.Error(), "is not writable by this user") {
		t.Errorf("Install into a read-only root = %v", err)
	}
}

// install.sh --root IMAGE installs into IMAGE/var/lib/mesh-host: the parents install makes
// (var/, var/lib/) are 0755, whatever the umask, and only the root itself is 0700.
func TestInstallOnAMissingRootMakesOnlyTheRootPrivate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		parents []string // made by install, under the image
	}{
		{"an image with nothing in it", []string{"var", "var/lib"}},
		{"an image with var/ already", []string{"var/lib"}},
		{"the root's parent there", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			image := t.TempDir()
			for _, there := range []string{"var", "var/lib"} {
				if !slices.Contains(tc.parents, there) {
					if err := os.Mkdir(filepath.Join(image, there), 0o711); err != nil {
						t.Fatal(err)
					}
				}
			}
			root := filepath.Join(image, "var", "lib", "mesh-host")
			if _, err := Install(t.Context(), root, versioned(t, "v1.0.0", "ok"), ""); err != nil {
				t.Fatal(err)
			}
			want := map[string]os.FileMode{root: 0o700, filepath.Join(image, "var"): 0o711, filepath.Join(image, "var", "lib"): 0o711}
			for _, p := range tc.parents {
				want[filepath.Join(image, p)] = 0o755
			}
			for p, mode := range want {
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != mode {
					t.Errorf("%s: %v %v; want mode %#o", p, fi.Mode(), err, mode)
				}
			}
		})
	}
}
