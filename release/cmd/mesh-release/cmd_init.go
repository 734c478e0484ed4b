package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/novox/mesh-host/release/bus"
)

func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: mesh-release %s %s\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

func runInit(ctx context.Context, args []string) error {
	return initCmd(ctx, args, os.Stdout)
}

func initCmd(ctx context.Context, args []string, out io.Writer) error {
	var b busFlags
	fs := newFlagSet("init", "[--nats URL] [--creds FILE] [--prefix mesh]")
	b.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("unexpected arguments %q", pos)
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
	fmt.Fprintf(out, "ready: KV %s, %s, %s, %s; object store %s; stream %s on %s\n",
		n.Declarations(), n.Targets(), n.Releases(), n.Rollouts(), n.Archives(), n.HeartbeatStream(), n.HeartbeatWildcard())
	return nil
}
