package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/novox/mesh-host/release/publish"
)

// runTarget: mesh-release target (NODE… | --fleet) vX.Y.Z [--nats URL --creds FILE --prefix mesh]
func runTarget(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("target", flag.ContinueOnError)
	fleet := fs.Bool("fleet", false, "set the fleet target every node without its own falls back to")
	var b busFlags
	b.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return errors.New("usage: mesh-release target (NODE… | --fleet) vX.Y.Z")
	}
	version, nodes := pos[len(pos)-1], pos[:len(pos)-1]
	c, err := b.connect(ctx)
	names := b.names()
	if err != nil {
		return err
	}
	defer c.Close()
	keys, err := publish.Target(ctx, c.JS, names, version, nodes, *fleet)
	if err != nil {
		return err
	}
	fmt.Printf("target %s set in %s for %s\n", version, names.Targets(), strings.Join(keys, ", "))
	return nil
}
