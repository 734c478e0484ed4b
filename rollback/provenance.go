package rollback

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/novox/mesh-host/internal/text"
	"github.com/opencontainers/go-digest"
)

// Where a version's binary came from, as records.db keeps it (schema 3; decision 0008).
const (
	// SourceInstalled: `mesh-launcher install` put it in place (by hand, or the package's
	// postinst); From is the file it was copied from.
	SourceInstalled = "installed"
	// SourceDelivered: the host fetched it from the bus; SignedBy is the key id that signed
	// its manifest.
	SourceDelivered = "delivered"
	// SourceFound: Choose or status found the directory under versions/ before anything
	// recorded it — someone copied it there by hand, bypassing install's checks.
	SourceFound = "found"
)

// Provenance is where a version's binary came from. The zero value is "not recorded": the
// version was first seen by a build before schema 3.
type Provenance struct {
	Source   string `json:"source"`              // SourceInstalled, SourceDelivered, SourceFound, or "" (not recorded)
	SignedBy string `json:"signed_by,omitempty"` // delivered: the key id of the release key that signed it
	From     string `json:"from,omitempty"`      // installed: the file it was installed from
}

// String says it for a person: "installed by hand", "delivered, signed by key 3f2a…".
func (p Provenance) String() string {
	switch p.Source {
	case SourceInstalled:
		return "installed by hand"
	case SourceDelivered:
		if p.SignedBy == "" {
			return "delivered"
		}
		return "delivered, signed by key " + p.SignedBy
	case SourceFound:
		return "found in versions/ (not installed or delivered)"
	case "":
		return "not recorded"
	}
	return p.Source
}

// provenanceSchema is the records schema that keeps provenance.
const provenanceSchema = 3

// DigestConflict is RecordVersion's error when the records already hold another digest for the
// version: a version's bytes never change, and Choose would never run the new ones.
type DigestConflict struct {
	Version  string
	Recorded digest.Digest // what this node recorded when it first saw the version
	Got      digest.Digest
}

func (e *DigestConflict) Error() string {
	return fmt.Sprintf("this node recorded %s as %s when it first saw it, and these bytes are %s: a version's bytes never change, so they would never run; build them as a new version",
		e.Version, e.Recorded, e.Got)
}

// RecordVersion records a version's binary digest and provenance the first time the version is
// seen. A version already recorded keeps its record (the digest is what later files are checked
// against, the provenance says how it first came); recording the same digest again is no error,
// another one is a *DigestConflict. On records older than schema 3 (an older launcher made
// them, and only a launcher migrates) the provenance is left out.
func (r *Records) RecordVersion(ctx context.Context, version string, d digest.Digest, p Provenance) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("record digest of %s: %w", version, err)
	}
	var err error
	if r.schema >= provenanceSchema {
		_, err = r.db.ExecContext(ctx, `INSERT INTO versions (version, digest, first_seen, source, signed_by, installed_from)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (version) DO NOTHING`,
			version, d.String(), us(r.now()), nullable(p.Source), nullable(p.SignedBy), nullable(p.From))
	} else {
		_, err = r.db.ExecContext(ctx, `INSERT INTO versions (version, digest, first_seen) VALUES (?, ?, ?)
			ON CONFLICT (version) DO NOTHING`, version, d.String(), us(r.now()))
	}
	if err != nil {
		return r.wrap("record digest of "+version, err)
	}
	var recorded string
	if err := r.db.QueryRowContext(ctx, `SELECT digest FROM versions WHERE version = ?`, version).Scan(&recorded); err != nil {
		return r.wrap("read back digest of "+version, err)
	}
	if digest.Digest(recorded) != d {
		return &DigestConflict{Version: version, Recorded: digest.Digest(recorded), Got: d}
	}
	return nil
}

// Recorded is what the records say about one version before it is put in place.
type Recorded struct {
	Digest     digest.Digest
	Bad        bool
	BadReason  string
	Provenance Provenance
}

// Lookup reads the record of version; ok is false when the version was never recorded.
func (r *Records) Lookup(ctx context.Context, version string) (rec Recorded, ok bool, err error) {
	var reason sql.NullString
	var badAt sql.NullInt64
	err = r.db.QueryRowContext(ctx, `SELECT digest, bad_at, bad_reason FROM versions WHERE version = ?`, version).
		Scan(&rec.Digest, &badAt, &reason)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, r.wrap("look up "+version, err)
	}
	rec.Bad, rec.BadReason = badAt.Valid, text.Redact(reason.String)
	if r.schema >= provenanceSchema {
		err = r.db.QueryRowContext(ctx, `SELECT COALESCE(source, ''), COALESCE(signed_by, ''), COALESCE(installed_from, '')
			FROM versions WHERE version = ?`, version).Scan(&rec.Provenance.Source, &rec.Provenance.SignedBy, &rec.Provenance.From)
		if err != nil {
			return rec, false, r.wrap("look up "+version, err)
		}
	}
	return rec, true, nil
}

// provenances reads every version's provenance; none on records older than schema 3.
func (r *Records) provenances(ctx context.Context) (map[string]Provenance, error) {
	out := map[string]Provenance{}
	if r.schema < provenanceSchema {
		return out, nil
	}
	rows, err := r.db.QueryContext(ctx, `SELECT version, COALESCE(source, ''), COALESCE(signed_by, ''), COALESCE(installed_from, '') FROM versions`)
	if err != nil {
		return nil, r.wrap("read provenance", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v string
		var p Provenance
		if err := rows.Scan(&v, &p.Source, &p.SignedBy, &p.From); err != nil {
			return nil, r.wrap("read provenance", err)
		}
		out[v] = p
	}
	return out, r.wrapIf("read provenance", rows.Err())
}

func nullable(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
