package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/enrol"
	"github.com/novox/mesh-host/wire"
)

// shownPending bounds how many nodes not renewed a cut-over lists by name.
const shownPending = 20

// cutOver is `mesh-release node cut-over` (decision 0024).
func cutOver(ctx context.Context, s *stdio, t *trustFlags, dryRun, force bool) error {
	store, err := t.open()
	if err != nil {
		return err
	}
	if !store.InTransition() {
		s.printf("nothing to cut over: every node user of this trust store is signed with today's permissions\n")
		return nil
	}
	admin, err := t.connectAs(ctx, store, store.AdminCreds())
	if err != nil {
		return err
	}
	defer admin.Close()
	pending, renewed, err := notRenewed(ctx, admin.JS, t.names(), store.NodesSigningPublicKey())
	if err != nil {
		return err
	}
	sort.Strings(pending)
	s.printf("%d %s renewed, %d not yet%s\n", renewed, text.Plural(renewed, "node", "nodes"), len(pending), listPending(pending))
	if dryRun {
		return nil
	}
	if len(pending) > 0 && !force {
		return fmt.Errorf("%d %s not renewed their users yet: each renews once it runs a host that asks and reaches the enrolment service; wait for them, or cut over with --force (they are then refused, and must enrol again with `mesh-host enrol --replace TOKEN`)",
			len(pending), text.Plural(len(pending), "node has", "nodes have"))
	}
	system, err := t.connectAsSystem(ctx, store)
	if err != nil {
		return fmt.Errorf("the system user (the accounts are pushed as it): %w", err)
	}
	defer system.Close()
	if err := store.CutOver(ctx, system.NC); err != nil {
		return err
	}
	s.printf("cut over: the servers refuse every node user signed before (signing key %s), and nodes may create no consumer\n", store.NodesSigningPublicKey())
	return nil
}

// notRenewed reads every node record and returns the nodes, not revoked, whose user was not signed
// by signingPub, and how many were.
func notRenewed(ctx context.Context, js jetstream.JetStream, n wire.Names, signingPub string) (pending []string, renewed int, err error) {
	kv, err := js.KeyValue(ctx, n.Nodes())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read the node records in %s: %w", n.Nodes(), err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, 0, fmt.Errorf("read the node records in %s: %w", n.Nodes(), err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case e := <-w.Updates():
			if e == nil {
				return pending, renewed, nil
			}
			var rec enrol.NodeRecord
			if err := wire.DecodeStrict(e.Value(), &rec); err != nil {
				return nil, 0, fmt.Errorf("node record %s in %s: %w", text.Cut(e.Key(), 64), n.Nodes(), err)
			}
			switch {
			case rec.RevokedAt != nil:
			case rec.SignedBy == signingPub:
				renewed++
			default:
				pending = append(pending, strings.TrimPrefix(e.Key(), wire.NodeKey("")))
			}
		}
	}
}

func listPending(nodes []string) string {
	if len(nodes) == 0 {
		return ""
	}
	shown := nodes[:min(len(nodes), shownPending)]
	more := ""
	if len(nodes) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(nodes)-len(shown))
	}
	return ": " + strings.Join(shown, ", ") + more
}
