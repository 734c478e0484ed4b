// Package truststore keeps the roots of trust a node accepted on disk, under ROOT/trust.
//
// One file per root, ROOT/trust/root.<version>.json, each the root as published (wire.Root
// Marshal), written temp + fsync + rename before the node uses it (issue 29 §2): a crash leaves
// the chain the node held or the chain with the new root, whole. The directory is 0700 (only the
// host's user changes what it trusts); the files are 0644 (a root is public, and an operator may
// copy one). Files are never rewritten: a version once stored is the node's for good.
package truststore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/wire"
)

// DirName is the directory under the host's root that holds the roots.
const DirName = "trust"

// Modes of the directory and of each root file.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o644
)

// maxFiles bounds how many root files Load reads: a node holds one per rotation.
const maxFiles = 4096

// Dir is ROOT/trust.
func Dir(root string) string { return filepath.Join(root, DirName) }

// FileName is a root's file name: root.4.json.
func FileName(version uint64) string { return wire.RootKey(version) + ".json" }

// Load reads every root stored under ROOT/trust, oldest first; none (or no directory) is an
// empty list. A file that does not parse, or whose version is not its name's, is refused by
// name: never dropped, or the node would quietly trust an older root than it accepted.
// Temporary files a crash left (.tmp-*) are ignored. Load does not verify the chain: that is
// wire.TrustFromRoots (Trust does both).
func Load(root string) ([]wire.Root, error) {
	dir := Dir(root)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the trust store: %w", err)
	}
	var roots []wire.Root
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			continue
		}
		version, ok := parseName(name)
		if !ok {
			return nil, fmt.Errorf("trust store %s: %q is not a root file (root.<version>.json); move it away", dir, name)
		}
		if len(roots) == maxFiles {
			return nil, fmt.Errorf("trust store %s: more than %d roots", dir, maxFiles)
		}
		r, err := readRoot(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if r.Version != version {
			return nil, fmt.Errorf("trust store: %s holds root v%d, not v%d", filepath.Join(dir, name), r.Version, version)
		}
		roots = append(roots, r)
	}
	slices.SortFunc(roots, func(a, b wire.Root) int {
		switch {
		case a.Version < b.Version:
			return -1
		case a.Version > b.Version:
			return 1
		}
		return 0
	})
	return roots, nil
}

// parseName reads the version out of root.<n>.json.
func parseName(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "root.")
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, ".json"); !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != s {
		return 0, false
	}
	return n, true
}

// readRoot reads and parses one root file, the error naming it.
func readRoot(path string) (wire.Root, error) {
	f, err := os.Open(path)
	if err != nil {
		return wire.Root{}, fmt.Errorf("trust store: %w", err)
	}
	defer f.Close()
	max := wire.MaxSignedBytes(wire.KindRoot)
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return wire.Root{}, fmt.Errorf("trust store: read %s: %w", path, err)
	}
	if len(b) > max {
		return wire.Root{}, fmt.Errorf("trust store: %s is over %d bytes, larger than any root", path, max)
	}
	r, err := wire.ParseRoot(b)
	if err != nil {
		return wire.Root{}, fmt.Errorf("trust store: %s is refused: %w", path, err)
	}
	return r, nil
}

// Save stores r as ROOT/trust/root.<version>.json (temp, fsync, rename, directory fsynced),
// creating the directory. Call it after accepting r (wire.Trust.Advance or PinnedTrust) and
// before using it. Storing a version the store already holds is a no-op when it is the same
// root and refused when it is another: a stored version is never replaced.
func Save(root string, r wire.Root) error {
	dir := Dir(root)
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("trust store: %w", err)
	}
	path := filepath.Join(dir, FileName(r.Version))
	if have, err := readRoot(path); err == nil {
		if bytes.Equal(have.SigningText(), r.SigningText()) {
			return nil
		}
		return fmt.Errorf("trust store: %s holds another root v%d (%s, not %s); a stored version is never replaced", path, r.Version, have.Fingerprint(), r.Fingerprint())
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := atomicfile.WriteFile(path, r.Marshal(), FileMode); err != nil {
		return fmt.Errorf("trust store: write %s: %w", path, err)
	}
	return nil
}

// Trust builds the node's wire.Trust: the roots stored under ROOT/trust, their chain verified
// again (wire.TrustFromRoots), or, with none stored, host.json's keys (wire.LegacyTrust):
// releaseKeys from trusted_keys, targetKeys from trusted_target_keys else trusted_keys
// (config.TargetKeys). A store that does not load or verify is an error, never a fall back to
// the host.json keys: a node does not go back.
func Trust(root string, releaseKeys, targetKeys []string) (wire.Trust, error) {
	roots, err := Load(root)
	if err != nil {
		return wire.Trust{}, err
	}
	if len(roots) > 0 {
		t, err := wire.TrustFromRoots(roots)
		if err != nil {
			return wire.Trust{}, fmt.Errorf("trust store %s: %w", Dir(root), err)
		}
		return t, nil
	}
	rel, err := wire.ParseTrustedKeys(releaseKeys)
	if err != nil {
		return wire.Trust{}, fmt.Errorf("trusted_keys: %w", err)
	}
	tgt, err := wire.ParseTrustedKeys(targetKeys)
	if err != nil {
		return wire.Trust{}, fmt.Errorf("trusted_target_keys: %w", err)
	}
	return wire.LegacyTrust(rel, tgt), nil
}
