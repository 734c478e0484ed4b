package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/publish"
	"github.com/novox/mesh-host/wire"
)

func publishCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	keyFlag := fs.String("key", "", "the release key `FILE` that signed the build, to sign its manifest again listing the deltas publish adds (default $"+envReleaseKey+"; without it, none are added)")
	noDeltas := fs.Bool("no-deltas", false, "add no deltas against published versions: the manifest stays as built")
	schema := fs.Int("manifest-schema", wire.ManifestSchemaPlatforms, "the manifest to announce: 4, the build's, every platform; or 3, one platform's build as the single-platform manifest hosts reading schema 1 to 3 take (schema 3 with deltas, 1 without; no launcher), signed with --key: the upgrade path, decision 0042 (`N`)")
	platform := fs.String("platform", "", "with --manifest-schema 3, the build to announce (`P`, like linux/amd64; default the build's only one)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want DIR (the -o directory of `mesh-release build`), got %d %s", len(pos), text.Plural(len(pos), "argument", "arguments"))
	}
	o := publish.Options{Deltas: publish.DefaultDeltas, ManifestSchema: *schema}
	if *platform != "" {
		if o.Platform, err = wire.ParsePlatform(*platform); err != nil {
			return usagef("--platform: %v", err)
		}
	}
	if *noDeltas {
		o.Deltas = 0
	}
	if path, from := keyPathFrom(*keyFlag, s.getenv); path != "" && (!*noDeltas || o.ManifestSchema == wire.ManifestSchemaWithDeltas) {
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
		s.printf("delta from %s: %s (%d bytes)\n", d.BaseVersion, d.Object, d.Size)
	}
	if r.AlreadyPublished {
		s.printf("%s is already published with these builds; nothing changed\n", r.Manifest.Version)
		return nil
	}
	printSent(s, r)
	s.printf("published %s (manifest schema %d) in %s, manifest in %s\n", r.Manifest.Version, r.Manifest.Schema, names.Archives(), names.Releases())
	return nil
}

// printSent says, for each platform, what publish sent and what the store held already.
func printSent(s *stdio, r publish.Result) {
	for _, p := range r.Manifest.PlatformList() {
		total, launcher := r.Sent(p)
		var held []string
		for _, o := range r.Objects {
			if o.Platform == p && !o.Put {
				held = append(held, o.Name)
			}
		}
		s.printf("%s: sent %d bytes (launcher %d)", p, total, launcher)
		if len(held) > 0 {
			s.printf("; in the store already, not sent: %s", text.Bound(strings.Join(held, ", ")))
		}
		s.printf("\n")
	}
}
