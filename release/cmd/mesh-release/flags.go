package main

import (
	"context"
	"flag"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
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

// connect dials the bus the flags name.
func (b *busFlags) connect(ctx context.Context) (*bus.Conn, error) {
	return bus.Connect(ctx, b.url, b.creds)
}

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
