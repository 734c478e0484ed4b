package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// The fleet's trust (decision 0045): each node's heartbeat says the newest root it holds
// (trust_root, 0 while it trusts host.json's keys only) and, when that root has expired, since
// when. A node is behind when its root is older than the newest root on the bus, the one every
// node walks to; it still runs and takes targets its root's keys signed, but not what a rotated
// key signs. A node whose trust expired keeps running what it has and takes no new target.

// RootReader finds the newest root on the bus: the releases bucket's keys root.1, root.2, …
// walked as a node walks them (each next root signed by a threshold of the one before and of its
// own, wire.Trust.Advance), so a root a node would refuse is not taken as the fleet's newest.
// It remembers where it got to: a read after the first costs one get (the next version's key).
// Safe for concurrent use.
type RootReader struct {
	mu      sync.Mutex
	kv      jetstream.KeyValue
	trust   wire.Trust
	problem string // why the root after the newest is refused, "" when none is
}

// Newest is the version of the newest root on the bus (0 when it holds none), and, when the
// root after it is on the bus but refused, why (the walk stops there, as a node's does). err
// says the bucket could not be read; a bus without the releases bucket holds no root.
func (r *RootReader) Newest(ctx context.Context, js jetstream.JetStream, n wire.Names) (version uint64, refused string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kv == nil {
		kv, err := js.KeyValue(ctx, n.Releases())
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, "", nil
		}
		if err != nil {
			return r.trust.Version(), r.problem, fmt.Errorf("read the roots in %s: %w", n.Releases(), err)
		}
		r.kv = kv
	}
	for range maxRootsPerRead {
		next := r.trust.Version() + 1
		e, err := r.kv.Get(ctx, wire.RootKey(next))
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			r.problem = ""
			break
		}
		if err != nil {
			return r.trust.Version(), r.problem, fmt.Errorf("read %s in %s: %w", wire.RootKey(next), n.Releases(), err)
		}
		t, err := r.advance(e.Value())
		if err != nil {
			r.problem = fmt.Sprintf("%s in %s is refused: %v", wire.RootKey(next), n.Releases(), err)
			break
		}
		r.trust, r.problem = t, ""
	}
	return r.trust.Version(), r.problem, nil
}

// Root is the newest root the reader walked to; ok is false before it found one.
func (r *RootReader) Root() (root wire.Root, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trust.Root()
}

// maxRootsPerRead bounds the roots one read walks: a bus with more catches up over reads.
const maxRootsPerRead = 64

// advance is the reader's trust with the root b holds: the first taken when a threshold of its
// own root keys signed it (as an enrolment token's pin takes it), each next one as a node takes it.
func (r *RootReader) advance(b []byte) (wire.Trust, error) {
	root, err := wire.ParseRoot(b)
	if err != nil {
		return wire.Trust{}, err
	}
	if r.trust.Version() == 0 {
		return wire.PinnedTrust(root, root.Fingerprint())
	}
	return r.trust.Advance(root)
}

// newestRoot is the root the fleet's nodes are judged against: the newest on the bus (busRoot),
// or, while the bus holds none (or it could not be read), the newest a node's heartbeat says.
func newestRoot(busRoot uint64, hbs func(func(wire.Heartbeat))) uint64 {
	if busRoot > 0 {
		return busRoot
	}
	var heard uint64
	hbs(func(hb wire.Heartbeat) { heard = max(heard, hb.TrustRoot) })
	return heard
}

// trustFacts sets r's trust fields from hb, judged against the newest root.
func (r *Row) trustFacts(hb wire.Heartbeat, newest uint64) {
	r.TrustRoot, r.TrustExpiredSince = hb.TrustRoot, hb.TrustExpiredSince
	r.TrustBehind = hb.TrustRoot < newest
}

// ShowsTrust reports whether the fleet has any trust to show: a root on the bus or held by a
// node, or a node whose trust expired. A fleet with no roots shows no TRUST column.
func ShowsTrust(rows []Row) bool {
	return slices.ContainsFunc(rows, func(r Row) bool {
		return r.TrustRoot > 0 || r.TrustBehind || r.TrustExpiredSince != nil
	})
}

// rootName is "root v4", or "no root" for 0 (host.json's keys only, or a host older than roots).
func rootName(v uint64) string {
	if v == 0 {
		return "no root"
	}
	return "root v" + strconv.FormatUint(v, 10)
}

// TrustText is the TRUST cell: `root v4`, `root v3 (behind)`, `no root (behind)`,
// `root v4 (expired)`, `root v3 (behind, expired)`; `-` for a row without a heartbeat.
func TrustText(r Row) string {
	if r.Heartbeat == nil {
		return "-"
	}
	var notes []string
	if r.TrustBehind {
		notes = append(notes, "behind")
	}
	if r.TrustExpiredSince != nil {
		notes = append(notes, "expired")
	}
	s := rootName(r.TrustRoot)
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, ", ") + ")"
	}
	if s == "no root" {
		return "-"
	}
	return s
}

// TrustCount is the fleet's trust in numbers: the newest root (Root), how many nodes hold it
// (or a newer one), how many are behind and on which roots (newest first, 0 last), how many
// have trust that expired. Nodes whose heartbeat is unreadable are not counted.
type TrustCount struct {
	Root       uint64
	OnNewest   int
	Behind     int
	BehindOn   []uint64
	Expired    int
	Considered int
}

// TrustOf counts rows' trust against newest (the root the rows were judged with; TrustRoot
// of RowOptions, or the newest a heartbeat says when that was 0).
func TrustOf(rows []Row, newest uint64) TrustCount {
	c := TrustCount{Root: newest}
	seen := map[uint64]bool{}
	for _, r := range rows {
		if r.Heartbeat == nil {
			continue
		}
		c.Considered++
		if r.TrustBehind {
			c.Behind++
			if !seen[r.TrustRoot] {
				seen[r.TrustRoot] = true
				c.BehindOn = append(c.BehindOn, r.TrustRoot)
			}
		} else {
			c.OnNewest++
		}
		if r.TrustExpiredSince != nil {
			c.Expired++
		}
	}
	slices.SortFunc(c.BehindOn, func(a, b uint64) int {
		switch {
		case a == b:
			return 0
		case a == 0 || (b != 0 && a < b):
			return 1
		}
		return -1
	})
	return c
}

// NewestRootOf is the root rows were judged against with busRoot (RowOptions.TrustRoot): busRoot,
// or the newest a heartbeat of rows says while it is 0.
func NewestRootOf(rows []Row, busRoot uint64) uint64 {
	return newestRoot(busRoot, func(f func(wire.Heartbeat)) {
		for _, r := range rows {
			if r.Heartbeat != nil {
				f(*r.Heartbeat)
			}
		}
	})
}

// shownBehind is how many roots the trust line names the behind nodes by.
const shownBehind = 4

// Line is the line under the table: `trust: 5 on root v4, 1 behind (v3), 1 expired`; the
// behind nodes' roots newest first, "no root" for nodes on host.json's keys.
func (c TrustCount) Line() string {
	parts := []string{fmt.Sprintf("%d on %s", c.OnNewest, rootName(c.Root))}
	if c.Behind > 0 {
		names := make([]string, 0, min(len(c.BehindOn), shownBehind)+1)
		for i, v := range c.BehindOn {
			if i == shownBehind {
				names = append(names, "…")
				break
			}
			if v == 0 {
				names = append(names, "no root")
			} else {
				names = append(names, "v"+strconv.FormatUint(v, 10))
			}
		}
		parts = append(parts, fmt.Sprintf("%d behind (%s)", c.Behind, strings.Join(names, ", ")))
	}
	if c.Expired > 0 {
		parts = append(parts, fmt.Sprintf("%d expired", c.Expired))
	}
	return "trust: " + strings.Join(parts, ", ")
}

// TrustLine is the trust line under the table (TrustCount.Line), "" for a fleet with no trust
// to show (ShowsTrust); problem, when not empty, says why the roots on the bus could not be
// read, or the next is refused. busRoot is RowOptions.TrustRoot.
func TrustLine(rows []Row, busRoot uint64, problem string) string {
	if !ShowsTrust(rows) && problem == "" {
		return ""
	}
	line := TrustOf(rows, NewestRootOf(rows, busRoot)).Line()
	if problem != "" {
		line += " (" + problem + ")"
	}
	return cell(line, maxHeaderCell)
}

// trustStory is the node story's trust line: its root, whether it is behind the newest and
// whether its trust expired.
func trustStory(r Row, newest uint64) string {
	s := rootName(r.TrustRoot)
	if r.TrustRoot == 0 {
		s += " (host.json's keys)"
	}
	if r.TrustBehind {
		s += ", behind " + rootName(newest) + " on the bus"
	}
	if t := r.TrustExpiredSince; t != nil {
		s += "; " + wire.TrustExpiredLine(*t) + ": it runs what it has and takes no new target until a fresher root reaches it"
	}
	return s
}

func trustExpired(f facts) (string, bool) {
	since := f.hb.TrustExpiredSince
	if since == nil {
		return "", false
	}
	return wire.TrustExpiredLine(*since), true
}

// trustMoment is the timeline's moment of trust expiring.
func trustMoment(hb wire.Heartbeat) (time.Time, string, bool) {
	if t := hb.TrustExpiredSince; t != nil {
		return *t, "trust expired (the newest root it holds)", true
	}
	return time.Time{}, "", false
}
