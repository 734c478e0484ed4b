package main

import (
	"context"
	"flag"

	"github.com/novox/mesh-host/release/bus"
)

func initCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	n := b.names()
	if err := bus.Init(ctx, c.JS, n); err != nil {
		return err
	}
	s.printf("ready: KV %s, %s, %s, %s; object store %s; stream %s on %s\n",
		n.Declarations(), n.Targets(), n.Releases(), n.Rollouts(), n.Archives(), n.HeartbeatStream(), n.HeartbeatWildcard())
	return nil
}
