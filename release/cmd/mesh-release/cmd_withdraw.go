package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/publish"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/release/targets"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

const withdrawAbout = `Withdraws VERSION (vX.Y.Z) from the fleet for good: it is added, with --reason, to the
withdrawal list (KV <prefix>_host_withdrawals, key list), signed with --key (the release key, or
a target key the hosts trust) by compare-and-set, so withdrawals made at the same time all land.
A host then never fetches VERSION again, refuses its manifest and, if it runs it, steps down to
the version it ran before — not counted as a failure, no rollback recorded; a node that was
offline does so when it returns. A withdrawal is never undone: publish a fixed version and roll
it out. Rollouts refuse a withdrawn version, and ` + "`mesh-release fleet`" + ` marks nodes running one.

VERSION must be published on this bus unless --force (a withdrawal is permanent: a typo would
stay). A VERSION withdrawn already is said, with when and why, and nothing changes: exit 0, so
that a script may withdraw again safely. The list on the bus must verify with --key, or with a
public key given with --trust (a release.pub file), since the new list signs every entry it
keeps. --list prints the withdrawn versions (--json: the list as stored) and needs no key.

The list expires (decision 0045: a list that never expires lets a freeze go unnoticed): it is
signed valid for --list-ttl, by default 7 days once the bus holds a root (hosts that follow
roots read an expiry) and never before (hosts from before roots refuse a list carrying one).
` + "`serve --key`" + ` and rollout controllers sign it again, as they do targets, before less than half is
left. --renew signs the list on the bus again as it is (no VERSION): after rotating the target
key, sign it with the new --key, the old one given with --trust. Repeat --key for a root whose
targets role needs two signatures or more.

exit status: 0 withdrawn (or withdrawn already), 1 an error, 2 usage.`

func withdrawCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	reason := fs.String("reason", "", "why it is withdrawn, shown on every node and by mesh-release fleet (one line, at most 256 bytes)")
	force := fs.Bool("force", false, "withdraw VERSION even if it is not published on this bus")
	trust := fs.String("trust", "", "public key `FILES` (comma-separated, as release.pub) that may have signed the list already on the bus")
	list := fs.Bool("list", false, "print the withdrawn versions instead (no VERSION, no --key)")
	renew := fs.Bool("renew", false, "sign the list on the bus again as it is, with --key (no VERSION)")
	listTTL := fs.Duration("list-ttl", targets.DefaultTTL, "how long the list stays valid unless signed again (0: it never expires); by default 7 days once the bus holds a root, never before")
	asJSON := fs.Bool("json", false, "with --list: write the list as stored, as JSON")
	var k keyFlags
	k.register(fs, false, s.getenv)
	var b busFlags
	b.register(fs, s.getenv)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *list {
		if len(pos) != 0 {
			return usagef("--list takes no VERSION")
		}
		return listWithdrawals(ctx, s, b, *asJSON)
	}
	if *renew {
		if len(pos) != 0 {
			return usagef("--renew takes no VERSION")
		}
		return renewWithdrawals(ctx, s, fs, b, k, *trust, *listTTL)
	}
	switch {
	case *asJSON:
		return usagef("--json goes with --list")
	case len(pos) != 1:
		return usagef("want VERSION, got %d %s", len(pos), text.Plural(len(pos), "argument", "arguments"))
	case !wire.ValidVersion(pos[0]):
		return usagef("%q is not a version; want vX.Y.Z", text.Cut(text.Printable(pos[0]), 64))
	}
	version := pos[0]
	check := wire.Withdrawals{Seq: 1, Withdrawn: []wire.Withdrawn{{Version: version, Reason: *reason, At: time.Now().UTC().Format(time.RFC3339)}}}
	if err := check.Validate(); err != nil {
		return usagef("--reason: %s", strings.TrimPrefix(err.Error(), "withdrawal list: withdrawn[0].reason: "))
	}
	l, err := listSigning(k, *listTTL)
	if err != nil {
		return err
	}
	trusted, err := publicKeys(*trust)
	if err != nil {
		return err
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	names := b.names()
	if !*force {
		if err := isPublished(ctx, c.JS, names, version); err != nil {
			return err
		}
	}
	if !flagGiven(fs, "list-ttl") {
		l.TTL = defaultListTTL(ctx, c.JS, names)
	}
	w, err := targets.WithdrawSigned(ctx, c.JS, names, version, *reason, l, trusted)
	if err != nil {
		return err
	}
	if w.Already {
		s.printf("%s was withdrawn already (%s); nothing changed\n", version, targets.Describe(w.Entry))
		return nil
	}
	s.printf("withdrew %s (%s): hosts never fetch it again, and a node running it steps down to the version it ran before (list seq %d, %s, signed by %s%s)\n",
		version, targets.Describe(w.Entry), w.List.Seq, count(len(w.List.Withdrawn), "version", "versions")+" withdrawn", signedBy(w.List.List()), listExpiry(w.List))
	for _, line := range consequences(ctx, c, names, version) {
		s.println(line)
	}
	return nil
}

// isPublished refuses a version with no manifest on the bus (publish.Published): most likely a
// typo, and a withdrawal is never undone. A manifest that does not read is published all the
// same, and may well be why it is withdrawn.
func isPublished(ctx context.Context, js jetstream.JetStream, names wire.Names, version string) error {
	_, err := publish.Published(ctx, js, names, version)
	if errors.Is(err, publish.ErrNotPublished) {
		return fmt.Errorf("%s is not published on this bus (%s); a withdrawal is never undone, so check the version — or give --force to withdraw a version published elsewhere or not yet", version, names.Releases())
	}
	return err
}

// consequences says, best effort, what the withdrawal sets in motion: the nodes running the
// version, a fleet target naming it, a rollout of it. What cannot be read is left unsaid: the
// withdrawal is made.
func consequences(ctx context.Context, c *bus.Conn, names wire.Names, version string) []string {
	var out []string
	if es, err := fleet.Read(ctx, c.JS, names); err == nil {
		var running []string
		for _, e := range es {
			if e.Err == nil && e.Heartbeat.Running == version {
				running = append(running, e.Node)
			}
		}
		if len(running) > 0 {
			out = append(out, fmt.Sprintf("%s it now: %s; each steps down at its next reconcile (`mesh-release fleet` shows them).",
				count(len(running), "node runs", "nodes run"), listNodes(running)+more(len(running))))
		}
	}
	if kv, err := c.JS.KeyValue(ctx, names.Targets()); err == nil {
		if e, err := kv.Get(ctx, wire.FleetTargetKey); err == nil {
			if t, err := wire.ParseTarget(e.Value()); err == nil && t.Version == version {
				out = append(out, "The fleet target names "+version+": nodes without their own target keep what they have; roll out a fixed version (`mesh-release rollout start`).")
			}
		}
	}
	if st, ok, err := rollout.Current(ctx, c.JS, names); err == nil && ok && st.Version == version && st.Status == rollout.StatusRunning {
		out = append(out, "Rollout "+printable(st.ID)+" of "+version+" is running: its nodes refuse it now, so it halts; `mesh-release rollout abort --key …` stops it at once.")
	}
	return out
}

// count is "1 version" or "3 versions".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// more is ", and N more" when listNodes left nodes out.
func more(n int) string {
	if n <= shownNodes {
		return ""
	}
	return fmt.Sprintf(", and %d more", n-shownNodes)
}

// publicKeys reads --trust: public key files as `mesh-release keygen` writes release.pub.
func publicKeys(files string) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for _, f := range strings.Split(files, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--trust: %w", err)
		}
		pub, err := wire.ParseTrustedKey(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("--trust %s: %w", f, err)
		}
		out = append(out, pub)
	}
	return out, nil
}

// listWithdrawals prints the withdrawal list.
func listWithdrawals(ctx context.Context, s *stdio, b busFlags, asJSON bool) error {
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	list, _, err := targets.ReadWithdrawals(ctx, c.JS, b.names())
	if err != nil {
		return err
	}
	if asJSON {
		if list.Withdrawn == nil {
			list.Withdrawn = []wire.Withdrawn{}
		}
		out, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		_, err = s.out.Write(append(text.PrintableJSON(out), '\n'))
		return err
	}
	if len(list.Withdrawn) == 0 {
		s.println("no version is withdrawn")
		return nil
	}
	s.printf("%s withdrawn (list seq %d, signed by key %s):\n", count(len(list.Withdrawn), "version", "versions"), list.Seq, printable(list.KeyID))
	tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	for _, e := range list.Withdrawn {
		reason := "-"
		if e.Reason != "" {
			reason = fmt.Sprintf("%q", e.Reason)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", printable(e.Version), printable(e.At), text.Printable(reason))
	}
	return tw.Flush()
}

// listSigning loads every --key and checks --list-ttl.
func listSigning(k keyFlags, ttl time.Duration) (targets.ListSigning, error) {
	if ttl < 0 || (ttl > 0 && targets.ValidTTL(ttl) != nil) {
		return targets.ListSigning{}, usagef("--list-ttl %s: want 0 (never expires) or between %s and 87600h", ttl, targets.MinTTL)
	}
	key, err := k.key()
	if err != nil {
		return targets.ListSigning{}, err
	}
	more, err := k.more()
	if err != nil {
		return targets.ListSigning{}, err
	}
	return targets.ListSigning{Key: key, More: more, TTL: ttl}, nil
}

// defaultListTTL is --list-ttl's default: targets.DefaultTTL once the bus holds a root (its
// hosts read an expiry), else 0 (hosts from before roots refuse a list carrying one).
func defaultListTTL(ctx context.Context, js jetstream.JetStream, names wire.Names) time.Duration {
	var rr fleet.RootReader
	if v, _, err := rr.Newest(ctx, js, names); err == nil && v > 0 {
		return targets.DefaultTTL
	}
	return 0
}

// signedBy names the keys of a signature list: `key 82912897…` or `keys 82912897…, 1a2b3c4d…`.
func signedBy(sigs []wire.Signature) string {
	ids := make([]string, 0, len(sigs))
	for _, sg := range sigs {
		ids = append(ids, sg.KeyID)
	}
	if len(ids) == 1 {
		return "key " + ids[0]
	}
	return "keys " + strings.Join(ids, ", ")
}

// listExpiry is ", valid until T" for a list that expires, nothing otherwise.
func listExpiry(w wire.Withdrawals) string {
	if w.Expires == "" {
		return ""
	}
	return ", valid until " + w.Expires
}

// renewWithdrawals is `withdraw --renew`: the list on the bus signed again as it is.
func renewWithdrawals(ctx context.Context, s *stdio, fs *flag.FlagSet, b busFlags, k keyFlags, trust string, ttl time.Duration) error {
	l, err := listSigning(k, ttl)
	if err != nil {
		return err
	}
	trusted, err := publicKeys(trust)
	if err != nil {
		return err
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	names := b.names()
	if !flagGiven(fs, "list-ttl") {
		l.TTL = defaultListTTL(ctx, c.JS, names)
	}
	w, err := targets.RenewSigned(ctx, c.JS, names, l, trusted)
	if err != nil {
		return err
	}
	if w.Rev == 0 {
		s.println("no withdrawal list on this bus: nothing to sign")
		return nil
	}
	s.printf("signed the withdrawal list again: seq %d, %s withdrawn, signed by %s%s\n", w.List.Seq,
		count(len(w.List.Withdrawn), "version", "versions"), signedBy(w.List.List()), listExpiry(w.List))
	return nil
}
