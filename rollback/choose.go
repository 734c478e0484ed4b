package rollback

import (
	"context"
	_ "crypto/sha256" // go-digest needs the hash registered
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

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
	// Held is set by ChooseToStart only: Version is the version that waits for its window,
	// and Held.Version the newer one Choose names.
	Held *Held
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
// (recording it if this is the first time the version is seen). A binary whose file identity is
// the one recorded beside the digest on this boot is not hashed again (decision 0013): whoever
// hashed it last, the host before it stood aside or this process, left that proof.
func (r *Records) candidate(ctx context.Context, root, version string) (Candidate, error) {
	c := Candidate{Version: version}
	var recorded, verified sql.NullString
	var badAt sql.NullInt64
	q := `SELECT digest, bad_at, NULL FROM versions WHERE version = ?`
	if r.schema >= verifiedSchema {
		q = `SELECT digest, bad_at, verified_as FROM versions WHERE version = ?`
	}
	err := r.db.QueryRowContext(ctx, q, version).Scan(&recorded, &badAt, &verified)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return c, r.wrap("look up "+version, err)
	}
	if badAt.Valid {
		c.Bad = true
		return c, nil
	}
	b, err := r.openBinary(BinaryPath(root, version))
	if err != nil {
		c.Mismatch = fmt.Sprintf("no usable binary: %v", err)
		return c, nil
	}
	defer b.f.Close()
	proof := b.proof(r.boot().ID)
	if recorded.Valid && proof != "" && verified.String == proof {
		return c, nil // these bytes matched the digest, and the file has not changed since
	}
	got, err := r.digest(b)
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
		if err != nil {
			return c, err
		}
		r.recordVerified(ctx, version, got, proof)
		return c, nil
	}
	if digest.Digest(recorded.String) != got {
		c.Mismatch = fmt.Sprintf("binary changed since it was first seen (recorded %s, now %s)", recorded.String, got)
		return c, nil
	}
	if proof != verified.String {
		r.recordVerified(ctx, version, got, proof)
	}
	return c, nil
}

// recordVerified keeps proof beside version's digest, for the records' other readers. It is
// only a saving: where it cannot be written (records older than schema 4, a read-only
// reader, a busy file) the next reader hashes the binary instead, so a failure is not one.
func (r *Records) recordVerified(ctx context.Context, version string, d digest.Digest, proof string) {
	if proof == "" || r.schema < verifiedSchema {
		return
	}
	// Only beside the digest these bytes matched: never a proof for a digest recorded meanwhile.
	_, _ = r.db.ExecContext(ctx, `UPDATE versions SET verified_as = ? WHERE version = ? AND digest = ?`, proof, version, d.String())
}

// verifiedSchema is the records schema that keeps the proof of a verified binary.
const verifiedSchema = 4

// fileKey tells a file apart from every other, and from itself changed: device, inode, size
// and change times (fileIdentity reads it, where the platform allows).
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// settleWindow is how old a file's last change (its ctime) must be before its identity is
// trusted to stand for its bytes. The kernel stamps a change with a clock that advances once a
// tick (at most 10 ms), so a write in the same tick as the last change could leave every time
// unchanged; once a tick has passed since the last change, any later one stamps a later ctime
// (racy git's problem, solved the same way). A file whose times have no sub-second part sits on
// a filesystem that keeps whole seconds (or two, FAT), and needs coarseSettleWindow.
const (
	settleWindow       = 20 * time.Millisecond
	coarseSettleWindow = 2 * time.Second
)

// unsettledFor is how long after now the key can first be trusted; <= 0: it can now.
func (k fileKey) unsettledFor(now time.Time) time.Duration {
	w := settleWindow
	if k.ctime%int64(time.Second) == 0 && k.mtime%int64(time.Second) == 0 {
		w = coarseSettleWindow
	}
	return time.Unix(0, k.ctime).Add(w).Sub(now)
}

// binary is an open binary and what its identity says about it.
type binary struct {
	f       *os.File
	path    string
	key     fileKey
	trusted bool // key stands for the bytes: any change to them changes it
}

// proof is what records.db keeps beside a digest these bytes matched: the file's identity and
// the boot it holds on (after a reboot, or where the identity is unknown, it is hashed again).
func (b binary) proof(bootID string) string {
	if !b.trusted || bootID == "" {
		return ""
	}
	k := b.key
	return fmt.Sprintf("boot=%s dev=%d ino=%d size=%d mtime=%d ctime=%d", bootID, k.dev, k.ino, k.size, k.mtime, k.ctime)
}

// openBinary opens the regular file at path and reads its identity. A file changed less than
// settleWindow ago is waited for (a binary just staged is checked a moment later, which is
// before its host stands aside, not during it); one still changing, or on a filesystem of whole
// seconds, is hashed without trusting its identity.
func (r *Records) openBinary(path string) (binary, error) {
	f, err := os.Open(path)
	if err != nil {
		return binary{}, err
	}
	b := binary{f: f, path: path}
	for try := 0; ; try++ {
		before := time.Now() // the kernel's clock, not r.now: ctime is stamped by it
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return binary{}, err
		}
		if !fi.Mode().IsRegular() {
			f.Close()
			return binary{}, fmt.Errorf("%s is not a regular file", path)
		}
		var known bool
		if b.key, known = fileIdentity(fi); !known {
			return b, nil
		}
		wait := b.key.unsettledFor(before)
		if wait <= 0 {
			b.trusted = true
			return b, nil
		}
		if try > 0 || wait > settleWindow {
			return b, nil
		}
		time.Sleep(wait)
	}
}

// digest is b's sha256 digest: from the per-process cache when its identity is trusted and was
// hashed before, else read whole.
func (r *Records) digest(b binary) (digest.Digest, error) {
	if b.trusted {
		r.mu.Lock()
		d, hit := r.hashes[b.key]
		r.mu.Unlock()
		if hit {
			return digest.Digest(d), nil
		}
	}
	r.mu.Lock()
	r.hashed++
	r.mu.Unlock()
	dg := digest.SHA256.Digester()
	if _, err := io.Copy(dg.Hash(), b.f); err != nil {
		return "", fmt.Errorf("hash %s: %w", b.path, err)
	}
	d := dg.Digest()
	if b.trusted {
		r.mu.Lock()
		r.hashes[b.key] = d.String()
		r.mu.Unlock()
	}
	return d, nil
}

// BinaryDigest is the sha256 digest of the file at path, cached by the file's identity
// (device, inode, size, change times) so an unchanged binary is hashed once per process.
func (r *Records) BinaryDigest(path string) (digest.Digest, error) {
	b, err := r.openBinary(path)
	if err != nil {
		return "", err
	}
	defer b.f.Close()
	return r.digest(b)
}
