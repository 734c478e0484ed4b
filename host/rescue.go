package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/blobs"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// A rescue (docs/decisions/0048-rescue-derives-the-node-again-from-the-mesh.md) sets the node's
// local state aside and derives it again from the mesh: the declaration fetched anew, what is
// in its declared state adopted as it is, only differences applied, nothing removed.

// RescuedDir is where rescues set the local state aside: ROOT/rescued/<UTC time>/.
func RescuedDir(root string) string { return filepath.Join(root, "rescued") }

// LocalState is what a rescue sets aside, relative to the root: the store (the ledger, the held
// declaration, the history), the applied records, the blob cache and the kept rollout plan.
// Never the versions, records.db or the node's identity (host.json, node.creds, ca.pem, trust/).
var LocalState = []string{store.FileName, store.FileName + "-wal", store.FileName + "-shm", "applied", "blobs", PlanFile}

// PresentLocalState is what of LocalState exists under root.
func PresentLocalState(root string) ([]string, error) {
	var out []string
	for _, name := range LocalState {
		if _, err := os.Lstat(filepath.Join(root, name)); err == nil {
			out = append(out, name)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("rescue: %w", err)
		}
	}
	return out, nil
}

// SetAside moves what exists of LocalState under root into a new ROOT/rescued/<time>/ and
// returns that directory and what it moved. Renames only: a rescue loses nothing.
func SetAside(root string, now time.Time) (dir string, moved []string, err error) {
	names, err := PresentLocalState(root)
	if err != nil {
		return "", nil, err
	}
	dir, err = newRescuedDir(root, now)
	if err != nil {
		return "", nil, err
	}
	for _, name := range names {
		if err := os.Rename(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			return dir, moved, fmt.Errorf("rescue: set %s aside: %w", name, err)
		}
		moved = append(moved, name)
	}
	return dir, moved, syncDirs(dir, root)
}

// newRescuedDir makes ROOT/rescued/<time>/ (0700: the store holds file contents), another name
// when two rescues fall in one millisecond.
func newRescuedDir(root string, now time.Time) (string, error) {
	base := RescuedDir(root)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("rescue: %w", err)
	}
	stamp := now.UTC().Format("20060102T150405.000Z")
	for i := 0; ; i++ {
		dir := filepath.Join(base, stamp)
		if i > 0 {
			dir = fmt.Sprintf("%s.%d", dir, i)
		}
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) || i > 100 {
			return "", fmt.Errorf("rescue: %w", err)
		}
	}
}

func syncDirs(dirs ...string) error {
	for _, d := range dirs {
		f, err := os.Open(d)
		if err != nil {
			return fmt.Errorf("rescue: %w", err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("rescue: sync %s: %w", d, err)
		}
	}
	return nil
}

// VersionCheck is one version under ROOT/versions checked against the digest the records hold.
type VersionCheck struct {
	Version  string `json:"version"`
	Digest   string `json:"digest,omitempty"`   // of the binary on disk now
	Recorded string `json:"recorded,omitempty"` // what records.db holds; "" when never recorded
	// Problem says why the binary cannot be trusted (it no longer matches its digest, it is
	// missing or unreadable); "" when it matches or has no record to match.
	Problem  string `json:"problem,omitempty"`
	SetAside string `json:"set_aside,omitempty"` // where it was moved; "" when it stays
}

// CheckVersions hashes every version's binary anew (no proof kept from an earlier hash is taken:
// the disk is what is in question) and compares it with its recorded digest. A version with no
// record is left for the launcher, which records it as found when it first sees it.
func CheckVersions(ctx context.Context, root string, records *rollback.Records) ([]VersionCheck, error) {
	dirs, err := rollback.ScanVersions(root)
	if err != nil {
		return nil, err
	}
	var out []VersionCheck
	for _, d := range dirs {
		if !d.Version {
			continue
		}
		c := VersionCheck{Version: d.Name}
		rec, ok, err := records.Lookup(ctx, d.Name)
		if err != nil {
			return nil, err
		}
		if ok {
			c.Recorded = string(rec.Digest)
		}
		got, err := fileDigest(rollback.BinaryPath(root, d.Name))
		switch {
		case err != nil:
			c.Problem = fmt.Sprintf("no usable binary: %v", err)
		case ok && got != rec.Digest:
			c.Digest = string(got)
			c.Problem = fmt.Sprintf("the binary no longer matches its recorded digest (recorded %s, now %s)", rec.Digest, got)
		default:
			c.Digest = string(got)
		}
		out = append(out, c)
	}
	return out, nil
}

func fileDigest(path string) (digest.Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return digest.SHA256.FromReader(f)
}

// SetVersionsAside moves each version whose check found a problem into dir/versions/, so the
// launcher no longer sees it, and notes where.
func SetVersionsAside(root, dir string, checks []VersionCheck) error {
	for i, c := range checks {
		if c.Problem == "" {
			continue
		}
		into := filepath.Join(dir, "versions")
		if err := os.MkdirAll(into, 0o700); err != nil {
			return fmt.Errorf("rescue: %w", err)
		}
		to := filepath.Join(into, c.Version)
		if err := os.Rename(rollback.VersionDir(root, c.Version), to); err != nil {
			return fmt.Errorf("rescue: set version %s aside: %w", c.Version, err)
		}
		checks[i].SetAside = to
	}
	return syncDirs(rollback.VersionsDir(root))
}

// linkOptions are the link's options for cfg: the service's and a rescue's.
func linkOptions(cfg config.Config, log *slog.Logger) link.Options {
	return link.Options{
		URLs: cfg.NATSURLs, Creds: cfg.NATSCreds, CA: cfg.NATSCA, Node: cfg.Node,
		Names: wire.NamesFor(cfg.Prefix), Logger: log,
		InsecurePlaintext: cfg.InsecurePlaintext, JSAPIPrefix: cfg.JSAPIPrefix,
	}
}

// Fetched is the node's declaration as a rescue fetched it from the bus, checked as the
// service checks one that arrives, with the link left open to fetch the blobs it names.
type Fetched struct {
	Raw         []byte
	Revision    uint64
	Declaration wire.Declaration
	Link        *link.Link
	cfg         config.Config
}

// Blobs is the blob cache at dir, filled over the fetch's link.
func (f *Fetched) Blobs(dir string) *blobs.Cache {
	return blobs.New(dir, blobs.Bus(f.Link.JetStream(), wire.NamesFor(f.cfg.Prefix).Blobs(), f.Link.LegacyCredentials), blobs.Config{})
}

// Close closes the link.
func (f *Fetched) Close() { f.Link.Close() }

// FetchDeclaration links to the bus with the node's identity and waits, up to wait, for the
// declaration the bus holds for it. It fails naming why: no bus configured, a declaration that
// is refused, or none in time (with what the link last failed on: credentials a server no longer
// admits say so).
func FetchDeclaration(ctx context.Context, cfg config.Config, wait time.Duration, log *slog.Logger) (*Fetched, error) {
	if len(cfg.NATSURLs) == 0 {
		return nil, errors.New("no bus is configured (nats_urls in host.json, MESH_HOST_NATS_URL): a rescue derives the node's state from the mesh")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l, err := link.Open(ctx, linkOptions(cfg, log))
	if err != nil {
		return nil, fmt.Errorf("link to the bus: %w", err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	events := l.Events()
	max := cfg.MaxDeclarationBytes
	if max <= 0 {
		max = wire.DefaultMaxDeclarationBytes
	}
	for {
		select {
		case <-ctx.Done():
			l.Close()
			return nil, ctx.Err()
		case <-timer.C:
			why := "the bus held no declaration for node " + cfg.Node + ", or could not be reached"
			if f := l.LastFailure(); f != nil {
				why = fmt.Sprintf("the link last failed: %s", text.Bound(f.LastError))
			}
			l.Close()
			return nil, fmt.Errorf("no declaration arrived within %s (%s); if this node's credentials were revoked, rescue with a new enrolment token: mesh-host rescue --token TOKEN", wait, why)
		case ev, ok := <-events:
			if !ok {
				return nil, errors.New("the link closed before a declaration arrived")
			}
			d, isDecl := ev.(link.DeclarationArrived)
			if !isDecl {
				continue
			}
			if d.Deleted {
				l.Close()
				return nil, fmt.Errorf("node %s's declaration was deleted on the bus (revision %d): nothing to rescue from; declare the node first", cfg.Node, d.Revision)
			}
			decl, err := checkDeclaration(d.Value, cfg, max)
			if err != nil {
				l.Close()
				return nil, fmt.Errorf("the declaration on the bus (revision %d) is refused: %w", d.Revision, err)
			}
			go drain(events) // the link keeps reporting until it is closed
			return &Fetched{Raw: d.Value, Revision: d.Revision, Declaration: decl, Link: l, cfg: cfg}, nil
		}
	}
}

// checkDeclaration is declarationArrived's check: by size, parsed for this node, its paths
// against this root.
func checkDeclaration(raw []byte, cfg config.Config, max int64) (wire.Declaration, error) {
	if err := wire.CheckDeclarationSize(int64(len(raw)), max); err != nil {
		return wire.Declaration{}, err
	}
	d, err := wire.ParseDeclaration(raw, cfg.Node)
	if err == nil {
		err = wire.CheckDeclarationPaths(d, cfg.Root)
	}
	return d, err
}

func drain(events <-chan link.Event) {
	for range events {
	}
}

// RescueSummary is what a rescue's apply (or plan) did, in the rescue's terms: the resources
// adopted as they were, those created or changed to match, those that failed, and the names of
// what was not adopted (bounded).
func RescueSummary(rep apply.Report) store.Rescue {
	r := store.Rescue{
		Adopted: rep.Counts[apply.ActionAdopted],
		Changed: rep.Counts[apply.ActionCreated] + rep.Counts[apply.ActionChanged],
		Failed:  rep.Counts[apply.ActionFailed],
	}
	for _, s := range rep.Steps {
		switch s.Action {
		case apply.ActionCreated, apply.ActionChanged, apply.ActionFailed:
			if len(r.NotAdopted) < wire.MaxRescueNames {
				r.NotAdopted = append(r.NotAdopted, text.Cut(s.Action+" "+s.Type+" "+s.ID, wire.MaxRescueNameBytes))
			}
		}
	}
	return r
}

// endRescue records the end of the pending rescue the reconcile just ran, and says it in the
// journal; the heartbeat reports it from the store.
func (h *Host) endRescue(ctx context.Context, pending store.Rescue, rep apply.Report, err error) {
	r := RescueSummary(rep)
	r.OK = err == nil
	if err := h.store.EndRescue(ctx, r); err != nil {
		h.log.Error("could not record the rescue's end", "err", err)
	}
	h.log.Warn("rescued: the local state was derived again from the declaration",
		"reason", pending.Reason, "moved_to", pending.MovedTo, "adopted", r.Adopted, "changed", r.Changed, "failed", r.Failed,
		"not_adopted", r.NotAdopted, "complete", r.OK)
	h.heartbeatSoon()
}

// rescueReport is the last rescue as the heartbeat carries it.
func rescueReport(r store.Rescue) *wire.Rescue {
	bound := func(s []string) []string {
		var out []string
		for i, v := range s {
			if i == wire.MaxRescueNames {
				break
			}
			out = append(out, text.Cut(v, wire.MaxRescueNameBytes))
		}
		return out
	}
	return &wire.Rescue{
		At: r.Began.UTC(), Reason: text.Cut(r.Reason, wire.MaxErrorBytes), MovedTo: text.Cut(r.MovedTo, wire.MaxRescueNameBytes),
		Pending: r.Ended.IsZero(), OK: r.OK, Adopted: r.Adopted, Changed: r.Changed, Failed: r.Failed,
		NotAdopted: bound(r.NotAdopted), SetAside: bound(r.SetAside),
	}
}
