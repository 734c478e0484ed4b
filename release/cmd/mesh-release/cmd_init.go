package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/novox/mesh-host/host/wire"
	"github.com/novox/mesh-host/release/bus"
)

// busFlags are the flags every command that uses an existing bus takes.
type busFlags struct {
	url, creds, prefix string
}

func (b *busFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.url, "nats", bus.DefaultURL, "NATS `URL` (comma-separated for a cluster)")
	fs.StringVar(&b.creds, "creds", "", "NATS credentials `FILE` (.creds)")
	fs.StringVar(&b.prefix, "prefix", wire.DefaultPrefix, "prefix of the mesh's bus names")
}

func (b *busFlags) names() wire.Names { return wire.NamesFor(b.prefix) }

// parseArgs parses flags wherever they appear among the positional arguments, so that both
// `declare --nats URL n1 f.json` and `declare n1 f.json --nats URL` work.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

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
	c, err := bus.Connect(ctx, b.url, b.creds)
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
