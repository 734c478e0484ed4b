package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/novox/mesh-host/release/build"
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
	r, err := build.Build(ctx, build.Options{Version: *ver, Key: key, OutDir: *out, Binary: *bin, Archive: *arc,
		Launcher: *launcher, NoLauncher: *noLauncher, GOARCH: *arch})
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
	s.printf("manifest %s; next: mesh-release publish %s\n", r.ManifestPath, *out)
	return nil
}
