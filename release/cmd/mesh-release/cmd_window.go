package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

const windowArgs = "(set|show|clear) [flags] [arguments]"

const windowAbout = `A maintenance window is when a node may stand aside for a new version of itself: it fetches
and stages a target at any time, and stands aside only inside its window, judged by its own
clock (so it holds while the node is cut off from the bus). A window is signed like a target,
by --key, and kept under window.node.<id> (each node of a group, the document naming the
group) or window.fleet (every node without its own) in the targets bucket (decision 0029).
A target signed urgent (` + "`target --urgent`, `rollout start --urgent`" + `) and a withdrawal do not
wait for windows.

subcommands:
  set (NODE… | --fleet) WINDOW   set the window, e.g. 'mon-fri 02:00-04:00 Europe/Brussels'
  show [NODE… | --fleet]         show the windows, or the window each NODE keeps
  clear (NODE… | --fleet)        remove the window: a node keeps the fleet's, else stands aside
                                 as soon as it has staged

Run ` + "`mesh-release window <subcommand> --help`" + ` for its flags.`

const windowSetAbout = `WINDOW is DAYS HH:MM-HH:MM ZONE, as one argument or three: DAYS a comma-separated list of
days (mon…sun) and ranges (mon-fri), or daily; the times are the node's wall clock in ZONE, an
IANA time zone (Europe/Brussels, UTC); an end at or before the start runs past midnight. Each
NODE's key gets one document naming every NODE given. A NODE that has never heartbeated on
this bus is refused unless --force. Prints "window WINDOW set for NODE (revision N), …".`

// windowCommands are the subcommands of `mesh-release window`.
var windowCommands = []command{
	{"window set", "(NODE… | --fleet) WINDOW", "set the maintenance window of nodes (or the fleet)", windowSetAbout, windowSetCmd},
	{"window show", "[NODE… | --fleet]", "show the maintenance windows, or the one each NODE keeps", "", windowShowCmd},
	{"window clear", "(NODE… | --fleet)", "remove the maintenance window of nodes (or the fleet)", "", windowClearCmd},
}

func windowCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	return dispatch(ctx, s, fs, args, "window", windowCommands)
}

// splitWindowArgs takes the window off the end of pos: the last argument when it holds spaces
// (quoted), else the last three.
func splitWindowArgs(pos []string) (nodes []string, spec string, err error) {
	switch {
	case len(pos) == 0:
		return nil, "", usagef("want (NODE… | --fleet) WINDOW, like --fleet 'mon-fri 02:00-04:00 Europe/Brussels'")
	case strings.ContainsAny(pos[len(pos)-1], " \t"):
		return pos[:len(pos)-1], pos[len(pos)-1], nil
	case len(pos) < 3:
		return nil, "", usagef("window %q: want DAYS HH:MM-HH:MM ZONE, like 'mon-fri 02:00-04:00 Europe/Brussels'", text.Bound(strings.Join(pos, " ")))
	}
	return pos[:len(pos)-3], strings.Join(pos[len(pos)-3:], " "), nil
}

// checkNodes checks node ids, and that --fleet and nodes are not both given.
func checkNodes(nodes []string, fleet bool) error {
	switch {
	case fleet && len(nodes) > 0:
		return usagef("give node ids or --fleet, not both")
	case !fleet && len(nodes) == 0:
		return usagef("no node ids given; name nodes, or use --fleet for every node")
	}
	for _, n := range nodes {
		if err := wire.ValidNode(n); err != nil {
			return usageError{err.Error()}
		}
	}
	return nil
}

func windowSetCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	fleet := fs.Bool("fleet", false, "set the window every node without its own keeps")
	force := fs.Bool("force", false, "set it even for a NODE that has never heartbeated (a node not yet started)")
	var k keyFlags
	k.register(fs, false, s.getenv)
	ttl := fs.Duration("ttl", targets.DefaultWindowTTL, "how long the window stays valid; a node does not keep an expired window (it stands aside as soon as it stages); by default at most the max_ttl of the newest root's targets role, which nodes hold a window to")
	var b busFlags
	b.register(fs, s.getenv)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	nodes, specText, err := splitWindowArgs(pos)
	if err != nil {
		return err
	}
	spec, err := wire.ParseWindowSpec(specText)
	if err != nil {
		return usageError{err.Error()}
	}
	if err := checkNodes(nodes, *fleet); err != nil {
		return err
	}
	if _, err := targets.WindowKeys(nodes, *fleet); err != nil {
		return usageError{err.Error()}
	}
	if err := targets.ValidTTL(*ttl); err != nil {
		return usagef("%s", strings.Replace(err.Error(), "--target-ttl", "--ttl", 1))
	}
	key, err := k.key()
	if err != nil {
		return err
	}
	more, err := k.more()
	if err != nil {
		return err
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	names := b.names()
	never, err := unheard(ctx, c.JS, names, nodes, *force)
	if err != nil {
		return err
	}
	if len(never) > 0 && !*force {
		return neverHeardError(ctx, c.JS, names, never, "no window was set.")
	}
	kv, err := targetsKV(ctx, c.JS, names)
	if err != nil {
		return err
	}
	if !flagGiven(fs, "ttl") {
		*ttl = withinMaxTTL(ctx, c.JS, names, *ttl)
	}
	set, err := targets.SetWindow(ctx, kv, nodes, *fleet, spec, key, *ttl, nil, more...)
	if len(set) > 0 {
		s.println(windowSetLine(spec, set, time.Now()))
	}
	return err
}

// targetsKV opens the targets bucket, saying how to make it when it is missing.
func targetsKV(ctx context.Context, js jetstream.JetStream, names wire.Names) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, names.Targets())
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("KV %s does not exist on this bus; create the buckets with `mesh-release init`: %w", names.Targets(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("KV %s: %w", names.Targets(), err)
	}
	return kv, nil
}

// windowSetLine says what was set: `window mon-fri 02:00-04:00 Europe/Brussels set for web-01
// (revision 7), web-02 (revision 8), signed by key 0123456789abcdef, valid until
// 2027-12-02T03:00:00Z; it opens next 2026-12-03T02:00+01:00`.
func windowSetLine(spec wire.WindowSpec, set []targets.WindowSet, now time.Time) string {
	open, occ := spec.Judge(now)
	next := "it opens next " + occ.Opens.Format(wire.WindowTimeLayout)
	if open {
		next = "it is open now, until " + occ.Closes.Format(wire.WindowTimeLayout)
	}
	tail := fmt.Sprintf(", signed by key %s, valid until %s; %s", set[0].Window.KeyID, set[0].Window.Expires, next)
	if len(set) == 1 && set[0].Key == wire.FleetWindowKey {
		return fmt.Sprintf("window %s set for the fleet (revision %d): every node without its own keeps it%s", spec, set[0].Revision, tail)
	}
	parts := make([]string, len(set))
	for i, w := range set {
		parts[i] = fmt.Sprintf("%s (revision %d)", strings.TrimPrefix(w.Key, wire.NodeWindowKey("")), w.Revision)
	}
	return fmt.Sprintf("window %s set for %s%s", spec, strings.Join(parts, ", "), tail)
}

func windowClearCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	fleet := fs.Bool("fleet", false, "remove the fleet's window")
	var b busFlags
	b.register(fs, s.getenv)
	nodes, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := checkNodes(nodes, *fleet); err != nil {
		return err
	}
	if _, err := targets.WindowKeys(nodes, *fleet); err != nil {
		return usageError{err.Error()}
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	kv, err := targetsKV(ctx, c.JS, b.names())
	if err != nil {
		return err
	}
	cleared, err := targets.ClearWindow(ctx, kv, nodes, *fleet)
	for _, w := range cleared {
		who := strings.TrimPrefix(w.Key, wire.NodeWindowKey(""))
		if w.Key == wire.FleetWindowKey {
			who = "the fleet"
		}
		switch {
		case w.Revision == 0:
			s.printf("no window to clear for %s\n", who)
		case w.Window.Zone == "":
			s.printf("window cleared for %s (it held an unreadable window, revision %d)\n", who, w.Revision)
		default:
			s.printf("window cleared for %s (was %s, revision %d)\n", who, w.Window, w.Revision)
		}
	}
	return err
}

// shownWindowJSON is one line of `window show --json`.
type shownWindowJSON struct {
	Node     string      `json:"node,omitempty"` // with NODE arguments: the node asked about
	Key      string      `json:"key,omitempty"`  // "" when the node keeps no window
	Revision uint64      `json:"revision,omitempty"`
	Window   string      `json:"window,omitempty"`
	Nodes    []string    `json:"nodes,omitempty"`
	Open     bool        `json:"open"`
	Opens    time.Time   `json:"opens,omitzero"`
	Closes   time.Time   `json:"closes,omitzero"`
	Expires  string      `json:"expires,omitempty"`
	Expired  bool        `json:"expired,omitempty"`
	KeyID    string      `json:"key_id,omitempty"`
	Error    string      `json:"error,omitempty"`
	Doc      wire.Window `json:"-"`
}

func windowShowCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	fleet := fs.Bool("fleet", false, "show the fleet's window only")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	var b busFlags
	b.register(fs, s.getenv)
	nodes, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *fleet && len(nodes) > 0 {
		return usagef("give node ids or --fleet, not both")
	}
	for _, n := range nodes {
		if err := wire.ValidNode(n); err != nil {
			return usageError{err.Error()}
		}
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	kv, err := targetsKV(ctx, c.JS, b.names())
	if err != nil {
		return err
	}
	all, err := targets.Windows(ctx, kv)
	if err != nil {
		return err
	}
	rows := windowRows(all, nodes, *fleet, time.Now())
	if *asJSON {
		enc := json.NewEncoder(s.out)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(rows) == 0 {
		s.println("no maintenance window is set: nodes stand aside as soon as they have staged")
		return nil
	}
	return writeWindowTable(s.out, rows, len(nodes) > 0)
}

// windowRows is what show shows, judged at now: each window on the bus (the fleet's only with
// fleet), or, when nodes are named, the window each keeps (its own, else the fleet's).
func windowRows(all []targets.ShownWindow, nodes []string, fleet bool, now time.Time) []shownWindowJSON {
	var rows []shownWindowJSON
	if len(nodes) == 0 {
		for _, w := range all {
			if fleet && w.Key != wire.FleetWindowKey {
				continue
			}
			rows = append(rows, shownRow(w, now))
		}
	}
	for _, n := range nodes {
		r := shownWindowJSON{Node: n}
		for _, key := range []string{wire.NodeWindowKey(n), wire.FleetWindowKey} {
			if i := indexWindow(all, key); i >= 0 {
				r = shownRow(all[i], now)
				r.Node = n
				break
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// writeWindowTable writes rows as show's table: by key, or by node when byNode.
func writeWindowTable(w io.Writer, rows []shownWindowJSON, byNode bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if byNode {
		fmt.Fprintln(tw, "NODE\tWINDOW\tFROM\tNEXT\tEXPIRES")
	} else {
		fmt.Fprintln(tw, "KEY\tWINDOW\tNODES\tNEXT\tEXPIRES")
	}
	for _, r := range rows {
		first, third := r.Key, strings.Join(r.Nodes, ",")
		if third == "" {
			third = "every node without its own"
		}
		if byNode {
			first, third = r.Node, r.Key
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", first, r.windowText(), text.Cut(third, 64), r.nextText(), r.expiresText())
	}
	return tw.Flush()
}

func indexWindow(all []targets.ShownWindow, key string) int {
	for i, w := range all {
		if w.Key == key {
			return i
		}
	}
	return -1
}

// shownRow is one window as show says it, judged at now.
func shownRow(w targets.ShownWindow, now time.Time) shownWindowJSON {
	r := shownWindowJSON{Key: w.Key, Revision: w.Revision}
	if w.Err != nil {
		r.Error = text.Cut(w.Err.Error(), 256)
		return r
	}
	r.Window, r.Nodes, r.Expires, r.KeyID, r.Doc = w.Window.String(), w.Window.Nodes, w.Window.Expires, w.Window.KeyID, w.Window
	r.Expired = w.Window.ExpiredAt(now)
	if spec, err := w.Window.Spec(); err == nil {
		var occ wire.Occurrence
		r.Open, occ = spec.Judge(now)
		r.Opens, r.Closes = occ.Opens, occ.Closes
	}
	return r
}

func (r shownWindowJSON) windowText() string {
	switch {
	case r.Error != "":
		return "unreadable: " + r.Error
	case r.Key == "":
		return "none: stands aside as soon as it has staged"
	}
	return r.Window
}

func (r shownWindowJSON) nextText() string {
	switch {
	case r.Key == "" || r.Error != "":
		return "-"
	case r.Open:
		return "open until " + r.Closes.Format(wire.WindowTimeLayout)
	}
	return "opens " + r.Opens.Format(wire.WindowTimeLayout)
}

func (r shownWindowJSON) expiresText() string {
	switch {
	case r.Key == "" || r.Error != "":
		return "-"
	case r.Expired:
		return r.Expires + " (expired: not kept)"
	}
	return r.Expires
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// withinMaxTTL is ttl, or the max_ttl of the newest root's targets role on the bus when that is
// shorter: a node refuses a window that claims to last longer from now (decision 0045). A bus
// without roots, or whose roots cannot be read, leaves ttl as it is.
func withinMaxTTL(ctx context.Context, js jetstream.JetStream, names wire.Names, ttl time.Duration) time.Duration {
	var rr fleet.RootReader
	if _, _, err := rr.Newest(ctx, js, names); err != nil {
		return ttl
	}
	if r, ok := rr.Root(); ok {
		if max := r.MaxTTL(wire.RoleTargets); max > 0 && max < ttl {
			return max
		}
	}
	return ttl
}
