// Package apply makes the machine match a declaration, removing only what it created that is no
// longer declared.
//
// It takes each resource in order through its kind's Applier (inspect what is there, change only
// what differs, inspect again as the read-back), recording what it applied only after it worked,
// then removing — in reverse order — what it applied before and is no longer declared, and never
// anything it did not create. The drift check is the same pass: a resource found differing from the
// spec it was last applied with has drifted.
package apply

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/novox/mesh-host/wire"
)

// Applier is one resource kind's knowledge of the machine. Its resources arrive with
// r.Parsed set to the kind's spec type (*wire.FileSpec for "file", …), already checked by the
// declaration's parser.
type Applier interface {
	// Inspect reads the machine and returns how it differs from r's spec, one short line per
	// difference ("mode is 0644, declared 0600"); none means r is in its declared state. It
	// changes nothing: plan and the read-back run it alone.
	Inspect(ctx context.Context, r wire.Resource) ([]string, error)
	// Apply changes what differs from r's spec and nothing else. created says the thing did
	// not exist before (the host may then remove it when it is no longer declared). The engine
	// inspects again afterwards: that is the read-back, and a difference left fails the step.
	Apply(ctx context.Context, r wire.Resource) (created bool, err error)
	// Remove is called for a resource the host applied earlier and that is no longer declared.
	// It removes what the host created (o.Created) and leaves anything else as it is, saying
	// which in its result: "removed", or "forgotten" with why.
	Remove(ctx context.Context, o Owned) (string, error)
}

// BatchApplier is an Applier that applies a run of its kind's resources at once, so that what
// makes them durable is paid once per run rather than per resource (host/apply/files: every
// file written, then each synced, then each renamed into place, then each directory synced
// once). The engine gives it runs of consecutive resources of its kind that differ from their
// specs and name no path twice, and records them only after ApplyBatch returned.
type BatchApplier interface {
	Applier
	// ApplyBatch applies rs in order, as Apply would each, and returns created for the ones
	// applied: all of rs, or, with err, the ones before the first that failed — those are in
	// place and durable; the one that failed and those after it are not in place.
	ApplyBatch(ctx context.Context, rs []wire.Resource) (created []bool, err error)
}

// Applied is a resource applied and read back, to be recorded (BatchLedger).
type Applied struct {
	Resource wire.Resource
	Created  bool
	At       time.Time
}

// BatchLedger is a Ledger that records a run of resources in one transaction (one sync of
// store.db instead of one per resource).
type BatchLedger interface {
	// RecordAll records each of rs as Record does; on error none is recorded.
	RecordAll(ctx context.Context, rs []Applied) error
}

// Appliers holds the applier of each kind.
type Appliers map[string]Applier

// Owned is a resource the host applied and owns: the spec it last applied, whether the host
// created it, and the order it was first applied in (removal runs in reverse).
type Owned struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Spec      json.RawMessage `json:"spec"`
	Parsed    any             `json:"-"` // Spec decoded, as in wire.Resource
	Created   bool            `json:"created"`
	Seq       int64           `json:"seq"`
	AppliedAt time.Time       `json:"applied_at"`
}

// Resource returns o as the resource it was applied as.
func (o Owned) Resource() wire.Resource {
	return wire.Resource{Type: o.Type, ID: o.ID, Spec: o.Spec, Parsed: o.Parsed}
}

// Ledger is what the host knows it owns (host/store keeps it in store.db).
type Ledger interface {
	// Owned returns every owned resource, in the order first applied, specs parsed.
	Owned(ctx context.Context) ([]Owned, error)
	// Record notes that r was applied and read back; created is kept from the first record.
	Record(ctx context.Context, r wire.Resource, created bool, at time.Time) error
	// Drop forgets a resource removed or forgotten.
	Drop(ctx context.Context, typ, id string) error
}

// Blobs gives the content a file, archive or package resource names by digest ("sha256:…"),
// verified: over the link from the blobs object store, from a bundle's blobs/ directory.
type Blobs interface {
	Open(ctx context.Context, digest string) (io.ReadCloser, error)
}
