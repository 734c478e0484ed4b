package wire

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
)

// A maintenance window is when a node may stand aside for a newer version of itself. It is a
// signed document like a target (decision 0029): written by the holder of a target key under the
// targets bucket's key "window.node.<id>" (one node, or each node of a group the document names)
// or "window.fleet" (every node without its own), sequenced and expiring. The node judges it by
// its own clock, so it holds while the node is cut off from the bus.

// WindowSigningHeader is the first line of the text a window's signature covers.
const WindowSigningHeader = "mesh-host window 1\n"

// Limits of a window document.
const (
	MaxWindowNodes = 100 // nodes a group window names (its JSON: at most MaxWindowBytes)
	MaxWindowZone  = 64  // bytes of an IANA zone name
	// MaxWindowDuration: a window longer than a day would overlap the next day's.
	MaxWindowDuration = 24 * time.Hour
)

// NodeWindowKey is the targets key of one node's window; FleetWindowKey is the window of every
// node without its own.
func NodeWindowKey(node string) string { return "window.node." + node }

// FleetWindowKey is the targets key of the window every node without its own keeps.
const FleetWindowKey = "window.fleet"

// Window is the value under a window key. The signature covers SigningText(key):
//
//	mesh-host window 1
//	key=window.node.web-01
//	nodes=web-01,web-02
//	days=mon,tue,wed,thu,fri
//	start=02:00
//	duration=2h0m0s
//	zone=Europe/Brussels
//	seq=1764417600000
//	expires=2027-12-02T03:00:00Z
//
// each line ending in "\n"; nodes is empty for the fleet key. Days are in the order mon…sun,
// each once; start is the local time (HH:MM, 24-hour) the window opens on each of those days in
// zone, and it closes duration later on the wall clock: 02:00-04:00 stays 02:00-04:00 across a
// daylight-saving change. On the night a clock skips an hour the window opens at the first minute
// that exists (03:00 for 02:00 in Europe/Brussels in March, an hour shorter); on the night an
// hour happens twice it opens at the second of the two (Go's time.Date), as long as any night. A host keeps the highest Seq
// per key and refuses a lower one; a window past Expires is not in force.
type Window struct {
	Nodes    []string `json:"nodes,omitempty"`
	Days     []string `json:"days"`
	Start    string   `json:"start"`
	Duration string   `json:"duration"`
	Zone     string   `json:"zone"`
	Seq      uint64   `json:"seq"`
	Expires  string   `json:"expires"`
	// SignatureList holds the signatures, last in the JSON: one as key_id and signature (byte
	// for byte what hosts before roots read), two or more as signatures (decision 0045).
	SignatureList
}

// Errors Window.Verify returns (wrapped, with the details); test them with errors.Is.
var (
	ErrWindowUnsigned     = errors.New("window is not signed")
	ErrWindowUnknownKey   = errors.New("window is signed by a key this node does not trust")
	ErrWindowBadSignature = errors.New("window signature does not verify: a field was altered after signing, it was moved from another key, or the signature is corrupt")
)

// weekdays are the day names a window uses, in its order (Monday first).
var weekdays = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

func dayIndex(d string) int { return slices.Index(weekdays, d) }

// weekdayName is the window's name of a Go weekday.
func weekdayName(d time.Weekday) string { return weekdays[(int(d)+6)%7] }

// WindowSpec is a window's schedule: the days it opens on, when, for how long, and where.
type WindowSpec struct {
	Days     []string      // canonical: mon…sun order, each once
	Start    string        // HH:MM
	Duration time.Duration // whole minutes, 1m…24h
	Zone     string        // IANA name
	loc      *time.Location
}

// ParseWindowSpec reads `DAYS HH:MM-HH:MM ZONE`, e.g. `mon-fri 02:00-04:00 Europe/Brussels`.
// DAYS is a comma-separated list of days (mon…sun) and ranges of them (mon-fri, fri-mon wraps
// around the week), or daily; an end at or before the start means the window runs past
// midnight (22:00-02:00 is four hours). Each part that is wrong is named.
func ParseWindowSpec(s string) (WindowSpec, error) {
	if len(s) > 256 {
		return WindowSpec{}, fmt.Errorf("window %q: %d bytes, more than the 256 a window is", txt.Bound(s), len(s))
	}
	f := strings.Fields(s)
	if len(f) != 3 {
		return WindowSpec{}, fmt.Errorf("window %q: want three parts, DAYS HH:MM-HH:MM ZONE, like \"mon-fri 02:00-04:00 Europe/Brussels\"", txt.Bound(s))
	}
	days, err := parseDays(f[0])
	if err != nil {
		return WindowSpec{}, fmt.Errorf("window %q: %w", txt.Bound(s), err)
	}
	from, to, ok := strings.Cut(f[1], "-")
	if !ok {
		return WindowSpec{}, fmt.Errorf("window %q: times %q are not HH:MM-HH:MM", txt.Bound(s), txt.Bound(f[1]))
	}
	a, err := parseClock(from)
	if err != nil {
		return WindowSpec{}, fmt.Errorf("window %q: start %w", txt.Bound(s), err)
	}
	b, err := parseClock(to)
	if err != nil {
		return WindowSpec{}, fmt.Errorf("window %q: end %w", txt.Bound(s), err)
	}
	d := b - a
	if d <= 0 {
		d += 24 * time.Hour
	}
	spec := WindowSpec{Days: days, Start: from, Duration: d, Zone: f[2]}
	if err := spec.check(); err != nil {
		return WindowSpec{}, fmt.Errorf("window %q: %w", txt.Bound(s), err)
	}
	return spec, nil
}

// parseDays reads a day list into canonical order.
func parseDays(s string) ([]string, error) {
	if s == "daily" || s == "mon-sun" {
		return slices.Clone(weekdays), nil
	}
	set := make([]bool, 7)
	for part := range strings.SplitSeq(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		i, j := dayIndex(from), dayIndex(to)
		if i < 0 || (isRange && j < 0) {
			return nil, fmt.Errorf("days %q: %q is not a day (mon, tue, wed, thu, fri, sat, sun), a range of them (mon-fri) or daily", txt.Bound(s), txt.Bound(part))
		}
		if !isRange {
			j = i
		}
		for k := i; ; k = (k + 1) % 7 {
			set[k] = true
			if k == j {
				break
			}
		}
	}
	var out []string
	for i, on := range set {
		if on {
			out = append(out, weekdays[i])
		}
	}
	return out, nil
}

// parseClock reads HH:MM (00:00…24:00 is not allowed; 23:59 is the last) as a duration past
// midnight.
func parseClock(s string) (time.Duration, error) {
	if len(s) != 5 || s[2] != ':' {
		return 0, fmt.Errorf("%q is not a time of day HH:MM (24-hour, like 02:00)", txt.Bound(s))
	}
	h, err1 := strconv.Atoi(s[:2])
	m, err2 := strconv.Atoi(s[3:])
	if err1 != nil || err2 != nil || h < 0 || h > 23 || m < 0 || m > 59 || s[0] == '+' || s[3] == '+' {
		return 0, fmt.Errorf("%q is not a time of day HH:MM (24-hour, like 02:00)", txt.Bound(s))
	}
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute, nil
}

// check validates a spec's fields and loads its zone.
func (w *WindowSpec) check() error {
	if len(w.Days) == 0 || len(w.Days) > 7 {
		return fmt.Errorf("days: %d given; a window opens on 1 to 7 days", len(w.Days))
	}
	for i, d := range w.Days {
		if dayIndex(d) < 0 {
			return fmt.Errorf("days: %q is not mon, tue, wed, thu, fri, sat or sun", txt.Bound(d))
		}
		if i > 0 && dayIndex(d) <= dayIndex(w.Days[i-1]) {
			return fmt.Errorf("days: %q comes after %q or twice; list them once each, mon first", d, w.Days[i-1])
		}
	}
	if _, err := parseClock(w.Start); err != nil {
		return fmt.Errorf("start %w", err)
	}
	if w.Duration < time.Minute || w.Duration > MaxWindowDuration || w.Duration%time.Minute != 0 {
		return fmt.Errorf("duration %s: a window lasts whole minutes, 1m to 24h", w.Duration)
	}
	if w.Zone == "" || len(w.Zone) > MaxWindowZone || w.Zone == "Local" {
		return fmt.Errorf("zone %q is not an IANA time zone name like Europe/Brussels or UTC", txt.Bound(w.Zone))
	}
	loc, err := time.LoadLocation(w.Zone)
	if err != nil {
		return fmt.Errorf("zone %q is not an IANA time zone this machine knows (like Europe/Brussels or UTC): %w", txt.Bound(w.Zone), err)
	}
	w.loc = loc
	return nil
}

// String is the spec as `mon-fri 02:00-04:00 Europe/Brussels` (days listed one by one unless
// they are a plain range).
func (w WindowSpec) String() string {
	a, _ := parseClock(w.Start)
	end := (a + w.Duration) % (24 * time.Hour)
	return fmt.Sprintf("%s %s-%02d:%02d %s", daysString(w.Days), w.Start, int(end.Hours()), int(end.Minutes())%60, w.Zone)
}

// daysString is mon-fri for a run of consecutive days, daily for all, else a list.
func daysString(days []string) string {
	if len(days) == 7 {
		return "daily"
	}
	if len(days) > 2 && dayIndex(days[len(days)-1])-dayIndex(days[0]) == len(days)-1 {
		return days[0] + "-" + days[len(days)-1]
	}
	return strings.Join(days, ",")
}

// Occurrence is one opening of a window: from Opens (inclusive) to Closes (exclusive).
type Occurrence struct {
	Opens, Closes time.Time
}

// occurrence is the opening on the calendar day (y, m, d) in the window's zone.
func (w WindowSpec) occurrence(y int, m time.Month, d int) Occurrence {
	a, _ := parseClock(w.Start)
	h, min := int(a.Hours()), int(a.Minutes())%60
	dm := int(w.Duration.Minutes())
	// time.Date normalises a local time that does not exist (the hour skipped in spring) forward
	// and picks the second of an hour that happens twice (window_test.go pins both); the close
	// is on the wall clock too.
	return Occurrence{
		Opens:  time.Date(y, m, d, h, min, 0, 0, w.loc),
		Closes: time.Date(y, m, d, h, min+dm, 0, 0, w.loc),
	}
}

// Judge says whether now is inside the window and, when it is, the opening it is in; when it
// is not, the next opening (within the next eight days: every window opens at least weekly).
func (w WindowSpec) Judge(now time.Time) (open bool, occ Occurrence) {
	if w.loc == nil {
		if err := w.check(); err != nil {
			return false, Occurrence{}
		}
	}
	local := now.In(w.loc)
	y, m, d := local.Date()
	var next Occurrence
	// Yesterday's opening may run past midnight into today.
	for off := -1; off <= 8; off++ {
		day := time.Date(y, m, d+off, 12, 0, 0, 0, w.loc)
		if !slices.Contains(w.Days, weekdayName(day.Weekday())) {
			continue
		}
		o := w.occurrence(day.Year(), day.Month(), day.Day())
		if !now.Before(o.Opens) && now.Before(o.Closes) {
			return true, o
		}
		if now.Before(o.Opens) && (next.Opens.IsZero() || o.Opens.Before(next.Opens)) {
			next = o
		}
	}
	return false, next
}

// Spec is the window's schedule, checked (its zone loaded).
func (w Window) Spec() (WindowSpec, error) {
	d, err := time.ParseDuration(w.Duration)
	if err != nil {
		return WindowSpec{}, fmt.Errorf("window: duration %q is not a duration like 2h0m0s", txt.Bound(w.Duration))
	}
	s := WindowSpec{Days: w.Days, Start: w.Start, Duration: d, Zone: w.Zone}
	if err := s.check(); err != nil {
		return WindowSpec{}, fmt.Errorf("window: %w", err)
	}
	return s, nil
}

// ParseWindow decodes a window strictly, at most MaxWindowBytes (DecodeSigned), and checks its
// fields. It does not check the signature:
// that is Verify, which needs the key the window was read under.
func ParseWindow(b []byte) (Window, error) { return parseSigned[Window](KindWindow, b) }

// Validate checks every field except the signature, naming the first one that is wrong.
func (w Window) Validate() error {
	if len(w.Nodes) > MaxWindowNodes {
		return fmt.Errorf("window: %d nodes, more than the %d a window may name", len(w.Nodes), MaxWindowNodes)
	}
	for i, n := range w.Nodes {
		if err := ValidNode(n); err != nil {
			return fmt.Errorf("window: nodes: %w", err)
		}
		if slices.Contains(w.Nodes[:i], n) {
			return fmt.Errorf("window: nodes: %s is named twice", n)
		}
	}
	if _, err := w.Spec(); err != nil {
		return err
	}
	if d, _ := time.ParseDuration(w.Duration); d.String() != w.Duration {
		return fmt.Errorf("window: duration %q is not written as Go writes it (%s)", txt.Bound(w.Duration), d)
	}
	if err := checkSeq("window", w.Seq); err != nil {
		return err
	}
	if _, err := time.Parse(time.RFC3339, w.Expires); err != nil {
		return fmt.Errorf("window: expires %q is not an RFC 3339 time like 2027-12-02T12:00:00Z", txt.Bound(w.Expires))
	}
	return w.SignatureList.Check("window")
}

// For reports whether the window stored under key applies to node: the fleet window applies to
// every node, a node's window to the nodes it names.
func (w Window) For(key, node string) bool {
	if key == FleetWindowKey {
		return len(w.Nodes) == 0
	}
	return key == NodeWindowKey(node) && slices.Contains(w.Nodes, node)
}

// ExpiresAt is Expires as a time; the zero time if it does not parse (Validate refuses that).
func (w Window) ExpiresAt() time.Time {
	at, _ := time.Parse(time.RFC3339, w.Expires)
	return at
}

// ExpiredAt reports whether the window is past its expiry at now.
func (w Window) ExpiredAt(now time.Time) bool { return expiredAt(w.ExpiresAt(), now) }

// String is the window's schedule, `mon-fri 02:00-04:00 Europe/Brussels`.
func (w Window) String() string {
	s, err := w.Spec()
	if err != nil {
		return "(invalid window)"
	}
	return s.String()
}

// SigningText returns the exact bytes the signature covers when the window is stored under key.
func (w Window) SigningText(key string) []byte {
	var b bytes.Buffer
	b.WriteString(WindowSigningHeader)
	for _, kv := range [][2]string{
		{"key", key},
		{"nodes", strings.Join(w.Nodes, ",")},
		{"days", strings.Join(w.Days, ",")},
		{"start", w.Start},
		{"duration", w.Duration},
		{"zone", w.Zone},
		{"seq", strconv.FormatUint(w.Seq, 10)},
		{"expires", w.Expires},
	} {
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(kv[1])
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// NewWindow is spec as a window for nodes (none for the fleet key) under key, numbered after
// prev and valid for ttl from now, signed with priv.
func NewWindow(key string, nodes []string, spec WindowSpec, prev uint64, now time.Time, ttl time.Duration, priv ed25519.PrivateKey) (Window, error) {
	if prev >= MaxSeq {
		return Window{}, fmt.Errorf("sign window %s: the value it replaces has seq %d, the largest allowed", key, prev)
	}
	w := Window{
		Nodes: nodes, Days: spec.Days, Start: spec.Start, Duration: spec.Duration.String(), Zone: spec.Zone,
		Seq:     max(prev+1, uint64(max(now.UnixMilli(), 0))),
		Expires: now.Add(ttl).UTC().Truncate(time.Second).Format(time.RFC3339),
	}
	if err := w.Sign(key, priv); err != nil {
		return Window{}, err
	}
	return w, nil
}

// Sign validates the window and signs it for key with priv: the first signature, replacing any
// it had. AddSignature adds another.
func (w *Window) Sign(key string, priv ed25519.PrivateKey) error {
	w.SignatureList = SignatureList{}
	return w.AddSignature(key, priv)
}

// AddSignature validates the window and adds priv's signature for key to those it has (the
// targets role's threshold). A key that has signed is refused.
func (w *Window) AddSignature(key string, priv ed25519.PrivateKey) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("sign window: %w", err)
	}
	if err := w.SignatureList.Add(w.SigningText(key), priv); err != nil {
		return fmt.Errorf("sign window %s: %w", txt.Bound(key), err)
	}
	return nil
}

// Envelope is the window stored under key as the verifier sees it: signed by the targets role,
// expiring at Expires.
func (w Window) Envelope(key string) Envelope {
	return Envelope{Kind: KindWindow, Name: key, Role: RoleTargets, Text: w.SigningText(key), Signatures: w.List(), Expires: w.ExpiresAt()}
}

// Verify checks that the window was signed for key as trust requires at now (Trust.Verify), its
// errors also ErrWindowUnsigned, ErrWindowUnknownKey or ErrWindowBadSignature. It does not
// judge expiry: ExpiredAt does.
func (w Window) Verify(key string, trust Trust, now time.Time) error {
	if err := w.Validate(); err != nil {
		return err
	}
	return verifyDocument(trust, w.Envelope(key), now, ErrWindowUnsigned, ErrWindowUnknownKey, ErrWindowBadSignature)
}

// Marshal returns the window's JSON.
func (w Window) Marshal() []byte { b, _ := json.Marshal(w); return b }

// WindowTimeLayout is how a window's opening is written for people: minutes and the offset,
// 2026-12-02T02:00+01:00.
const WindowTimeLayout = "2006-01-02T15:04Z07:00"

// WaitingLine is what a node waiting for its window says: `staged v1.4.0, waiting for the
// window (opens 2026-12-02T02:00+01:00)`. Heartbeat readers (`fleet`, `rollout --follow`) and
// `mesh-launcher status` say the same.
func WaitingLine(version string, opens time.Time) string {
	return fmt.Sprintf("staged %s, waiting for the window (opens %s)", version, opens.Format(WindowTimeLayout))
}
