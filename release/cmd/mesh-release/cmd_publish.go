package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/novox/mesh-host/host/wire"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/publish"
)

// deliveryBus are the flags publish and target share to reach the bus.
type deliveryBus struct{ url, creds, prefix *string }

func addDeliveryBus(fs *flag.FlagSet) deliveryBus {
	return deliveryBus{
		url:    fs.String("nats", bus.DefaultURL, "NATS URL(s) of the bus, comma-separated"),
		creds:  fs.String("creds", "", "NATS .creds file"),
		prefix: fs.String("prefix", wire.DefaultPrefix, "prefix of the mesh's bus names"),
	}
}

func (b deliveryBus) connect(ctx context.Context) (*bus.Conn, wire.Names, error) {
	c, err := bus.Connect(ctx, *b.url, *b.creds)
	return c, wire.NamesFor(*b.prefix), err
}

// runPublish: mesh-release publish DIR [--nats URL --creds FILE --prefix mesh]
func runPublish(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	b := addDeliveryBus(fs)
	pos, err := deliveryParse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: mesh-release publish DIR (the -o directory of `mesh-release build`)")
	}
	c, names, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := publish.Publish(ctx, c.JS, names, pos[0])
	if err != nil {
		return err
	}
	if r.AlreadyPublished {
		fmt.Printf("%s is already published with this archive (%s); nothing changed\n", r.Manifest.Version, r.Manifest.Digest)
		return nil
	}
	fmt.Printf("published %s: %s in %s, manifest in %s\n", r.Manifest.Version, r.Manifest.Object, names.Archives(), names.Releases())
	return nil
}
