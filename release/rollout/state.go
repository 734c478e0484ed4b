package rollout

import (
	"time"

	"github.com/novox/mesh-host/release/fleet"
)

// Schema is the format of the state this package writes: 3, a head under rollout.<id> and its
// node list in chunks (decision 0021) that may say which nodes read plans (decision 0047).
// Schema 2 (the same without readers) and schema 1, the state as one value, are read still.
const Schema = 3

// Policy is how a rollout reaches the fleet.
type Policy string

const (
	// PolicyCanary stages the release: canaries, then each step, halting on the first sign of
	// trouble. The default.
	PolicyCanary Policy = "canary"
	// PolicyImmediate sets the fleet key at once (for labs): no batches, no gate.
	PolicyImmediate Policy = "immediate"
)

// Status is where a rollout is. Only StatusRunning may change; the others are final.
type Status string

const (
	StatusRunning    Status = "running"
	StatusCompleted  Status = "completed"  // every batch soaked; the fleet key names the version
	StatusHalted     Status = "halted"     // a node of a batch showed trouble; see Halt
	StatusAborted    Status = "aborted"    // an operator stopped it (`rollout abort`)
	StatusSuperseded Status = "superseded" // a newer rollout replaced it (--supersede, or watch)
)

// Final reports whether s can no longer change.
func (s Status) Final() bool { return s != StatusRunning }

// Paused reports whether st is running with no controller driving it as of now: none holds it
// (the last one stopped by a signal released it) or the holder's lease lapsed (it was killed,
// or lost the bus). A controller renews its lease every third of --lease, so a lease that ran
// out is a controller gone; `rollout resume` continues the rollout.
func (st State) Paused(now time.Time) bool {
	return st.Status == StatusRunning && (st.Holder == nil || !st.Holder.Until.After(now))
}

// Defaults of `mesh-release rollout start`.
const (
	DefaultCanary      = 2
	DefaultWindow      = 10 * time.Minute
	DefaultSoak        = 2 * time.Minute
	DefaultAlive       = 10 * time.Minute
	DefaultSilentAfter = fleet.DefaultSilentAfter // 3 of the host's default heartbeat intervals
	DefaultLease       = 30 * time.Second
)

// DefaultSteps are the cumulative shares of the fleet after the canaries, in percent.
var DefaultSteps = []int{10, 50, 100}

// NodeWindow is a node waiting for its maintenance window, and when the window opens (in the
// window's zone, as its heartbeat says it).
type NodeWindow struct {
	Node  string    `json:"node"`
	Opens time.Time `json:"opens"`
}

// Options are what a rollout is asked to do; the flags of `rollout start`.
type Options struct {
	Version     string
	Policy      Policy        // default PolicyCanary
	Canary      int           // how many canaries the rule picks (ignored with CanaryNodes)
	CanaryNodes []string      // the canaries, named; each must be in the fleet
	Steps       []int         // cumulative percent of the fleet, increasing, the last 100
	Window      time.Duration // a batch's nodes must confirm within this of its targets being set
	Soak        time.Duration // and then stay confirmed, without restarting, for this
	Alive       time.Duration // the fleet is every node heard from within this at the start
	SilentAfter time.Duration // a node unheard this long when its batch begins is left out
	Supersede   bool          // replace a running rollout instead of refusing to start
	// Urgent signs every target the rollout sets urgent: nodes stand aside for it without
	// waiting for their maintenance windows (decision 0029).
	Urgent bool
	// IncludeMetered plans metered nodes (heartbeat link_class metered) as any other; without
	// it they are deferred to the last batch and are never hash-chosen canaries.
	IncludeMetered bool
	// CanaryGiven: Canary was asked for (--canary), so a number below the platforms the rollout
	// targets is refused; otherwise it is raised to one canary per platform.
	CanaryGiven bool
	// SkipPlatforms leaves the nodes of these platforms ("linux/arm/v7") out of the rollout
	// explicitly (--skip-platform): without it, a version with no build for a node's platform
	// is refused (decision 0043).
	SkipPlatforms []string
	// SkipOldHosts leaves out the nodes whose hosts cannot read the version's manifest schema
	// (their heartbeats say no manifest_schema of it or more); without it the version is refused.
	SkipOldHosts bool
	// Salt orders the fleet for the rollout's plan (32 lowercase hex digits, --salt); empty:
	// wire.PlanSalt(Version), so `rollout plan` and `rollout start` say the same batches.
	Salt string
}

// State is a rollout as KV <prefix>_rollouts holds it: what it was asked, whom it covers, how
// far it got and why it stopped. Its head, under rollout.<ID>, is all of it but Nodes and Ran,
// bounded by the bucket's max value size (bus.MaxRolloutBytes); Nodes and Ran are in chunks the
// head names (layout.go, decision 0021). Node lists are stored once, batches as ends into them.
type State struct {
	Schema  int       `json:"schema"`
	ID      string    `json:"id"`
	Version string    `json:"version"`
	Policy  Policy    `json:"policy"`
	Status  Status    `json:"status"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	Ended   time.Time `json:"ended,omitzero"`

	Canary       int      `json:"canary"`
	CanaryNodes  []string `json:"canary_nodes,omitempty"`
	Steps        []int    `json:"steps"`
	WindowS      float64  `json:"window_s"`
	SoakS        float64  `json:"soak_s"`
	AliveS       float64  `json:"alive_s"`
	SilentAfterS float64  `json:"silent_after_s"`
	// Urgent: the rollout's targets are signed urgent (Options.Urgent).
	Urgent bool `json:"urgent,omitempty"`
	// Metered is how many metered nodes the plan deferred to the last batch (0 with
	// --include-metered, or when none or every node is metered).
	Metered int `json:"metered_deferred,omitempty"`
	// Skipped are the nodes left out by platform when the rollout started (--skip-platform,
	// --skip-old-hosts): not in Nodes, never targeted by it (decision 0043).
	Skipped []SkippedPlatform `json:"skipped_platforms,omitempty"`

	// Nodes is the fleet at the start in rollout order (canaries first); Ran is, index for
	// index, the version each node ran then — what a halt sets its target back to.
	Nodes []string `json:"nodes"`
	Ran   []string `json:"ran"`
	// Batches cut Nodes into consecutive runs; Current is the index of the batch in progress
	// (len(Batches) once all are done).
	Batches []Batch `json:"batches"`
	Current int     `json:"current"`
	// LeftOut are nodes skipped because they were silent when their batch began.
	LeftOut []LeftOut `json:"left_out"`
	// LeftOutMore counts nodes left out but not listed, so that the state stays within the
	// bucket's max value size; a resumed controller tells them by their silence (see leftOut).
	LeftOutMore int   `json:"left_out_more,omitempty"`
	Halt        *Halt `json:"halt,omitempty"`
	// Restored is true once, after a halt or an abort, every node of the batch in progress has
	// its target set back to the version it ran (Ran); a controller that finds a stopped
	// rollout not yet restored restores it.
	Restored bool `json:"targets_restored,omitempty"`
	// Holder is the controller acting on this rollout and its lease.
	Holder       *Holder `json:"holder,omitempty"`
	SupersededBy string  `json:"superseded_by,omitempty"`
	// BytesMoved is what the rollout's nodes fetched delivering the version, as their
	// heartbeats said (fetch.moved), summed when a batch is done and when it completes.
	BytesMoved int64 `json:"bytes_moved,omitempty"`
	// Supersedes is the rollout this one superseded when it started: the per-node targets that
	// one set and left are among those this one clears when it completes (see clearLeftBehind).
	Supersedes string `json:"supersedes,omitempty"`
	AbortedBy  string `json:"aborted_by,omitempty"`
	// Plan is the signed plan the rollout writes under wire.PlanKey (issue 30, decision 0047):
	// absent from rollouts started before it.
	Plan *PlanRef `json:"plan,omitempty"`
	// Readers is, index for index with Nodes, whether the node takes the plan: its heartbeat
	// said it reads plans (heartbeat plans >= wire.PlanSchema) and it had no target key of its
	// own when the rollout was planned. Any other is given a per-node target when its batch
	// begins. Kept with Nodes in the
	// node list's chunks; nil in rollouts started before issue 30 (every node per-node).
	Readers []bool `json:"readers,omitempty"`
}

// PlanRef is what a rollout's state keeps of its plan: what it was planned with (Salt, Waves,
// MeteredLast, SkipPlatforms; the canaries are the first batch of Nodes) and the last plan it
// wrote (Seq, and Revision, the plan key's revision then: the next write is a compare-and-set on
// it).
type PlanRef struct {
	Salt          string   `json:"salt"`
	Canaries      int      `json:"canaries"` // the first Canaries of Nodes
	Waves         []uint32 `json:"waves"`
	MeteredLast   bool     `json:"metered_last,omitempty"`
	SkipPlatforms []string `json:"skip_platforms,omitempty"`
	Seq           uint64   `json:"seq,omitempty"`
	Revision      uint64   `json:"revision,omitempty"`
}

// Batch is Nodes[previous End:End].
type Batch struct {
	Name    string    `json:"name"` // "canary", or the step: "10%"
	End     int       `json:"end"`
	Started time.Time `json:"started,omitzero"` // when its targets were set
	Done    time.Time `json:"done,omitzero"`    // when its last node finished its soak
	// Platforms counts the batch's nodes by platform when planned (UnknownPlatform for those
	// whose heartbeat said none); absent when no node said one, and in rollouts started before
	// issue 28.
	Platforms []PlatformCount `json:"platforms,omitempty"`
	// In is the plan's In while this batch runs: the batches of the plan it holds (the
	// canaries are 1, wave k is 1+k). Waves that hold no node of the fleet are no batch here,
	// so In may step by more than one. 0 in rollouts started before issue 30.
	In int `json:"plan_in,omitempty"`
	// PerNode is how many of the batch's nodes were given a per-node target when it began:
	// those not taking the plan (State.Readers).
	PerNode int `json:"per_node_targets,omitempty"`
}

// LeftOut is a node skipped because it was silent when its batch began.
type LeftOut struct {
	Node        string    `json:"node"`
	Batch       int       `json:"batch"` // index into Batches
	SilentSince time.Time `json:"silent_since"`
}

// Halt says why a rollout halted: each node of the batch that showed trouble (at most
// MaxHaltNodes, the rest counted in More).
type Halt struct {
	At    time.Time    `json:"at"`
	Batch int          `json:"batch"` // index into Batches
	Nodes []NodeReason `json:"nodes"`
	More  int          `json:"more,omitempty"`
	// Platforms is how each platform of the batch fared, troubled ones first (absent when no
	// node of the batch said its platform, and in halts before issue 28).
	Platforms []PlatformOutcome `json:"platforms,omitempty"`
}

// PlatformOutcome is how the judged nodes of one platform of a batch fared: how many there
// are, confirmed and soaked, and how many showed trouble, with Why when all of them showed the
// same (a Why* constant).
type PlatformOutcome struct {
	Platform  string `json:"platform"`
	Nodes     int    `json:"nodes"`
	Confirmed int    `json:"confirmed"`
	Soaked    int    `json:"soaked"`
	Troubled  int    `json:"troubled,omitempty"`
	Why       string `json:"why,omitempty"`
}

// MaxHaltNodes bounds the nodes a halt report names; the rest are counted.
const MaxHaltNodes = 20

// Why a node halted a rollout.
const (
	WhySilent     = "silent"      // unheard for longer than the window
	WhyRolledBack = "rolled-back" // its launcher rolled back from the version
	// WhyLauncherRolledBack: the node's launcher rolled back from a launcher version (the one
	// the release carried, or any other taken during the batch).
	WhyLauncherRolledBack = "launcher-rolled-back"
	WhyRestarted          = "restarted"     // the version restarted during its soak
	WhyRefused            = "refused"       // the host refused the target (bad here, verification, preflight)
	WhyNotConfirmed       = "not-confirmed" // it did not confirm the version within the window
	// WhyTrustExpired: the node's trust expired (decision 0045): it runs what it has and takes
	// no new target until a fresher root reaches it, so waiting for it is waiting for nothing.
	WhyTrustExpired = "trust-expired"
)

// NodeReason is one node's part in a halt. Detail is for a person (bounded, printable); Output
// is the failed version's last output lines from the node's heartbeat (bounded).
type NodeReason struct {
	Node   string    `json:"node"`
	Why    string    `json:"why"`
	Detail string    `json:"detail"`
	Since  time.Time `json:"since,omitzero"` // silent: when last heard; rolled-back: when
	Output string    `json:"output,omitempty"`
}

// Holder is the controller acting on a rollout: ID names it for a person ("hostname pid 4242"),
// and it holds the rollout until Until unless it renews.
type Holder struct {
	ID    string    `json:"id"`
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Extra is the text the controller was given to name itself (Config.Holder: "watch").
	Extra string `json:"extra,omitempty"`
	// Token tells apart controllers of one process (a watch and a start, or tests): a holder is
	// this controller only when host, pid and token all match.
	Token string `json:"token,omitempty"`
}

// Event is one thing a controller did or saw, for --follow (text) and --json (one per line).
type Event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"event"` // see the Event* constants
	Rollout string    `json:"rollout"`
	Version string    `json:"version"`
	// Batch is 1-based; 0 when the event is not about a batch.
	Batch     int    `json:"batch,omitempty"`
	Batches   int    `json:"batches,omitempty"`
	BatchName string `json:"batch_name,omitempty"`
	// Progress of the batch (EventProgress, EventBatchDone).
	Nodes       int     `json:"nodes,omitempty"`
	Confirmed   int     `json:"confirmed,omitempty"`
	Soaked      int     `json:"soaked,omitempty"`
	ElapsedS    float64 `json:"elapsed_s,omitempty"`
	WindowLeftS float64 `json:"window_left_s,omitempty"`
	// EventProgress while nodes soak: about how long until the last of them has soaked by the
	// controller's clock, and the nodes whose soak is over by it but that must be heard once
	// more to show it (at most maxListed of them, in batch order).
	SoakLeftS float64 `json:"soak_left_s,omitempty"`
	// BytesMoved is what the rollout's nodes have fetched so far delivering the version, as
	// their heartbeats said (progress, batch-done, completed).
	BytesMoved int64    `json:"bytes_moved,omitempty"`
	Waiting    []string `json:"waiting_for_heartbeat,omitempty"`
	// Platforms is the batch's progress by platform (progress, batch, batch-done, halted), when
	// its nodes said their platforms.
	Platforms []PlatformOutcome `json:"platforms,omitempty"`
	// WindowWaiting are the nodes of the batch that have staged the version and wait for their
	// maintenance windows to stand aside, each with when its window opens (at most 8 listed).
	WindowWaiting []NodeWindow `json:"waiting_for_window,omitempty"`
	// Node is set for node events; Reasons for EventHalted.
	Node    string       `json:"node,omitempty"`
	Reasons []NodeReason `json:"reasons,omitempty"`
	// Message says the event for a person, in one line.
	Message string `json:"message"`
}

// Event kinds.
const (
	EventStarted    = "started"    // planned and stored; Message names the batches
	EventResumed    = "resumed"    // a controller took over a running rollout
	EventBatch      = "batch"      // a batch's targets were set
	EventLeftOut    = "left-out"   // a node was skipped: silent when its batch began
	EventConfirmed  = "confirmed"  // a node runs the version confirmed
	EventSoaked     = "soaked"     // a node stayed confirmed for the soak
	EventProgress   = "progress"   // periodic, with --follow
	EventBatchDone  = "batch-done" // every node of the batch soaked
	EventHalted     = "halted"     // with Reasons
	EventCompleted  = "completed"  // the fleet key names the version; per-node keys cleared
	EventAborted    = "aborted"    // by an operator
	EventSuperseded = "superseded" // by a newer rollout
	EventPublished  = "published"  // watch: a newer release was announced
	EventSkipped    = "skipped"    // watch: a release not rolled out, and why
)
