package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/novox/mesh-host/release/publish"
)

// runPublish: mesh-release publish DIR [--nats URL --creds FILE --prefix mesh]
func runPublish(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	var b busFlags
	b.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: mesh-release publish DIR (the -o directory of `mesh-release build`)")
	}
	c, err := b.connect(ctx)
	names := b.names()
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
