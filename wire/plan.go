package wire

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
)

// A rollout plan (issue 30, decision 0047) is one signed document per rollout that every node
// evaluates for itself: the version, a salt, the canaries by node id and the waves as
// cumulative fractions of the hash space. A node is in wave k when PlanBucket(salt, node) is
// below Waves[k]; the plan's In says how many batches (canaries first, then each wave) it holds
// now. Each batch the controller starts is one write raising In, a halt one write lowering it
// to the batches done. The plan is the targets role's, so a writer on the bus who is not the
// release side cannot widen a rollout.

// PlanKey is the key of the plan in force in the rollouts bucket (Names.Rollouts): one plan,
// the newest rollout's. A node follows it as it follows its target keys (wire.NodeUserVersion 5).
const PlanKey = "plan"

// PlanSchema is the schema of plans a host reads, said in its heartbeat's plans: a host whose
// heartbeat says none (older than issue 30, or whose user may not read PlanKey yet) gets
// per-node targets from a rollout instead.
const PlanSchema = 1

// PlanSigningHeader is the first line of the text a plan's signature covers.
const PlanSigningHeader = "mesh-host plan 1\n"

// KindPlan is a rollout plan's kind of signed document.
const KindPlan = "plan"

// Limits of a plan.
const (
	MaxPlanBytes        = 16 << 10
	MaxPlanCanaries     = 64
	MaxPlanWaves        = 100
	MaxPlanSkipped      = 32
	MaxPlanReasonBytes  = 512
	MaxPlanRolloutBytes = 200
	// PlanScale is what a wave's fraction is counted in: parts per million. A node's bucket is
	// 0..PlanScale-1.
	PlanScale = 1_000_000
)

// The states of a plan.
const (
	PlanRunning   = "running"
	PlanHalted    = "halted"
	PlanCompleted = "completed"
	PlanAborted   = "aborted"
)

// Plan is the value under PlanKey. The signature covers SigningText(), documented in
// docs/wire.md ("Rollout plans"):
//
//	mesh-host plan 1
//	key=plan
//	rollout=20261202T120000Z-v1.4.0
//	version=v1.4.0
//	seq=1764417600000
//	expires=2026-12-09T12:00:00Z
//	salt=0123456789abcdef0123456789abcdef
//	canary=web-01
//	canary=arm-07
//	waves=10000,100000,500000,1000000
//	in=2
//	state=running
//
// then "reason=<text>\n" when Reason is set, one "skip_platform=<p>\n" per skipped platform,
// "metered_last=true\n" and "urgent=true\n" when set. Every line ends in "\n".
type Plan struct {
	Rollout string `json:"rollout"`
	Version string `json:"version"`
	Seq     uint64 `json:"seq"`
	Expires string `json:"expires"`
	// Salt is 32 lowercase hex digits: the rollout's hash order (PlanBucket).
	Salt string `json:"salt"`
	// Canaries are the first batch, by node id.
	Canaries []string `json:"canaries"`
	// Waves are the batches after the canaries as cumulative fractions in parts per million,
	// strictly increasing, the last PlanScale (every node).
	Waves []uint32 `json:"waves"`
	// In is how many batches the plan holds now: 0 none, 1 the canaries, 1+k the canaries and
	// the first k waves. A running plan holds the batch in progress; a halted or aborted one
	// the batches done; a completed one all (1+len(Waves)), and holds no node (Holds).
	In     int    `json:"in"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// SkipPlatforms are platforms (wire.Platform.String) the rollout leaves out: no node of one
	// is in any wave (a canary is named, and is never of one).
	SkipPlatforms []string `json:"skip_platforms,omitempty"`
	// MeteredLast puts nodes on a metered link (heartbeat link_class) in the last wave only.
	MeteredLast bool `json:"metered_last,omitempty"`
	// Urgent: nodes do not wait for their maintenance window (as an urgent target).
	Urgent bool `json:"urgent,omitempty"`
	SignatureList
}

// Errors Plan.Verify returns (wrapped, with the details); test them with errors.Is.
var (
	ErrPlanUnsigned     = errors.New("plan is not signed")
	ErrPlanUnknownKey   = errors.New("plan is signed by a key this node does not trust")
	ErrPlanBadSignature = errors.New("plan signature does not verify: a field was altered after signing, or the signature is corrupt")
)

// ParsePlan decodes a plan strictly, at most MaxPlanBytes, and checks its fields (Validate).
// It does not check the signatures: that is Verify.
func ParsePlan(b []byte) (Plan, error) { return parseSigned[Plan](KindPlan, b) }

// Validate checks every field except the signatures, naming the first one that is wrong.
func (p Plan) Validate() error {
	if p.Rollout == "" || len(p.Rollout) > MaxPlanRolloutBytes || strings.ContainsAny(p.Rollout, "\n\r") {
		return fmt.Errorf("plan: rollout %q is not a rollout id (1 to %d bytes, one line)", txt.Bound(p.Rollout), MaxPlanRolloutBytes)
	}
	if !ValidVersion(p.Version) {
		return fmt.Errorf("plan: version %q is not %s", txt.Bound(p.Version), VersionRule)
	}
	if err := checkSeq("plan", p.Seq); err != nil {
		return err
	}
	if _, err := time.Parse(time.RFC3339, p.Expires); err != nil {
		return fmt.Errorf("plan: expires %q is not an RFC 3339 time like 2026-12-06T12:00:00Z", txt.Bound(p.Expires))
	}
	if !validSalt(p.Salt) {
		return fmt.Errorf("plan: salt %q is not 32 lowercase hex digits", txt.Bound(p.Salt))
	}
	if len(p.Canaries) > MaxPlanCanaries {
		return fmt.Errorf("plan: %d canaries, more than the %d allowed", len(p.Canaries), MaxPlanCanaries)
	}
	seen := make(map[string]bool, len(p.Canaries))
	for _, c := range p.Canaries {
		if err := ValidNode(c); err != nil {
			return fmt.Errorf("plan: canary: %w", err)
		}
		if seen[c] {
			return fmt.Errorf("plan: canary %s is named twice", c)
		}
		seen[c] = true
	}
	if len(p.Waves) == 0 || len(p.Waves) > MaxPlanWaves {
		return fmt.Errorf("plan: %d waves; a plan has 1 to %d", len(p.Waves), MaxPlanWaves)
	}
	for i, w := range p.Waves {
		if w == 0 || w > PlanScale || (i > 0 && w <= p.Waves[i-1]) {
			return fmt.Errorf("plan: waves %v are not increasing fractions of %d above 0", p.Waves, PlanScale)
		}
	}
	if last := p.Waves[len(p.Waves)-1]; last != PlanScale {
		return fmt.Errorf("plan: the last wave is %d, not %d: a plan ends with every node", last, PlanScale)
	}
	if p.In < 0 || p.In > p.Batches() {
		return fmt.Errorf("plan: in is %d; a plan of %d batches holds 0 to %d", p.In, p.Batches(), p.Batches())
	}
	switch p.State {
	case PlanRunning, PlanHalted, PlanAborted:
	case PlanCompleted:
		if p.In != p.Batches() {
			return fmt.Errorf("plan: completed with in %d of %d batches", p.In, p.Batches())
		}
	default:
		return fmt.Errorf("plan: state %q is not running, halted, completed or aborted", txt.Bound(p.State))
	}
	if len(p.Reason) > MaxPlanReasonBytes || strings.ContainsAny(p.Reason, "\n\r") {
		return fmt.Errorf("plan: reason is not one line of at most %d bytes", MaxPlanReasonBytes)
	}
	if len(p.SkipPlatforms) > MaxPlanSkipped {
		return fmt.Errorf("plan: %d skipped platforms, more than the %d allowed", len(p.SkipPlatforms), MaxPlanSkipped)
	}
	for _, s := range p.SkipPlatforms {
		if _, err := ParsePlatform(s); err != nil {
			return fmt.Errorf("plan: skip_platform: %w", err)
		}
	}
	return p.SignatureList.Check("plan")
}

// ValidPlanSalt says why s is not a plan's salt, or nil.
func ValidPlanSalt(s string) error {
	if !validSalt(s) {
		return errors.New("a plan's salt is 32 lowercase hex digits")
	}
	return nil
}

func validSalt(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Batches is how many batches the plan has: the canaries and each wave.
func (p Plan) Batches() int { return 1 + len(p.Waves) }

// ExpiresAt is Expires as a time; the zero time if it does not parse (Validate refuses that).
func (p Plan) ExpiresAt() time.Time {
	at, _ := time.Parse(time.RFC3339, p.Expires)
	return at
}

// ExpiredAt reports whether the plan is past its expiry at now.
func (p Plan) ExpiredAt(now time.Time) bool { return expiredAt(p.ExpiresAt(), now) }

// PlanBucket is where node falls in a plan salted with salt, 0..PlanScale-1: h is the first 8
// bytes of SHA-256(salt ‖ node) — the salt's 32 hex digits as ASCII, then the node id's bytes —
// read as a big-endian unsigned integer, and the bucket is floor(h × PlanScale / 2^64). A node
// is in a wave of fraction w (parts per million) when its bucket is below w.
func PlanBucket(salt, node string) uint32 {
	h := sha256.New()
	h.Write([]byte(salt))
	h.Write([]byte(node))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	hi, _ := bits.Mul64(binary.BigEndian.Uint64(sum[:8]), PlanScale)
	return uint32(hi)
}

// PlanNode is what a node knows of itself when it evaluates a plan.
type PlanNode struct {
	ID       string
	Platform string // wire.Platform.String(); "" when unknown
	Metered  bool   // its link class is LinkMetered
}

// BatchOf is the batch that holds node in the plan: 0 for the canaries, k for wave k (1-based),
// and -1 when no batch ever does (a skipped platform).
func (p Plan) BatchOf(n PlanNode) int {
	for _, c := range p.Canaries {
		if c == n.ID {
			return 0
		}
	}
	for _, s := range p.SkipPlatforms {
		if n.Platform != "" && s == n.Platform {
			return -1
		}
	}
	if n.Metered && p.MeteredLast {
		return len(p.Waves)
	}
	b := PlanBucket(p.Salt, n.ID)
	for k, w := range p.Waves {
		if b < w {
			return k + 1
		}
	}
	return -1 // unreachable: the last wave is PlanScale
}

// Holds reports whether the plan holds node now: its batch is one of the first In, and the plan
// has not completed. A completed plan holds no node: the controller sets the fleet key to the
// version before it writes the plan completed, so the fleet key is what every node follows from
// then on, and an operator's later fleet target is not shadowed by a finished rollout.
func (p Plan) Holds(n PlanNode) bool {
	if p.State == PlanCompleted {
		return false
	}
	b := p.BatchOf(n)
	return b >= 0 && b < p.In
}

// SigningText returns the exact bytes the signatures cover.
func (p Plan) SigningText() []byte {
	var b bytes.Buffer
	line := func(k, v string) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	b.WriteString(PlanSigningHeader)
	line("key", PlanKey)
	line("rollout", p.Rollout)
	line("version", p.Version)
	line("seq", strconv.FormatUint(p.Seq, 10))
	line("expires", p.Expires)
	line("salt", p.Salt)
	for _, c := range p.Canaries {
		line("canary", c)
	}
	waves := make([]string, len(p.Waves))
	for i, w := range p.Waves {
		waves[i] = strconv.FormatUint(uint64(w), 10)
	}
	line("waves", strings.Join(waves, ","))
	line("in", strconv.Itoa(p.In))
	line("state", p.State)
	if p.Reason != "" {
		line("reason", p.Reason)
	}
	for _, s := range p.SkipPlatforms {
		line("skip_platform", s)
	}
	if p.MeteredLast {
		line("metered_last", "true")
	}
	if p.Urgent {
		line("urgent", "true")
	}
	return b.Bytes()
}

// Envelope is the plan as the verifier sees it: signed by the targets role, expiring at Expires.
func (p Plan) Envelope() Envelope {
	return Envelope{Kind: KindPlan, Name: p.Rollout, Role: RoleTargets, Text: p.SigningText(), Signatures: p.List(), Expires: p.ExpiresAt()}
}

// Verify checks that the plan was signed as trust requires at now (a threshold of the targets
// role's keys; one trusted target key before any root). It does not judge expiry: ExpiredAt
// does.
func (p Plan) Verify(trust Trust, now time.Time) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return verifyDocument(trust, p.Envelope(), now, ErrPlanUnsigned, ErrPlanUnknownKey, ErrPlanBadSignature)
}

// Sign validates the plan and signs it with priv: the first signature, replacing any it had.
func (p *Plan) Sign(priv ed25519.PrivateKey) error {
	p.SignatureList = SignatureList{}
	return p.AddSignature(priv)
}

// AddSignature validates the plan and adds priv's signature to those it has.
func (p *Plan) AddSignature(priv ed25519.PrivateKey) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("sign plan: %w", err)
	}
	if err := p.SignatureList.Add(p.SigningText(), priv); err != nil {
		return fmt.Errorf("sign plan %s: %w", txt.Bound(p.Rollout), err)
	}
	return nil
}

// NextPlanSeq is the seq of a plan replacing one of seq prev at now: the larger of prev + 1 and
// now in Unix milliseconds, as a target's (NewTarget).
func NextPlanSeq(prev uint64, now time.Time) uint64 {
	return max(prev+1, uint64(max(now.UnixMilli(), 0)))
}

// PlanSalt is the salt a rollout of version gets unless the operator gives one: the first 16
// bytes of SHA-256("mesh-host plan salt\n" + version) in hex, so `rollout plan` and `rollout
// start` print the same batches, and a rollout of the version started again keeps its order.
func PlanSalt(version string) string {
	sum := sha256.Sum256([]byte("mesh-host plan salt\n" + version))
	return fmt.Sprintf("%x", sum[:16])
}

// PercentToPlanScale turns a percentage (as rollout steps give it: 1..100) into parts per
// million.
func PercentToPlanScale(percent int) uint32 { return uint32(percent) * (PlanScale / 100) }

// Marshal returns the plan's JSON.
func (p Plan) Marshal() []byte { b, _ := json.Marshal(p); return b }
