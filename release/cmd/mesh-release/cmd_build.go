package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/publish"
	"github.com/novox/mesh-host/wire"
)

func buildCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	ver := fs.String("version", "", "the release's semantic `version`, vX.Y.Z (stamped into the built binary)")
	bin := fs.String("binary", "", "pack this mesh-host binary (`FILE`) instead of building ./host/cmd/mesh-host")
	arc := fs.String("archive", "", "sign this tar.zst archive (`FILE`, made elsewhere) as it is, without repacking")
	launcher := fs.String("launcher", "", "pack this mesh-launcher (`FILE`) instead of building ./launcher/cmd/mesh-launcher from the same tree; its version is what `FILE version` prints")
	noLauncher := fs.Bool("no-launcher", false, "pack no mesh-launcher: a schema 1 manifest, which hosts that read schema 1 only accept (decision 0014)")
	keyFlag := fs.String("key", "", "the release key `FILE` (release.key from `mesh-release keygen`; required; default $"+envReleaseKey+")")
	out := fs.String("o", "", "output `DIR` for the archive and manifest.json")
	arch := fs.String("arch", "", "architecture to build for when building (default: this machine's)")
	var deltaFrom listFlag
	fs.Var(&deltaFrom, "delta-from", "also write a delta of the host binary against `BASE`'s: the -o directory of an earlier build, or a published version read from the bus (--nats, --creds, --ca, --prefix); repeatable; the manifest lists each (schema 3, decision 0028)")
	var b busFlags
	b.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	keyPath, from := keyPathFrom(*keyFlag, s.getenv)
	if keyPath == "" {
		return missingError{"--key FILE is required: the release key that signs the manifest (release.key from `mesh-release keygen`), or set " + envReleaseKey}
	}
	key, err := build.LoadKey(keyPath)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	bases, err := deltaBases(ctx, &b, deltaFrom)
	if err != nil {
		return err
	}
	r, err := build.Build(ctx, build.Options{Version: *ver, Key: key, OutDir: *out, Binary: *bin, Archive: *arc,
		Launcher: *launcher, NoLauncher: *noLauncher, GOARCH: *arch, Deltas: bases})
	if err != nil {
		return err
	}
	m := r.Manifest
	s.printf("built %s %s/%s: %s (%d bytes, %s), binary %s, signed by %s\n",
		m.Version, m.OS, m.Arch, r.ArchivePath, m.Size, m.Digest, m.BinaryDigest, m.KeyID)
	if m.HasLauncher() {
		s.printf("carries mesh-launcher %s (%d bytes, %s); manifest schema %d\n", m.Launcher.Version, m.Launcher.Size, m.Launcher.Digest, m.Schema)
	} else {
		s.printf("carries no mesh-launcher; manifest schema %d\n", m.Schema)
	}
	for i, d := range m.Deltas {
		s.printf("delta from %s: %s (%d bytes, %.1f%% of the archive)\n", d.BaseVersion, r.DeltaPaths[i], d.Size, 100*float64(d.Size)/float64(m.Size))
	}
	s.printf("manifest %s; next: mesh-release publish %s\n", r.ManifestPath, *out)
	return nil
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
			bases = append(bases, base)
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
		bases = append(bases, base)
	}
	return bases, nil
}
