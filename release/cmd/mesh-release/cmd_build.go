package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/publish"
	"github.com/novox/mesh-host/wire"
)

func buildCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	ver := fs.String("version", "", "the release's semantic `version`, vX.Y.Z (stamped into the built binaries)")
	platforms := fs.String("platforms", "", "the platforms to build host and launcher for, comma-separated (`LIST`; default "+wire.DefaultPlatforms+"; with --binary or --archive, that binary's own)")
	bin := fs.String("binary", "", "pack this mesh-host binary (`FILE`, one platform's) instead of building ./host/cmd/mesh-host")
	arc := fs.String("archive", "", "sign this tar.zst archive (`FILE`, one platform's, holding mesh-host alone, made elsewhere) as it is, without repacking")
	launcher := fs.String("launcher", "", "name this mesh-launcher (`FILE`, one platform's) instead of building ./launcher/cmd/mesh-launcher from the same tree; its version is what `FILE version` prints")
	noLauncher := fs.Bool("no-launcher", false, "name no mesh-launcher: the release carries none (nodes keep theirs)")
	var keyFlag listFlag
	fs.Var(&keyFlag, "key", "the release key `FILE` (release.key from `mesh-release keygen`; required; default $"+envReleaseKey+"); repeat it for a root whose releases role needs two signatures or more: each key signs the manifest")
	out := fs.String("o", "", "output `DIR` for the objects and manifest.json")
	arch := fs.String("arch", "", "one platform, linux/`ARCH` (arm: linux/arm/v7): the same as --platforms linux/ARCH")
	var deltaFrom listFlag
	fs.Var(&deltaFrom, "delta-from", "also write deltas of each platform's host binary and launcher against `BASE`'s: the -o directory of an earlier build, or a published version read from the bus (--nats, --creds, --ca, --prefix); repeatable; the manifest lists each (decisions 0028, 0044)")
	var b busFlags
	b.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	ps, err := platformsFlag(*platforms, *arch)
	if err != nil {
		return err
	}
	k := keyFlags{paths: keyFlag, getenv: s.getenv}
	keyPath, from := k.file()
	if keyPath == "" {
		return missingError{"--key FILE is required: the release key that signs the manifest (release.key from `mesh-release keygen`), or set " + envReleaseKey}
	}
	key, err := build.LoadKey(keyPath)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	more, err := k.more()
	if err != nil {
		return err
	}
	bases, err := deltaBases(ctx, &b, deltaFrom)
	if err != nil {
		return err
	}
	r, err := build.Build(ctx, build.Options{Version: *ver, Key: key, MoreKeys: more, OutDir: *out, Platforms: ps, Binary: *bin, Archive: *arc,
		Launcher: *launcher, NoLauncher: *noLauncher, Deltas: bases})
	if err != nil {
		return err
	}
	printBuild(s, r, *out)
	return nil
}

// platformsFlag reads --platforms, or --arch as one platform; neither is nil (the default).
func platformsFlag(list, arch string) ([]wire.Platform, error) {
	switch {
	case list != "" && arch != "":
		return nil, usagef("give --platforms or --arch, not both")
	case arch != "":
		p, err := wire.ParsePlatform(build.OS + "/" + arch)
		if err != nil && arch == "arm" {
			p, err = wire.NodePlatform(build.OS, arch, ""), nil
		}
		if err != nil {
			return nil, usagef("--arch %s: %v", text.Bound(arch), err)
		}
		return []wire.Platform{p}, nil
	case list != "":
		ps, err := wire.ParsePlatforms(list)
		if err != nil {
			return nil, usagef("--platforms: %v", err)
		}
		return ps, nil
	}
	return nil, nil
}

// printBuild says what build wrote: each platform's archive, launcher and deltas.
func printBuild(s *stdio, r build.Result, dir string) {
	m := r.Manifest
	ps := m.PlatformList()
	s.printf("built %s for %d %s, signed by %s; manifest schema %d\n", m.Version, len(ps), text.Plural(len(ps), "platform", "platforms"), m.KeyID, m.Schema)
	for _, p := range ps {
		b, err := m.For(p)
		if err != nil {
			continue
		}
		s.printf("%s: %s (%d bytes, %s), binary %s\n", p, filepath.Join(dir, b.Object), b.Size, b.Digest, b.BinaryDigest)
		for _, d := range b.Deltas {
			s.printf("  delta from %s: %s (%d bytes, %.1f%% of the archive)\n", d.BaseVersion, filepath.Join(dir, d.Object), d.Size, 100*float64(d.Size)/float64(b.Size))
		}
		l := b.Launcher
		if l.Object == "" {
			s.printf("  carries no mesh-launcher\n")
			continue
		}
		s.printf("  mesh-launcher %s: %s (%d bytes; the binary %d bytes, %s)\n", l.Version, filepath.Join(dir, l.Object), l.Size, l.BinarySize, l.BinaryDigest)
		for _, d := range l.Deltas {
			s.printf("  launcher delta from %s: %s (%d bytes, %.1f%% of the object)\n", d.BaseVersion, filepath.Join(dir, d.Object), d.Size, 100*float64(d.Size)/float64(l.Size))
		}
	}
	s.printf("manifest %s; next: mesh-release publish %s\n", r.ManifestPath, dir)
}

// deltaBases reads each --delta-from BASE: a directory is an earlier build's output; anything
// else is a version published on the bus, which is connected to only if one is named.
func deltaBases(ctx context.Context, b *busFlags, from []string) ([]build.Base, error) {
	var (
		bases []build.Base
		c     *bus.Conn
	)
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for _, f := range from {
		if fi, err := os.Stat(f); err == nil && fi.IsDir() {
			base, err := build.BaseFromDir(ctx, f, 0)
			if err != nil {
				return nil, err
			}
			bases = append(bases, base...)
			continue
		}
		if !wire.ValidVersion(f) {
			return nil, usagef("--delta-from %q is neither a build directory nor a published version like v1.4.0", text.Bound(f))
		}
		if c == nil {
			var err error
			if c, err = b.connect(ctx); err != nil {
				return nil, fmt.Errorf("--delta-from %s is read from the bus: %w", f, err)
			}
		}
		base, err := publish.PublishedBase(ctx, c.JS, b.names(), f, 0)
		if err != nil {
			return nil, err
		}
		bases = append(bases, base...)
	}
	return bases, nil
}
