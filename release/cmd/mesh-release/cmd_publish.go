package main

import (
	"context"
	"flag"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/publish"
)

func publishCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want DIR (the -o directory of `mesh-release build`), got %d %s", len(pos), text.Plural(len(pos), "argument", "arguments"))
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	names := b.names()
	r, err := publish.Publish(ctx, c.JS, names, pos[0])
	if err != nil {
		return err
	}
	if r.AlreadyPublished {
		s.printf("%s is already published with this archive (%s); nothing changed\n", r.Manifest.Version, r.Manifest.Digest)
		return nil
	}
	s.printf("published %s: %s in %s, manifest in %s\n", r.Manifest.Version, r.Manifest.Object, names.Archives(), names.Releases())
	return nil
}
