package wire

import (
	"encoding/json"
	"fmt"
	"time"
)

// HeartbeatSchema is the heartbeat format this package writes and reads.
const HeartbeatSchema = 1

// Host states a heartbeat reports.
const (
	StateRunning       = "running"
	StateStandingAside = "standing-aside"
	StateStopping      = "stopping"
)

// Trigger is why a reconcile ran (docs/design.md, "The host"): the host's start, a declaration
// arriving, a reconnect to the bus, or the drift timer.
type Trigger string

// The reconcile triggers: these four and no others.
const (
	TriggerStart       Trigger = "start"
	TriggerDeclaration Trigger = "declaration"
	TriggerReconnect   Trigger = "reconnect"
	TriggerTimer       Trigger = "timer"
)

// Known reports whether t is one of the four triggers.
func (t Trigger) Known() bool {
	switch t {
	case TriggerStart, TriggerDeclaration, TriggerReconnect, TriggerTimer:
		return true
	}
	return false
}

// Limits on the texts a heartbeat carries, which a host builds from input (a declaration, a
// failing version's output): it cuts each to its limit before sending (docs/wire.md, "Heartbeat
// size"), so readers can rely on them.
const (
	MaxErrorBytes  = 4096 // last_reconcile.error, refused.error, fetch.error
	MaxBusCAs      = 8    // bus_cas
	MaxReasonBytes = 1024 // rollbacks[].reason
	MaxOutputBytes = 4096 // rollbacks[].output
	// MaxLauncherVersionBytes bounds launcher.version, .floor and .rolled_back_from: a
	// launcher version is a version (internal/layout.MaxVersionBytes), but the floor's is what
	// the package's binary said of itself.
	MaxLauncherVersionBytes = 128
	// launcher.rollback_reason is bounded by MaxReasonBytes, like rollbacks[].reason.
)

// MaxHeartbeatBytes is the most a heartbeat may be, and the heartbeat stream's max message
// size: a host sends at most this or the server's max payload, whichever is smaller, cutting by
// the rules in docs/wire.md ("Heartbeat size") and setting Truncated.
const MaxHeartbeatBytes = 1 << 20

// Heartbeat is what a host publishes on <prefix>.node.<id>.heartbeat: on link, after every
// reconcile, every heartbeat interval while idle, when standing aside and when stopping. The
// stream keeps the last one per node, so it is each node's last word. Every key is always
// present except target_expired_since, refused, fetch, link, profile, inventory, drift,
// launcher, window, link_class, interval_s, manifest_schema, trust_root,
// trust_expired_since, plans, bus_seq, bus_cas and truncated.
type Heartbeat struct {
	Schema           int      `json:"schema"`
	Node             string   `json:"node"`
	State            string   `json:"state"`
	Running          string   `json:"running"`
	StandingAsideFor string   `json:"standing_aside_for"`
	KnownGood        string   `json:"known_good"`
	Staged           []string `json:"staged"`
	Target           string   `json:"target"`
	// TargetExpiredSince is, while the target in force has expired, when it did (its signed
	// expiry): the host does not act on it and keeps running what it has. Absent otherwise.
	TargetExpiredSince  *time.Time     `json:"target_expired_since,omitempty"`
	DeclarationRevision uint64         `json:"declaration_revision"`
	LastReconcile       *LastReconcile `json:"last_reconcile"`
	Rollbacks           []Rollback     `json:"rollbacks"`
	UptimeS             int64          `json:"uptime_s"`
	SentAt              time.Time      `json:"sent_at"`
	// IntervalS is how often the host heartbeats while idle (host.json heartbeat_interval), in
	// seconds: the longest a reader waits for its next word while it is up. It also heartbeats
	// on events in between, so the gap between two heartbeats does not say it. Absent (0) from
	// hosts older than issue 27.
	IntervalS float64 `json:"interval_s,omitempty"`
	// ManifestSchema is the newest manifest schema the host reads (ManifestSchemaPlatforms since
	// issue 28): absent (0) from hosts that read schema 3 at most, which refuse a schema 4
	// manifest — a rollout of one is gated on it.
	ManifestSchema int `json:"manifest_schema,omitempty"`
	// TrustRoot is the version of the newest root the host holds (decision 0045); absent (0)
	// while it trusts host.json's keys only, and from hosts older than issue 29.
	TrustRoot uint64 `json:"trust_root,omitempty"`
	// TrustExpiredSince is, while the newest root the host holds has expired, when it did: the
	// host keeps running and reconciling what it has and takes no new target. Absent otherwise.
	TrustExpiredSince *time.Time `json:"trust_expired_since,omitempty"`
	// BusSeq is the seq of the last bus configuration (CA bundle, URLs) the host applied; BusCAs
	// the SHA-256 fingerprints ("sha256:<hex>") of the CAs its ca.pem holds, at most
	// MaxBusCAs. A CA rollover switches the servers' certificates once every node reports the
	// new CA here. Absent from hosts older than issue 29.
	// Plans is the newest rollout plan schema the host reads (PlanSchema), said only while its
	// link follows PlanKey: a rollout gives a node without it a per-node target instead.
	// Absent from hosts older than issue 30.
	Plans   int          `json:"plans,omitempty"`
	BusSeq  uint64       `json:"bus_seq,omitempty"`
	BusCAs  []string     `json:"bus_cas,omitempty"`
	Refused *Refusal     `json:"refused,omitempty"`
	Fetch   *Fetch       `json:"fetch,omitempty"`
	Link    *LinkFailure `json:"link,omitempty"`
	// Profile is what the machine can do, as last detected (at the host's start and on each
	// drift timer, not per heartbeat): absent until the first detection ends, and from
	// hosts older than issue 12.
	Profile *Profile `json:"profile,omitempty"`
	// Inventory is what the machine is and holds, read for this heartbeat; Owned is what the
	// host applied.
	Inventory *Inventory `json:"inventory,omitempty"`
	// Drift is the last MaxDrifted resources the drift check found changed, oldest first;
	// absent when none has.
	Drift []Drifted `json:"drift,omitempty"`
	// Launcher is the launcher running this host, as the records say it: absent from hosts
	// older than issue 19 and while the records are older than launcher versions (schema 6).
	Launcher *Launcher `json:"launcher,omitempty"`
	// Window is the maintenance window this node keeps (decision 0029): absent when none is in
	// force, and from hosts older than issue 21.
	Window *WindowState `json:"window,omitempty"`
	// LinkClass is host.json's link_class when the node declared its link LinkMetered (a
	// rollout defers it to its last batch); absent otherwise.
	LinkClass string `json:"link_class,omitempty"`
	// Rescue is the node's last rescue (decision 0048): its local state set aside and derived
	// again from the mesh, by `mesh-host rescue` or by the host itself when store.db could not
	// be read. Absent when it was never rescued, and from hosts older than issue 31.
	Rescue *Rescue `json:"rescue,omitempty"`
	// Truncated is true when the host cut this heartbeat to fit the largest message it may
	// send; what was cut is said in docs/wire.md.
	Truncated bool `json:"truncated,omitempty"`
}

// LastReconcile is the most recent completed reconcile. Error is empty when OK.
type LastReconcile struct {
	At         time.Time `json:"at"`
	Trigger    Trigger   `json:"trigger"`
	OK         bool      `json:"ok"`
	Error      string    `json:"error"`
	DurationMS int64     `json:"duration_ms"`
}

// Rescue is a rescue as the heartbeat reports it. Pending is true until the host's first
// reconcile of a declaration after it: Adopted, Changed and Failed count what that reconcile
// found in state and owned as it was, created or changed to match, and could not apply;
// NotAdopted names the first MaxRescueNames of the changed and failed ("type id"), SetAside the
// versions whose binaries no longer matched their digests.
type Rescue struct {
	At         time.Time `json:"at"`
	Reason     string    `json:"reason"`
	MovedTo    string    `json:"moved_to"`
	Pending    bool      `json:"pending,omitempty"`
	OK         bool      `json:"ok"`
	Adopted    int       `json:"adopted"`
	Changed    int       `json:"changed"`
	Failed     int       `json:"failed"`
	NotAdopted []string  `json:"not_adopted,omitempty"`
	SetAside   []string  `json:"set_aside,omitempty"`
}

// Bounds of a rescue's report: names listed, and the bytes of each name and of the reason.
const (
	MaxRescueNames     = 20
	MaxRescueNameBytes = 300
)

// Rollback is one rollback from the records: the launcher went From a failing version To its
// known-good predecessor.
type Rollback struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Output string    `json:"output"`
}

// The states of a heartbeat's launcher.
const (
	LauncherConfirmed = "confirmed" // a delivered launcher version that has run a host here
	LauncherTrial     = "trial"     // a delivered launcher version that has not yet
	LauncherFloor     = "floor"     // the package's launcher, which the mesh never writes
)

// Launcher is the launcher image running the host (or that ran it last), and the newest
// launcher rollback while the image it rolled back to runs. Version is "" when the records do
// not say (a launcher that predates launcher versions wrote them); State is then "" too.
// RolledBackAt is by the node's clock: a rollout compares it with the one the node reported
// when its batch began, so a launcher rollback from before the rollout does not halt it.
type Launcher struct {
	Version        string    `json:"version"`
	Floor          string    `json:"floor"` // the package launcher's version ("" when unknown)
	State          string    `json:"state"` // LauncherConfirmed, LauncherTrial, LauncherFloor or ""
	RolledBackFrom string    `json:"rolled_back_from,omitempty"`
	RolledBackAt   time.Time `json:"rolled_back_at,omitzero"`
	RollbackReason string    `json:"rollback_reason,omitempty"`
}

// Refusal is the last declaration, target or withdrawal list the host refused (or, for the
// withdrawal list, could not act on). What is "declaration", "target" or "withdrawals";
// Revision is its KV revision.
type Refusal struct {
	What     string    `json:"what"`
	Revision uint64    `json:"revision"`
	Error    string    `json:"error"`
	At       time.Time `json:"at"`
}

// LinkFailure is the last time this host's link could not reach the bus (a refused or failed
// connection attempt, or the link lost). A heartbeat can only carry it once the link is back, so
// it is what tells the fleet why a node was silent. LastError names the reason and the cause
// (bounded, URLs redacted); Attempts is how many connection attempts in a row had failed by At.
type LinkFailure struct {
	LastError string    `json:"last_error"`
	At        time.Time `json:"at"`
	Attempts  int       `json:"attempts"`
}

// Fetch is the progress of fetching a host version (filled by delivery). State is one of
// "fetching", "verifying", "staged", "failed". StalledS is, while fetching, the seconds since
// the last byte arrived (absent while bytes flow); RetryAt is, with "failed", when the host
// tries again (absent when it does not: the version was refused).
type Fetch struct {
	State    string    `json:"state"`
	Version  string    `json:"version"`
	Bytes    int64     `json:"bytes"`
	Total    int64     `json:"total"`
	Percent  float64   `json:"percent"`
	RateBPS  int64     `json:"rate_bps"`
	StalledS int64     `json:"stalled_s,omitempty"`
	Error    string    `json:"error,omitempty"`
	RetryAt  time.Time `json:"retry_at,omitzero"`
	// LauncherNote is, with "staged", what became of the mesh-launcher the release carried
	// (at most 256 bytes): "launcher v0.3.0 staged", or why it was not staged — which never
	// keeps the host version from being staged. Absent when the release carried none or the
	// node had it already.
	LauncherNote string `json:"launcher_note,omitempty"`
	// Delta is the base version whose delta is being (or was) fetched instead of the archive
	// (decision 0028); absent when the node fetches the full archive. Bytes and Total are then
	// the delta's.
	Delta string `json:"delta,omitempty"`
	// Moved is every byte the node has fetched delivering the version so far, over its attempts:
	// a delta, the archive too when the delta could not be used, and fetches that failed part
	// way. Absent (0) before the first byte.
	Moved int64 `json:"moved,omitempty"`
}

// WindowState is the maintenance window a node keeps, judged by its own clock. Opens and
// Closes are the opening it is in (Open) or the next one, in the window's zone. WaitingFor is a
// staged version the node stands aside for once the window opens (absent when it waits for
// nothing); Waiting is then WaitingLine's text. ExpiredSince is set, and the window not kept,
// when the window in force has expired.
type WindowState struct {
	Key          string     `json:"key"`
	Spec         string     `json:"spec"`
	Open         bool       `json:"open"`
	Opens        time.Time  `json:"opens,omitzero"`
	Closes       time.Time  `json:"closes,omitzero"`
	WaitingFor   string     `json:"waiting_for,omitempty"`
	Waiting      string     `json:"waiting,omitempty"`
	ExpiredSince *time.Time `json:"expired_since,omitempty"`
}

// LinkMetered is the link class of a node whose bytes cost (host.json link_class).
const LinkMetered = "metered"

// Marshal returns the heartbeat's JSON with the schema filled in and empty lists written as []
// (and an empty by_type as {}) rather than null.
func (h Heartbeat) Marshal() []byte {
	h.Schema = HeartbeatSchema
	if h.Staged == nil {
		h.Staged = []string{}
	}
	if h.Rollbacks == nil {
		h.Rollbacks = []Rollback{}
	}
	if h.Inventory != nil && (h.Inventory.Disks == nil || h.Inventory.Owned.ByType == nil) {
		inv := *h.Inventory // a copy: the caller's heartbeat is left as it was
		if inv.Disks == nil {
			inv.Disks = []Disk{}
		}
		if inv.Owned.ByType == nil {
			inv.Owned.ByType = map[string]int{}
		}
		h.Inventory = &inv
	}
	if h.Profile != nil && h.Profile.ContainerRuntimes == nil {
		p := *h.Profile
		p.ContainerRuntimes = []RuntimeProbe{}
		h.Profile = &p
	}
	b, _ := json.Marshal(h)
	return b
}

// ParseHeartbeat decodes a heartbeat. Unlike declarations, a heartbeat is a report, not an
// order: fields added by newer hosts of the same schema are ignored so an older fleet view still
// reads them. Keys are still matched case-sensitively and duplicates refused (DecodeReport), so
// a heartbeat cannot say two things at once. The schema, node and state are checked.
func ParseHeartbeat(b []byte) (Heartbeat, error) {
	var h Heartbeat
	if err := DecodeReport(b, &h); err != nil {
		return Heartbeat{}, fmt.Errorf("heartbeat: %w", err)
	}
	if h.Schema != HeartbeatSchema {
		return Heartbeat{}, fmt.Errorf("heartbeat: schema %d is not supported (this tool reads schema %d)", h.Schema, HeartbeatSchema)
	}
	if err := ValidNode(h.Node); err != nil {
		return Heartbeat{}, fmt.Errorf("heartbeat: %w", err)
	}
	switch h.State {
	case StateRunning, StateStandingAside, StateStopping:
	default:
		return Heartbeat{}, fmt.Errorf("heartbeat: unknown state %q (running, standing-aside or stopping)", h.State)
	}
	return h, nil
}
