package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/publish"
)

func publishCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	keyFlag := fs.String("key", "", "the release key `FILE` that signed the build, to sign its manifest again listing the deltas publish adds (default $"+envReleaseKey+"; without it, none are added)")
	noDeltas := fs.Bool("no-deltas", false, "add no deltas against published versions: the manifest stays as built, schema 1 or 2, which hosts from before decision 0028 read")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want DIR (the -o directory of `mesh-release build`), got %d %s", len(pos), text.Plural(len(pos), "argument", "arguments"))
	}
	o := publish.Options{Deltas: publish.DefaultDeltas}
	if *noDeltas {
		o.Deltas = 0
	} else if path, from := keyPathFrom(*keyFlag, s.getenv); path != "" {
		if o.Key, err = build.LoadKey(path); err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	names := b.names()
	r, err := publish.PublishWith(ctx, c.JS, names, pos[0], o)
	if err != nil {
		return err
	}
	if r.NoDeltas != "" {
		fmt.Fprintf(s.err, "note: %s\n", r.NoDeltas)
	}
	for _, d := range r.Added {
		s.printf("delta from %s: %s (%d bytes, %.1f%% of the archive)\n", d.BaseVersion, d.Object, d.Size, 100*float64(d.Size)/float64(r.Manifest.Size))
	}
	if r.AlreadyPublished {
		s.printf("%s is already published with this archive (%s); nothing changed\n", r.Manifest.Version, r.Manifest.Digest)
		return nil
	}
	s.printf("published %s: %s in %s, manifest in %s\n", r.Manifest.Version, r.Manifest.Object, names.Archives(), names.Releases())
	return nil
}
