// Package deliver is the host's side of delivering its successor: fetch, verify, stage and prove a
// target version.
//
// Given a target version it has not got, it reads and verifies the signed manifest, takes this
// node's platform's build of it (wire.Manifest.For, manifest schemas 1–4), fetches the
// archive by digest, extracts it strictly into a staging directory, proves the binary with its own
// preflight and renames it into versions/<v> — or refuses, leaving nothing under versions/ but
// complete versions.
//
// Guarantees, each a test:
//   - nothing appears in versions/<v> unless its manifest verified against a trusted key, the
//     archive matched the signed size and digest, the extractor found one regular file
//     mesh-host (and at most a mesh-launcher after it), that file matched the signed binary
//     digest, and its preflight printed the version;
//   - a version without a build for this node's platform is refused by name before any fetch
//     (KindNoPlatform), never marked bad, and taken once the manifest holds other bytes;
//   - a release listing deltas (manifest schema 3 or 4) is rebuilt from one only when this node has its
//     base with exactly the signed base digest and the result has the signed binary digest;
//     anything else about a delta falls back to the archive in the same attempt and never refuses
//     the release (delta.go);
//   - a launcher the release carries (in its archive, manifest schema 2 or 3; as its own
//     object, schema 4) is staged under launchers/<v> before the host version appears, when the
//     node has no launcher of its digest and it is newer than the one running; a schema 4
//     launcher is fetched (or rebuilt from a delta) only then, so an unchanged launcher moves no
//     byte; a launcher that fails is logged and noted, never a refusal of the host release
//     (launcher.go, launcherobj.go);
//   - the digest of the binary is recorded before its directory appears, so Choose checks it;
//   - a refused release is not fetched again while the manifest under its version holds the
//     same bytes (a new manifest, another digest or signature, is tried), and failures that may
//     pass are retried with exponential backoff and jitter, never in a loop;
//   - every request of an attempt is asked again after RequestTry without an answer (a server
//     lost holding it costs a try); a fetch that stalls (no bytes for FetchStall, from opening
//     the store on) or runs past its bound (FetchStall + size/FetchMinRate) fails as a bus
//     failure and is retried; it has no hidden deadline;
//   - free space is checked for what the release needs — before fetching for the archive and
//     a binary at least as large, before extracting for the binary's size — and a full disk
//     or other write failure is the machine's, retried, never a refusal of the release;
//   - a crash leaves only versions/.staging-*, which rollback.CleanStaging (run at start)
//     removes.
package deliver

import (
	"context"
	"crypto/ed25519"
	_ "crypto/sha256" // go-digest verifies sha256 only once it is linked in
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/objfetch"
	"github.com/novox/mesh-host/internal/ratelimit"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
)

// ManifestSchema is the newest manifest schema a node delivers from (the heartbeat's
// manifest_schema): checkManifest reads schemas 1 to 4 through wire.Manifest.For.
const ManifestSchema = wire.ManifestSchemaPlatforms

// downloadName is the archive's name in the staging directory while it is fetched.
const downloadName = "download.tar.zst"

// Records is what delivery needs from this node's records (rollback.Records satisfies it).
type Records interface {
	// IsBad reports whether the version is marked bad on this node, and why.
	IsBad(ctx context.Context, version string) (bad bool, reason string, err error)
	// RecordVersion records the digest of the version's binary, which Choose later checks the
	// file against, and that it was delivered signed by the manifest's key.
	rollback.VersionRecorder
}

// Config is what a Deliverer needs. Root, JS, Records and Trust (or TrustedKeys) are
// required; zero fields take the defaults New fills in.
type Config struct {
	Root        string              // the host's root; versions/ is below it
	JS          jetstream.JetStream // the host's link to the bus
	Names       wire.Names          // bucket names (default prefix when zero)
	TrustedKeys []ed25519.PublicKey // from trusted_keys (wire.ParseTrustedKeys); used when Trust is nil
	// Trust is the trust manifests are verified with, asked at each manifest (the host's: the
	// roots it walked, or host.json's keys). A manifest refused for its signature is read again
	// once Trust's version differs from the one it was refused under: trust moved (a root
	// walked), and a release signed under the newer root is taken. Nil: TrustedKeys.
	Trust   func() wire.Trust
	Records Records
	// Platform is the platform this node takes builds for; zero: this machine's
	// (wire.NodePlatform of its GOOS, GOARCH and the kernel's machine word, for arm's variant).
	Platform wire.Platform
	// Withdrawn reports whether the version is withdrawn (the signed withdrawal list the host
	// accepted) and why; such a version is never fetched, its manifest refused. Nil: none is.
	Withdrawn func(version string) (reason string, ok bool)
	Log       *slog.Logger // default: discard
	// LegacyCredentials reports whether the node's user still has the permissions from before
	// decision 0022 (link.Link.LegacyCredentials): it may create consumers but not get chunks
	// directly, so an archive is fetched with nats.go's obs.Get. Asked before each fetch; nil:
	// never, chunks are read by direct gets (internal/objfetch).
	LegacyCredentials func() bool

	// PreflightArgs follow "preflight" on the staged binary's command line (e.g. --config
	// FILE when the host was started with one); PreflightEnv is added to the host's own
	// environment, with MESH_HOST_ROOT=Root.
	PreflightArgs    []string
	PreflightEnv     []string
	PreflightTimeout time.Duration // default DefaultPreflightTimeout

	MaxArchive  int64   // largest archive fetched; default DefaultMaxArchive
	MaxBinary   int64   // largest binary extracted; default archive.DefaultMaxBinary (256 MiB), as a build accepts
	SpaceMargin int64   // free space left after staging (archive + binary); default DefaultSpaceMargin
	Backoff     Backoff // retry policy for failures that may pass

	// A fetch fails, and is retried with the backoff, when no bytes arrive for FetchStall or
	// when it takes longer than FetchStall + size/FetchMinRate in all.
	FetchStall   time.Duration // default DefaultFetchStall
	FetchMinRate int64         // bytes per second; default DefaultFetchMinRate, at most half MaxFetchRate
	// RequestTry is how long each request of an attempt (the manifest's bucket and key, the
	// object store, the object's info, each chunk) waits for its answer before it is asked
	// again; default objfetch.RequestTry (docs/wire.md).
	RequestTry time.Duration

	// MaxFetchRate caps the fetch of the archive or a delta, in bytes per second (host.json max_fetch_rate;
	// internal/ratelimit); 0 is no cap. FetchClock is the cap's clock (nil: the machine's).
	MaxFetchRate int64
	FetchClock   ratelimit.Clock
}

// The defaults of Config's zero fields (withDefaults fills them).
const (
	// DefaultPreflightTimeout bounds `mesh-host preflight` (and `mesh-launcher version`) of a
	// staged binary.
	DefaultPreflightTimeout = 30 * time.Second
	// DefaultMaxArchive is the largest archive a node fetches.
	DefaultMaxArchive int64 = 128 << 20
	// DefaultSpaceMargin is the free space staging leaves on the disk.
	DefaultSpaceMargin int64 = 4 << 20
	// DefaultFetchStall is how long a fetch may go without a byte: the blobs' fetch's too
	// (host/blobs.DefaultStall).
	DefaultFetchStall = 30 * time.Second
	// DefaultFetchMinRate is the slowest a fetch may go in all, in bytes per second.
	DefaultFetchMinRate int64 = 16 << 10
)

// withDefaults is cfg with every zero field given its default: the one place they are filled.
func (cfg Config) withDefaults() Config {
	if cfg.Names.Prefix == "" {
		cfg.Names = wire.NamesFor("")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.PreflightTimeout <= 0 {
		cfg.PreflightTimeout = DefaultPreflightTimeout
	}
	if cfg.MaxArchive <= 0 {
		cfg.MaxArchive = DefaultMaxArchive
	}
	if cfg.MaxBinary <= 0 {
		cfg.MaxBinary = archive.DefaultMaxBinary
	}
	if cfg.SpaceMargin <= 0 {
		cfg.SpaceMargin = DefaultSpaceMargin
	}
	if cfg.FetchStall <= 0 {
		cfg.FetchStall = DefaultFetchStall
	}
	if cfg.FetchMinRate <= 0 {
		cfg.FetchMinRate = DefaultFetchMinRate
	}
	if cfg.MaxFetchRate > 0 {
		// A capped fetch must not be failed as too slow for keeping to its cap.
		cfg.FetchMinRate = max(min(cfg.FetchMinRate, cfg.MaxFetchRate/2), 1)
	}
	if cfg.RequestTry <= 0 {
		cfg.RequestTry = objfetch.RequestTry
	}
	cfg.Backoff = cfg.Backoff.withDefaults()
	return cfg
}

// Deliverer stages host versions under one root. It is safe for concurrent use; stagings run
// one at a time.
type Deliverer struct {
	cfg      Config
	env      env
	platform wire.Platform // the builds this node takes
	sem      chan struct{}
	mu       sync.Mutex
	seen     map[string]*attempt // per version: the last outcome

	oldRecords       sync.Once    // the log said once that records.db is too old for launchers
	launcherStagings atomic.Int64 // launchers a release carried that this node began to stage
	// moved is, per version not staged yet, the bytes its attempts fetched (under mu).
	moved map[string]int64
}

// LauncherStagings is how many launchers releases carried that this Deliverer began to stage
// (0 while every release carries a launcher the node has).
func (d *Deliverer) LauncherStagings() int64 { return d.launcherStagings.Load() }

// attempt is what Deliver remembers about a version between calls.
type attempt struct {
	manifest digest.Digest // of the manifest's bytes a permanent refusal was found in ("": before reading it)
	trust    uint64        // the trust's root version the refusal was found under
	err      *Error
	failures int       // failures in a row that may pass
	retryAt  time.Time // no new attempt before this
}

// New checks cfg and fills in its defaults (Config.withDefaults).
func New(cfg Config) (*Deliverer, error) {
	switch {
	case cfg.Root == "":
		return nil, errors.New("deliver: no root")
	case cfg.JS == nil:
		return nil, errors.New("deliver: no bus connection")
	case cfg.Records == nil:
		return nil, errors.New("deliver: no records")
	case cfg.Trust == nil && len(cfg.TrustedKeys) == 0:
		return nil, errors.New("deliver: no trusted_keys configured, so no release can be verified; add the content of release.pub to trusted_keys in host.json")
	}
	cfg = cfg.withDefaults()
	d := &Deliverer{cfg: cfg, env: stdEnv, sem: make(chan struct{}, 1), seen: map[string]*attempt{}, moved: map[string]int64{}}
	d.platform = cfg.Platform
	if d.platform == (wire.Platform{}) {
		// The kernel's word tells arm's variant, which GOARCH does not; a machine that cannot be
		// asked takes wire.NodePlatform's default for it.
		machine, err := d.env.machine()
		if err != nil {
			cfg.Log.Warn("could not ask the kernel which machine this is; taking the default variant for this architecture", "err", err)
		}
		d.platform = wire.NodePlatform(runtime.GOOS, runtime.GOARCH, machine)
	}
	return d, nil
}

// Platform is the platform whose builds this node takes.
func (d *Deliverer) Platform() wire.Platform { return d.platform }

// Have reports whether versions/<v>/mesh-host exists.
func (d *Deliverer) Have(version string) bool {
	fi, err := os.Stat(rollback.BinaryPath(d.cfg.Root, version))
	return err == nil && fi.Mode().IsRegular()
}

// Deliver makes one attempt to stage version into versions/<version>. It returns nil when the
// version is there (already, or now), or an *Error saying what was wrong:
//   - a permanent refusal (Kind.Permanent) is remembered: calling again returns it after one
//     read of the manifest's KV entry, without fetching, until that entry holds other bytes
//     (the same bytes put again are the same release, refused the same way);
//   - any other failure sets Error.RetryAt by the backoff; calling again before then returns the
//     same error and does nothing.
//
// When ctx ends first it returns ctx.Err(), which is not a failure of the release and is not
// remembered. progress, if not nil, is called with the fetch's progress, at most a few times
// a second.
func (d *Deliverer) Deliver(ctx context.Context, version string, progress func(Progress)) error {
	if progress == nil {
		progress = func(Progress) {}
	}
	if !wire.ValidVersion(version) {
		return refuse(version, KindInvalidVersion, "the target is not a semantic version like v1.4.0")
	}
	select {
	case d.sem <- struct{}{}:
		defer func() { <-d.sem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if d.Have(version) {
		return nil
	}
	d.mu.Lock()
	a := d.seen[version]
	d.mu.Unlock()
	if a != nil && !a.err.Kind.Permanent() && time.Now().Before(a.retryAt) {
		return a.err
	}
	manifest, err := d.attempt(ctx, version, a, progress)
	if ctx.Err() != nil && err != nil {
		return ctx.Err() // shutting down or the target changed: not a failure of the release
	}
	return d.remember(version, manifest, err)
}

// remember keeps err's outcome for the next call and logs it. manifest is the digest of the
// manifest's bytes a permanent refusal was found in ("" when it was found before reading it).
func (d *Deliverer) remember(version string, manifest digest.Digest, err error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.seen, version)
		return nil
	}
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Version: version, Kind: KindLocal, Err: err}
	}
	prev := d.seen[version]
	if e.Kind.Permanent() {
		if prev == nil || prev.err.Error() != e.Error() {
			d.cfg.Log.Warn("host version refused", "version", version, "kind", string(e.Kind), "err", e.Err)
		}
		d.seen[version] = &attempt{manifest: manifest, trust: d.trust().Version(), err: e}
		return e
	}
	n := 1
	if prev != nil && !prev.err.Kind.Permanent() {
		n = prev.failures + 1
	}
	e.RetryAt = time.Now().Add(d.cfg.Backoff.Delay(n))
	d.seen[version] = &attempt{err: e, failures: n, retryAt: e.RetryAt}
	d.cfg.Log.Warn("host version not delivered; will retry", "version", version, "kind", string(e.Kind),
		"err", e.Err, "failures", n, "retry_at", e.RetryAt.Format(time.RFC3339))
	return e
}

// attempt is one try: manifest, checks, fetch, extract, preflight, commit. It returns the
// digest of the manifest's bytes with the outcome.
func (d *Deliverer) attempt(ctx context.Context, version string, prev *attempt, progress func(Progress)) (digest.Digest, error) {
	if err := d.withdrawn(version); err != nil {
		return "", err
	}
	bad, reason, err := d.cfg.Records.IsBad(ctx, version)
	if err != nil {
		return "", &Error{Version: version, Kind: KindLocal, Err: fmt.Errorf("read the records: %w", err)}
	}
	if bad {
		return "", refuse(version, KindMarkedBad, "this node marked it bad (%s); it is never staged here again — publish a fixed version", reason)
	}
	// Each request asked again after RequestTry without an answer, as the fetch's are: a
	// server lost holding one costs a try, not nats.go's timeout and then the backoff. A bus
	// that answers neither within FetchStall fails the attempt, as a stalled fetch does.
	kctx, cancel := context.WithTimeoutCause(ctx, d.cfg.FetchStall, fmt.Errorf("no answer for %s: the link to the bus stalled", d.cfg.FetchStall))
	defer cancel()
	kv, err := objfetch.Ask(kctx, d.ask(), func(ctx context.Context) (jetstream.KeyValue, error) {
		return d.cfg.JS.KeyValue(ctx, d.cfg.Names.Releases())
	})
	if err != nil {
		if kctx.Err() != nil && ctx.Err() == nil {
			err = context.Cause(kctx)
		}
		return "", &Error{Version: version, Kind: KindBus, Err: fmt.Errorf("open KV %s: %w", d.cfg.Names.Releases(), err)}
	}
	entry, err := objfetch.Ask(kctx, d.ask(), func(ctx context.Context) (jetstream.KeyValueEntry, error) {
		return kv.Get(ctx, version)
	})
	if err != nil && kctx.Err() != nil && ctx.Err() == nil {
		err = context.Cause(kctx)
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", refuse(version, KindNotPublished, "no manifest under %s in KV %s; publish it with `mesh-release publish`", version, d.cfg.Names.Releases())
	}
	if err != nil {
		return "", &Error{Version: version, Kind: KindBus, Err: fmt.Errorf("read the manifest from KV %s: %w", d.cfg.Names.Releases(), err)}
	}
	manifest := digest.FromBytes(entry.Value())
	if prev != nil && prev.err.Kind.Permanent() && prev.manifest == manifest &&
		(prev.err.Kind != KindSignature || prev.trust == d.trust().Version()) {
		return manifest, prev.err // refused before, the manifest has the same bytes and trust did not move: do not fetch again
	}
	return manifest, d.stage(ctx, version, entry.Value(), progress)
}

// withdrawn is the refusal of a withdrawn version, or nil.
func (d *Deliverer) withdrawn(version string) error {
	if d.cfg.Withdrawn == nil {
		return nil
	}
	if reason, ok := d.cfg.Withdrawn(version); ok {
		return refuse(version, KindWithdrawn, "it is withdrawn from the fleet (%s); a withdrawn version is never fetched — publish a fixed version", text.Cut(reason, wire.MaxWithdrawalReason))
	}
	return nil
}

// checkManifest parses and verifies the manifest and returns this node's platform's build of
// it (wire.Manifest.For, any schema): a version without one is refused by name, as the manifest
// says it, and tried again once the manifest under the version holds other bytes.
func (d *Deliverer) checkManifest(version string, raw []byte) (release, error) {
	m, err := wire.ParseManifest(raw)
	if err != nil {
		return release{}, refuse(version, KindBadManifest, "%w", err)
	}
	if m.Version != version {
		return release{}, refuse(version, KindBadManifest, "the manifest under %s is for %s; republish it under its own version", version, m.Version)
	}
	if err := verifyManifest(m, d.trust()); err != nil {
		return release{}, refuse(version, KindSignature, "%w", err)
	}
	b, err := m.For(d.platform)
	if errors.Is(err, wire.ErrNoPlatformBuild) {
		return release{}, &Error{Version: version, Kind: KindNoPlatform, Err: worded{
			text: fmt.Sprintf("%v; publish the version with a %s build (mesh-release build --platforms)", err, d.platform), err: err}}
	}
	if err != nil {
		return release{}, refuse(version, KindBadManifest, "%w", err)
	}
	r := release{Build: b, keyID: m.KeyID}
	if r.Size > d.cfg.MaxArchive {
		return r, refuse(version, KindTooLarge, "the archive is %d bytes, over this host's %d-byte limit", r.Size, d.cfg.MaxArchive)
	}
	return r, nil
}

// trust is what manifests are verified with now.
func (d *Deliverer) trust() wire.Trust {
	if d.cfg.Trust != nil {
		return d.cfg.Trust()
	}
	return wire.LegacyTrust(d.cfg.TrustedKeys, nil)
}

// verifyManifest checks m's signature as trust requires of the releases role.
func verifyManifest(m wire.Manifest, trust wire.Trust) error {
	return m.Verify(trust)
}

// worded is err said in other words for the operator: errors.Is and As still see err.
type worded struct {
	text string
	err  error
}

func (w worded) Error() string { return w.text }
func (w worded) Unwrap() error { return w.err }

// release is what a delivery works on: this node's platform's build of a verified manifest.
type release struct {
	wire.Build
	keyID string // of the key that signed the manifest
}

// launcher is the launcher binary the release names (zero when it names none): its version,
// and the digest and size of the binary itself, whether it rides in the archive (schemas 2
// and 3) or is its own object (schema 4).
func (r release) launcher() wire.ReleaseLauncher {
	l := r.Build.Launcher
	return wire.ReleaseLauncher{Version: l.Version, Digest: l.BinaryDigest, Size: l.BinarySize}
}

// hasLauncher reports whether the release names a launcher.
func (r release) hasLauncher() bool { return !r.Build.Launcher.IsZero() }

// launcherObject reports whether the release's launcher is its own object (schema 4).
func (r release) launcherObject() bool { return r.hasLauncher() && !r.LauncherInArchive }

// stage does the work of one attempt after the manifest was read.
func (d *Deliverer) stage(ctx context.Context, version string, raw []byte, progress func(Progress)) (err error) {
	r, err := d.checkManifest(version, raw)
	if err != nil {
		return err
	}
	versions := rollback.VersionsDir(d.cfg.Root)
	if err := os.MkdirAll(versions, 0o755); err != nil {
		return &Error{Version: version, Kind: KindLocal, Err: err}
	}
	// The binary's size is not signed, but it is at least about the archive's (compression
	// does not make a file larger by more than its framing): refuse before fetching only what
	// cannot fit, and check the binary's own size once the verified archive tells it.
	if err := d.room(version, versions, 2*r.Size, fmt.Sprintf("the archive (%s) and a binary at least as large", mib(r.Size))); err != nil {
		return err
	}

	st, err := rollback.NewStaging(d.cfg.Root)
	if err != nil {
		return &Error{Version: version, Kind: KindLocal, Err: err}
	}
	defer st.Discard() // nothing once committed
	// A node that has a base the manifest lists a delta from rebuilds the binary from it (delta.go);
	// anything else about the delta is a fallback to the archive, never a refusal.
	var (
		bin  archive.Binary
		note string
		used deltaUse
	)
	// moved counts every byte fetched for this version, over its attempts, for the heartbeat.
	moved := d.movedBefore(version)
	defer func() { d.keepMoved(version, moved, err == nil) }()
	if d.deltaFits(ctx, r) {
		bin, used = d.fromDelta(ctx, r, st.Dir(), &moved, progress)
		if ctx.Err() != nil {
			return &Error{Version: version, Kind: KindBus, Err: ctx.Err()}
		}
	}
	if used.Base != "" {
		// The binary has the signed digest: what it does now is the release's, as from the archive.
		if err := d.checkBinary(ctx, r, bin); err != nil {
			return err
		}
		if r.LauncherInArchive {
			note = d.launcherAfterDelta(ctx, r)
		}
	} else {
		var err error
		if bin, note, err = d.fromArchive(ctx, r, st, &moved, progress); err != nil {
			return err
		}
	}
	if r.launcherObject() {
		// Its own object (schema 4), fetched only when this node is to stage it, and in place
		// before the host version, as a launcher from the archive is.
		note = d.launcherFromObject(ctx, r, &moved, progress)
		if ctx.Err() != nil {
			return &Error{Version: version, Kind: KindBus, Err: ctx.Err()}
		}
	}
	return d.commit(ctx, r, st, bin, note, used, moved, progress)
}

// fromArchive fetches the archive into the staging directory and extracts the binary (and the
// launcher, when this node is to stage it, which it commits) from it, adding what it fetches to
// moved.
func (d *Deliverer) fromArchive(ctx context.Context, r release, st *rollback.Staging, moved *int64, progress func(Progress)) (archive.Binary, string, error) {
	version := r.Version
	versions := rollback.VersionsDir(d.cfg.Root)
	staging := st.Dir()
	dl, err := d.fetch(ctx, archiveOf(r), staging, downloadName, moved, progress)
	if err != nil {
		return archive.Binary{}, "", err
	}
	defer dl.Close()
	if _, err := dl.Seek(0, io.SeekStart); err != nil {
		return archive.Binary{}, "", &Error{Version: version, Kind: KindLocal, Err: err}
	}
	progress(Progress{Version: version, State: StateVerifying, Bytes: r.Size, Total: r.Size, Percent: 100, Moved: *moved})
	lim := archive.Limits{MaxBinary: d.cfg.MaxBinary}
	size, err := archive.Peek(ctx, dl, lim)
	if errors.Is(err, archive.ErrUnsafe) {
		return archive.Binary{}, "", refuse(version, KindBadArchive, "%w", err)
	}
	if err != nil {
		return archive.Binary{}, "", &Error{Version: version, Kind: KindLocal, Err: err}
	}
	if err := d.room(version, versions, size, fmt.Sprintf("the binary (%s)", mib(size))); err != nil {
		return archive.Binary{}, "", err
	}
	if _, err := dl.Seek(0, io.SeekStart); err != nil {
		return archive.Binary{}, "", &Error{Version: version, Kind: KindLocal, Err: err}
	}
	// The release's launcher, if it rides in the archive (schemas 2 and 3) and this node is to
	// stage it, is extracted from the same archive in the same pass, into its own staging
	// directory under launchers/. A schema 4 archive holds mesh-host alone.
	var (
		lp   *launcherPlan
		note string
	)
	if r.LauncherInArchive {
		lp, note = d.planLauncher(ctx, r)
		defer lp.discard()
	}
	rel, err := archive.ExtractRelease(ctx, dl, staging, lp.extract(), lim)
	bin := rel.Host
	if errors.Is(err, archive.ErrUnsafe) {
		return archive.Binary{}, "", refuse(version, KindBadArchive, "%w", err)
	}
	if err != nil {
		return archive.Binary{}, "", writeErr(version, "extracting "+archive.BinaryName, err)
	}
	dl.Close()
	if err := os.Remove(dl.Name()); err != nil {
		return archive.Binary{}, "", &Error{Version: version, Kind: KindLocal, Err: err}
	}
	if bin.Digest != r.BinaryDigest {
		return archive.Binary{}, "", refuse(version, KindBinaryDigest, "the archive's binary is %s but the manifest signed %s", bin.Digest, r.BinaryDigest)
	}
	if err := d.checkBinary(ctx, r, bin); err != nil {
		return archive.Binary{}, "", err
	}
	// The launcher goes in place before the host version does: once versions/<v> appears the
	// host may stand aside for it, and the launcher that starts it should be on disk by then. A
	// launcher that fails here leaves the host version to be staged all the same.
	if lp != nil {
		note = d.launcherFromArchive(ctx, lp, r, rel)
	}
	return bin, note, nil
}

// checkBinary checks a binary the archive or a delta gave: built for this machine, its
// preflight passes, and the version not withdrawn meanwhile.
func (d *Deliverer) checkBinary(ctx context.Context, r release, bin archive.Binary) error {
	version := r.Version
	if arch, err := archive.ArchOf(bin.Path); err != nil || arch != runtime.GOARCH {
		if err != nil {
			return refuse(version, KindWrongPlatform, "%w", err)
		}
		return refuse(version, KindWrongPlatform, "the binary is built for %s, this machine is %s (its manifest wrongly says %s); build it for %s",
			arch, runtime.GOARCH, r.Platform.Arch, runtime.GOARCH)
	}
	if err := d.preflight(ctx, version, bin.Path); err != nil {
		return err
	}
	// Withdrawn while it was being fetched: it never reaches versions/.
	return d.withdrawn(version)
}

// commit puts the staged binary in place as versions/<v> and reports it staged.
func (d *Deliverer) commit(ctx context.Context, r release, st *rollback.Staging, bin archive.Binary, note string, used deltaUse, moved int64, progress func(Progress)) error {
	version := r.Version
	// The shared commit (rollback.Staging): the digest recorded before the directory appears,
	// with where the version came from, then one rename.
	err := st.Commit(ctx, d.cfg.Records, version, bin.Digest, rollback.Provenance{Source: rollback.SourceDelivered, SignedBy: r.keyID})
	if dc := (*rollback.DigestConflict)(nil); errors.As(err, &dc) {
		return refuse(version, KindBinaryDigest, "%w", err)
	}
	if errors.Is(err, rollback.ErrVersionExists) && d.Have(version) {
		return nil // staged meanwhile by another process on this root
	}
	if err != nil {
		return &Error{Version: version, Kind: KindLocal, Err: fmt.Errorf("put the staged version in place: %w", err)}
	}
	final := rollback.VersionDir(d.cfg.Root, version)
	p := Progress{Version: version, State: StateStaged, Bytes: r.Size, Total: r.Size, Percent: 100, Launcher: note, Moved: moved}
	if used.Base != "" {
		p.Bytes, p.Total, p.Delta = used.Size, used.Size, used.Base
	}
	progress(p)
	d.cfg.Log.Info("host version staged", "version", version, "digest", string(r.Digest), "binary_digest", string(bin.Digest), "dir", final,
		"delta_from", used.Base, "bytes_moved", moved)
	return nil
}

// object is one object of the archives store a delivery fetches: the archive, or a delta.
type object struct {
	version string // the release it belongs to
	name    string
	size    int64
	digest  digest.Digest
	delta   string // with a delta: its base version
}

func archiveOf(r release) object {
	return object{version: r.Version, name: r.Object, size: r.Size, digest: r.Digest}
}

// fetch streams an object from the object store into staging/file, hashing it while it is
// written, adding each byte to moved and reporting progress. The signed size is a hard cap. The
// watch bounds it all, from opening the store on: every request is asked again after
// RequestTry without an answer (objfetch.Ask), so a server lost holding one costs a try, and
// only a link that stays down reaches the stall.
func (d *Deliverer) fetch(ctx context.Context, o object, staging, file string, moved *int64, progress func(Progress)) (*os.File, error) {
	v := o.version
	w := d.watch(ctx, o.size)
	defer w.close()
	obs, info, err := d.objectInfo(w, o)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(staging, file), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, writeErr(v, "creating the download", err)
	}
	meter := newMeter(v, o.size, o.delta, moved, progress)
	res, err := d.open(w.ctx, obs, info)
	if err != nil {
		f.Close()
		if why := w.failed(); why != nil {
			return nil, &Error{Version: v, Kind: KindBus, Err: fmt.Errorf("fetch %s: %w", o.name, why)}
		}
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, refuse(v, KindObjectMissing, "object %s vanished from %s", o.name, d.cfg.Names.Archives())
		}
		return nil, &Error{Version: v, Kind: KindBus, Err: fmt.Errorf("fetch %s: %w", o.name, err)}
	}
	// max_fetch_rate caps every object fetched here, the delta as much as the archive; the
	// watch still closes what open returned (obs.Get's consumer, for legacy credentials).
	capped := readCloser{ratelimit.Reader(w.ctx, res, d.cfg.MaxFetchRate, d.cfg.FetchClock), res}
	if err := copyVerified(f, w.reader(capped, meter.stalled), o, meter); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// objectInfo opens the archives store and reads o's info there under the watch, and checks it
// against what the manifest signed.
func (d *Deliverer) objectInfo(w *watch, o object) (jetstream.ObjectStore, *jetstream.ObjectInfo, error) {
	v, store := o.version, d.cfg.Names.Archives()
	busErr := func(what string, err error) error {
		if why := w.failed(); why != nil {
			err = why
		}
		return &Error{Version: v, Kind: KindBus, Err: fmt.Errorf("%s: %w", what, err)}
	}
	obs, err := objfetch.Ask(w.ctx, d.ask(), func(ctx context.Context) (jetstream.ObjectStore, error) {
		return d.cfg.JS.ObjectStore(ctx, store)
	})
	if err != nil {
		return nil, nil, busErr("open object store "+store, err)
	}
	info, err := objfetch.Ask(w.ctx, d.ask(), func(ctx context.Context) (*jetstream.ObjectInfo, error) {
		return obs.GetInfo(ctx, o.name)
	})
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil, refuse(v, KindObjectMissing, "object %s is not in %s; republish the release", o.name, store)
	}
	if err != nil {
		return nil, nil, busErr("object "+o.name, err)
	}
	if err := sizeCheck(o, int64(info.Size), "the object store holds"); err != nil {
		return nil, nil, err
	}
	if want, _ := wire.ObjectStoreDigest(o.digest); info.Digest != want {
		return nil, nil, refuse(v, KindDigestMismatch, "the object store's digest of %s is %s but the manifest signed %s (%s); republish the release",
			o.name, info.Digest, o.digest, want)
	}
	return obs, info, nil
}

// ask is how each request of a delivery is asked (objfetch.Ask).
func (d *Deliverer) ask() objfetch.Config { return objfetch.Config{Try: d.cfg.RequestTry} }

// readCloser reads from one reader and closes another: a capped reader and the source below it.
type readCloser struct {
	io.Reader
	io.Closer
}

// open starts reading the object info describes: by direct gets of its chunks, no consumer, as a
// node may create none (docs/security.md); or, while the node's credentials are legacy, with
// obs.Get's ordered consumer, the one way such a user may read chunks (decision 0024).
func (d *Deliverer) open(ctx context.Context, obs jetstream.ObjectStore, info *jetstream.ObjectInfo) (io.ReadCloser, error) {
	if d.cfg.LegacyCredentials != nil && d.cfg.LegacyCredentials() {
		return obs.Get(ctx, info.Name)
	}
	res, err := d.ask().Open(ctx, d.cfg.JS, d.cfg.Names.Archives(), info)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(res), nil
}

// copyVerified copies at most o.size+1 bytes of src to dst, verifying them on the way, and
// checks the count and the digest against the manifest (whose digests ParseManifest validated).
func copyVerified(dst io.Writer, src io.Reader, o object, meter io.Writer) error {
	v := o.digest.Verifier()
	out := &archive.WriteRecorder{W: dst}
	n, err := io.Copy(io.MultiWriter(out, v, meter), io.LimitReader(src, o.size+1))
	if out.Err != nil {
		return writeErr(o.version, "writing the download", out.Err)
	}
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		return refuse(o.version, KindDigestMismatch, "the object store's chunks of %s do not match its own digest; republish the release", o.name)
	}
	if err != nil {
		return &Error{Version: o.version, Kind: KindBus, Err: fmt.Errorf("fetch %s: %w", o.name, err)}
	}
	if err := sizeCheck(o, n, "the fetch delivered"); err != nil {
		return err
	}
	if !v.Verified() {
		return refuse(o.version, KindDigestMismatch, "%s does not match the digest the manifest signed, %s; republish the release", o.name, o.digest)
	}
	return nil
}

// movedBefore is what earlier attempts at version fetched.
func (d *Deliverer) movedBefore(version string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.moved[version]
}

// keepMoved remembers what the attempts at version fetched until it is staged.
func (d *Deliverer) keepMoved(version string, moved int64, staged bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if staged {
		delete(d.moved, version)
		return
	}
	d.moved[version] = moved
}

// room checks that dir's file system has need bytes free beyond the margin; what says what
// they are for.
func (d *Deliverer) room(version, dir string, need int64, what string) error {
	free, err := d.env.freeSpace(dir)
	if err != nil {
		return &Error{Version: version, Kind: KindLocal, Err: fmt.Errorf("check free space in %s: %w", dir, err)}
	}
	if want := need + d.cfg.SpaceMargin; free < uint64(want) {
		return refuse(version, KindNoSpace, "%s has %s free; staging needs %s: %s, plus a %s margin; free some space on %s",
			dir, mib(int64(free)), mib(want), what, mib(d.cfg.SpaceMargin), mountPoint(dir))
	}
	return nil
}

// mib writes n bytes in MiB with one decimal.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func sizeCheck(o object, n int64, what string) error {
	switch {
	case n > o.size:
		return refuse(o.version, KindSizeMismatch, "%s more than the %d bytes of %s the manifest signed; republish the release", what, o.size, o.name)
	case n < o.size:
		return refuse(o.version, KindTruncated, "%s %d of the %d bytes of %s the manifest signed (truncated); republish the release", what, n, o.size, o.name)
	}
	return nil
}
