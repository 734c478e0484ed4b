package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/fleet"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// neverHeard refuses node ids no heartbeat was ever stored for: most likely a typo, or a node
// whose id is not what the operator thinks, so declare and target act on them only with --force.
type neverHeard struct{ text string }

func (e *neverHeard) Error() string { return e.text }

// shownNodes bounds how many heard node ids a refusal lists; shownNodeBytes bounds each (they
// come from subjects on the bus).
const (
	shownNodes     = 8
	shownNodeBytes = 48
)

// unheard returns the nodes no heartbeat was ever stored for (in the order given). With force
// it is only for saying they were pre-declared: a failed look-up then counts as heard.
func unheard(ctx context.Context, js jetstream.JetStream, n wire.Names, nodes []string, force bool) ([]string, error) {
	var never []string
	for _, node := range nodes {
		_, ok, err := fleet.LastHeard(ctx, js, n, node)
		if err != nil {
			if force {
				continue
			}
			return nil, fmt.Errorf("%w; to skip the check, add --force", err)
		}
		if !ok {
			never = append(never, node)
		}
	}
	return never, nil
}

// neverHeardError says which nodes never heartbeated, how node ids are made, which nodes have
// heartbeated (the likeliest meant first, a few at most), and how to go ahead anyway.
func neverHeardError(ctx context.Context, js jetstream.JetStream, n wire.Names, never []string, what string) error {
	var b strings.Builder
	subject := fmt.Sprintf("node %q has", never[0])
	if len(never) > 1 {
		subject = fmt.Sprintf("nodes %s have", quoteList(never))
	}
	fmt.Fprintf(&b, "%s never heartbeated on this bus (%s keeps each node's last heartbeat for %d days); %s\n",
		subject, n.HeartbeatStream(), int(bus.HeartbeatMaxAge.Hours()/24), what)
	b.WriteString("A node's id is its short hostname (up to the first dot) unless host.json's \"node\" or MESH_HOST_NODE sets it.\n")
	heard, err := fleet.Heard(ctx, js, n)
	switch {
	case err != nil:
		fmt.Fprintf(&b, "(The nodes that have heartbeated could not be listed: %v)\n", err)
	case len(heard) == 0:
		b.WriteString("No node has heartbeated on this bus yet.\n")
	default:
		fmt.Fprintf(&b, "Heard from %d %s: %s", len(heard), text.Plural(len(heard), "node", "nodes"), listNodes(nearest(heard, never[0])))
		if len(heard) > shownNodes {
			fmt.Fprintf(&b, " and %d more (`mesh-release fleet` lists them all)", len(heard)-shownNodes)
		}
		b.WriteString(".\n")
	}
	b.WriteString("To go ahead for a node that has not started yet, add --force.")
	return &neverHeard{text: b.String()}
}

// nearest orders nodes by how long a prefix they share with want, then by name, so a typo's
// neighbour comes first.
func nearest(nodes []string, want string) []string {
	out := append([]string(nil), nodes...)
	common := func(s string) int {
		i := 0
		for i < len(s) && i < len(want) && s[i] == want[i] {
			i++
		}
		return i
	}
	sort.SliceStable(out, func(i, j int) bool { return common(out[i]) > common(out[j]) })
	return out
}

// listNodes is the first shownNodes ids, each printable and bounded.
func listNodes(nodes []string) string {
	if len(nodes) > shownNodes {
		nodes = nodes[:shownNodes]
	}
	shown := make([]string, len(nodes))
	for i, node := range nodes {
		shown[i] = text.Cut(text.Printable(node), shownNodeBytes)
	}
	return strings.Join(shown, ", ")
}

// quoteList quotes the first shownNodes of nodes (valid node ids, so printable and short).
func quoteList(nodes []string) string {
	q := make([]string, 0, shownNodes+1)
	for i, node := range nodes {
		if i == shownNodes {
			q = append(q, fmt.Sprintf("and %d more", len(nodes)-shownNodes))
			break
		}
		q = append(q, fmt.Sprintf("%q", node))
	}
	return strings.Join(q, ", ")
}
