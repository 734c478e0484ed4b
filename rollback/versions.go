package rollback

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/internal/layout"
)

// Dir is one entry of ROOT/versions as found on disk.
type Dir struct {
	Name    string // directory name; for a version, its semantic version
	Version bool   // the name is a version (layout.ValidVersion: "v1.4.0", "v2.0.0-rc.1")
	Staging bool   // a leftover .staging-* directory
}

// ScanVersions lists ROOT/versions: versions newest first, then everything else (ignored by
// Choose, shown by status). A missing versions directory is an empty list.
func ScanVersions(root string) ([]Dir, error) {
	entries, err := os.ReadDir(VersionsDir(root))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read versions directory: %w", err)
	}
	var versions, other []Dir
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, StagingPrefix):
			other = append(other, Dir{Name: name, Staging: true})
		case e.IsDir() && layout.ValidVersion(name):
			versions = append(versions, Dir{Name: name, Version: true})
		default:
			other = append(other, Dir{Name: name})
		}
	}
	sort.Slice(versions, func(i, j int) bool { return semver.Compare(versions[i].Name, versions[j].Name) > 0 })
	return append(versions, other...), nil
}

// CleanStaging removes ROOT/versions/.staging-* and ROOT/launchers/.staging-* directories left
// behind by a crash while staging. One that a Staging holds (an install or a delivery under way
// in another process) is left alone. It runs at launcher and host start, under their locks.
func CleanStaging(root string) ([]string, error) {
	var removed []string
	for _, parent := range []string{VersionsDir(root), LaunchersDir(root)} {
		entries, err := os.ReadDir(parent)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return removed, fmt.Errorf("read %s: %w", parent, err)
		}
		for _, e := range entries {
			path := filepath.Join(parent, e.Name())
			if !strings.HasPrefix(e.Name(), StagingPrefix) || inUse(path) {
				continue
			}
			if err := os.RemoveAll(path); err != nil {
				return removed, fmt.Errorf("remove leftover staging directory %s: %w", path, err)
			}
			rel, _ := filepath.Rel(root, path)
			if parent == VersionsDir(root) {
				rel = e.Name() // versions' leftovers are named as they always were
			}
			removed = append(removed, rel)
		}
	}
	return removed, nil
}

// sortedNewestFirst returns the keys of a version-keyed map in semver order, newest first.
func sortedNewestFirst[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return semver.Compare(out[i], out[j]) > 0 })
	return out
}
