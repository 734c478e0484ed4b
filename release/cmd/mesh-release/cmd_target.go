package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/novox/mesh-host/release/publish"
	"github.com/novox/mesh-host/wire"
)

const targetAbout = `VERSION (vX.Y.Z) must be published. Each NODE gets its own target; --fleet sets the one
every node without its own falls back to. A NODE that has never heartbeated on this bus is
refused, so that a mistyped id is not targeted silently; --force sets it for a node not yet
started. Prints "target VERSION set for NODE (revision N)".
To stage a release across the fleet, halting by itself on trouble, use ` + "`mesh-release rollout start VERSION`" + `.`

func targetCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	fleet := fs.Bool("fleet", false, "set the fleet target every node without its own falls back to")
	force := fs.Bool("force", false, "set it even for a NODE that has never heartbeated (a node not yet started)")
	var b busFlags
	b.register(fs, s.getenv)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("want NODE… VERSION, or --fleet VERSION")
	case *fleet && len(pos) > 1:
		return usagef("give node ids or --fleet, not both")
	case !*fleet && len(pos) == 1:
		return usagef("no node ids given; name nodes before the version, or use --fleet for every node")
	}
	version, nodes := pos[len(pos)-1], pos[:len(pos)-1]
	for _, node := range nodes {
		if err := wire.ValidNode(node); err != nil {
			return err
		}
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
		return neverHeardError(ctx, c.JS, names, never, "no target was set.")
	}
	set, err := publish.Target(ctx, c.JS, names, version, nodes, *fleet)
	if len(set) > 0 {
		s.println(targetLine(version, set, never))
	}
	return err
}

// targetLine says what was set: `target v1.1.0 set for web-01 (revision 7), web-02 (revision 8)`.
func targetLine(version string, set []publish.Set, never []string) string {
	if len(set) == 1 && set[0].Key == wire.FleetTargetKey {
		return fmt.Sprintf("target %s set for the fleet (revision %d): every node without its own target runs it", version, set[0].Revision)
	}
	pre := make(map[string]bool, len(never))
	for _, node := range never {
		pre[node] = true
	}
	parts := make([]string, len(set))
	for i, t := range set {
		node := strings.TrimPrefix(t.Key, wire.NodeTargetKey(""))
		parts[i] = fmt.Sprintf("%s (revision %d)", node, t.Revision)
		if pre[node] {
			parts[i] = fmt.Sprintf("%s (revision %d; pre-declared: it has not heartbeated yet)", node, t.Revision)
		}
	}
	return fmt.Sprintf("target %s set for %s", version, strings.Join(parts, ", "))
}
