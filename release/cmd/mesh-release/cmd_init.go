package main

import (
	"context"
	"flag"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
)

const initAbout = `For a NATS you run yourself (serve does this for its own). The account the credentials
belong to needs JetStream. With --print-templates it connects to nothing and prints what to set
up in that NATS for the mesh: the account, and the permissions of the release side's user, of
each node's user and of an enrolment token's user (docs/decisions/0011-trust-on-the-bus.md).`

func initCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	templates := fs.Bool("print-templates", false, "print the account and user permission templates for your own NATS, and do nothing else")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	n := b.names()
	if *templates {
		s.printf("%s", trust.Templates(n))
		return nil
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := bus.Init(ctx, c.JS, n); err != nil {
		return err
	}
	s.printf("ready: KV %s, %s, %s, %s, %s; object stores %s, %s; stream %s on %s\n",
		n.Declarations(), n.Targets(), n.Releases(), n.Withdrawals(), n.Rollouts(), n.Archives(), n.Blobs(), n.HeartbeatStream(), n.HeartbeatWildcard())
	s.printf("for your own NATS's accounts and users: mesh-release init --print-templates\n")
	return nil
}
