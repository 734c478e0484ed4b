package rollback

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

func TestScanVersionsTakesOnlyCanonicalSemverDirectoriesForVersions(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"v1.4.0", true},
		{"v0.0.0", true},
		{"v2.0.0-rc.1", true},
		{"v10.20.30", true},
		{"1.2.0", false},
		{"v1.2", false},
		{"v1", false},
		{"latest", false},
		{".staging-x", false},
		{"v1.2.0+build.5", false},
		{"V1.2.0", false},
		{"v01.2.0", false},
	}
	root := newRoot(t)
	for _, tt := range tests {
		if err := os.Mkdir(filepath.Join(VersionsDir(root), tt.name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dirs, err := ScanVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	isVersion := map[string]bool{}
	for _, d := range dirs {
		isVersion[d.Name] = d.Version
	}
	for _, tt := range tests {
		if got := isVersion[tt.name]; got != tt.want {
			t.Errorf("directory %q taken for a version: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestScanVersionsListsVersionsNewestFirstThenEverythingElse(t *testing.T) {
	root := newRoot(t)
	for _, v := range []string{"v1.9.0", "v1.10.0", "v1.10.0-rc.1", "v0.1.0"} {
		stage(t, root, v, "")
	}
	for _, d := range []string{"1.2.0", "v1.2", ".staging-abc", "latest"} {
		if err := os.MkdirAll(filepath.Join(VersionsDir(root), d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(VersionsDir(root), "v9.0.0"), []byte("a file, not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ScanVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []Dir{
		{Name: "v1.10.0", Version: true},
		{Name: "v1.10.0-rc.1", Version: true},
		{Name: "v1.9.0", Version: true},
		{Name: "v0.1.0", Version: true},
		{Name: ".staging-abc", Staging: true},
		{Name: "1.2.0"},
		{Name: "latest"},
		{Name: "v1.2"},
		{Name: "v9.0.0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ScanVersions =\n%+v\nwant\n%+v", got, want)
	}
}

func TestScanVersionsOfMissingDirectoryIsEmpty(t *testing.T) {
	got, err := ScanVersions(t.TempDir())
	if err != nil || len(got) != 0 {
		t.Errorf("ScanVersions = %v, %v; want empty, nil", got, err)
	}
}

func TestScanVersionsFailsWhenVersionsIsNotADirectory(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(VersionsDir(root), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ScanVersions(root); err == nil {
		t.Error("ScanVersions of a versions file succeeded, want an error")
	}
}

func TestCleanStagingRemovesOnlyStagingDirectories(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	stage(t, root, "latest", "")
	stage(t, root, ".staging-123", "half a binary")
	if err := os.MkdirAll(filepath.Join(VersionsDir(root), ".staging-456", "deep", "er"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(VersionsDir(root), ".stage-not-ours"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	removed, err := CleanStaging(root)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{".staging-123", ".staging-456"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if got, want := dirNames(t, root), []string{".stage-not-ours", "latest", "v1.0.0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	if !exists(t, BinaryPath(root, "v1.0.0")) {
		t.Error("v1.0.0's binary is gone")
	}
}

func TestCleanStagingWithNothingToCleanRemovesNothing(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	removed, err := CleanStaging(root)
	if err != nil || len(removed) != 0 {
		t.Errorf("CleanStaging = %v, %v; want nothing removed", removed, err)
	}
	if removed, err := CleanStaging(t.TempDir()); err != nil || len(removed) != 0 {
		t.Errorf("CleanStaging of a root without versions = %v, %v", removed, err)
	}
}

func TestLayoutPathsAreUnderTheRoot(t *testing.T) {
	root := "/r"
	for got, want := range map[string]string{
		VersionsDir(root):          "/r/versions",
		VersionDir(root, "v1.0.0"): "/r/versions/v1.0.0",
		BinaryPath(root, "v1.0.0"): "/r/versions/v1.0.0/mesh-host",
		RecordsPath(root):          "/r/records.db",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}
