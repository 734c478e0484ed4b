package rollback

import (
	"context"
	_ "crypto/sha256" // go-digest needs the hash registered
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/opencontainers/go-digest"
)

// Candidate is one version directory as Choose sees it.
type Candidate struct {
	Version  string
	Bad      bool   // marked bad in the records
	Mismatch string // non-empty: why its binary cannot be trusted (changed since first seen, missing)
}

// choose names the version to run: the newest candidate that is not marked bad and whose binary
// still matches the digest recorded for it. Candidates are newest first (ScanVersions' order).
// It returns "" when there is none. This is the rule; the launcher and host both call it through
// Records.Choose.
func choose(candidates []Candidate) string {
	for _, c := range candidates {
		if !c.Bad && c.Mismatch == "" {
			return c.Version
		}
	}
	return ""
}

// Choice is Choose's answer with what it passed over, newest first, and why.
type Choice struct {
	Version string
	Skipped []Candidate
}

// Choose scans ROOT/versions, records the digest of any version seen for the first time, and
// applies Choose. Only versions newer than the answer are checked against their digest (older
// ones do not matter to the choice), so the common case hashes one file, once per process.
func (r *Records) Choose(ctx context.Context, root string) (Choice, error) {
	return r.ChooseWithout(ctx, root, "")
}

// ChooseWithout is what Choose would name were version marked bad, without marking it: the host
// asks it before marking the withdrawn version it runs bad, so that it never leaves the launcher
// nothing to run. version "" passes over nothing.
func (r *Records) ChooseWithout(ctx context.Context, root, version string) (Choice, error) {
	dirs, err := ScanVersions(root)
	if err != nil {
		return Choice{}, err
	}
	var ch Choice
	for _, d := range dirs {
		if !d.Version {
			continue
		}
		c, err := r.candidate(ctx, root, d.Name)
		if err != nil {
			return Choice{}, err
		}
		if d.Name == version {
			c.Bad = true
		}
		if choose([]Candidate{c}) != "" {
			ch.Version = c.Version
			return ch, nil
		}
		ch.Skipped = append(ch.Skipped, c)
	}
	return ch, nil
}

// candidate looks one version up: bad in the records, and its binary against the recorded digest
// (recording it if this is the first time the version is seen).
func (r *Records) candidate(ctx context.Context, root, version string) (Candidate, error) {
	c := Candidate{Version: version}
	var recorded sql.NullString
	var badAt sql.NullInt64
	err := r.db.QueryRowContext(ctx, `SELECT digest, bad_at FROM versions WHERE version = ?`, version).Scan(&recorded, &badAt)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return c, r.wrap("look up "+version, err)
	}
	if badAt.Valid {
		c.Bad = true
		return c, nil
	}
	got, err := r.BinaryDigest(BinaryPath(root, version))
	if err != nil {
		c.Mismatch = fmt.Sprintf("no usable binary: %v", err)
		return c, nil
	}
	if !recorded.Valid {
		// Nothing recorded it on the way in: someone copied it there by hand.
		err := r.RecordVersion(ctx, version, got, Provenance{Source: SourceFound})
		if dc := (*DigestConflict)(nil); errors.As(err, &dc) { // recorded meanwhile, other bytes
			c.Mismatch = fmt.Sprintf("binary changed since it was first seen (recorded %s, now %s)", dc.Recorded, got)
			return c, nil
		}
		return c, err
	}
	if digest.Digest(recorded.String) != got {
		c.Mismatch = fmt.Sprintf("binary changed since it was first seen (recorded %s, now %s)", recorded.String, got)
	}
	return c, nil
}

// fileKey tells a file apart from every other, and from itself changed: device, inode, size
// and change times (fileIdentity reads it, where the platform allows).
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// BinaryDigest is the sha256 digest of the file at path, cached by the file's identity
// (device, inode, size, change times) so an unchanged binary is hashed once per process.
func (r *Records) BinaryDigest(path string) (digest.Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	key, known := fileIdentity(fi)
	if known {
		r.mu.Lock()
		d, hit := r.hashes[key]
		r.mu.Unlock()
		if hit {
			return digest.Digest(d), nil
		}
	}
	dg := digest.SHA256.Digester()
	if _, err := io.Copy(dg.Hash(), f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	d := dg.Digest()
	if known {
		r.mu.Lock()
		r.hashes[key] = d.String()
		r.mu.Unlock()
	}
	return d, nil
}
