package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/novox/mesh-host/release/build"
)

// runBuild: mesh-release build --version vX.Y.Z [--binary PATH | --archive FILE] --key KEY -o DIR
func runBuild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	ver := fs.String("version", "", "the release's semantic version, vX.Y.Z (stamped into the built binary)")
	bin := fs.String("binary", "", "pack this mesh-host binary instead of building ./host/cmd/mesh-host")
	arc := fs.String("archive", "", "sign this tar.zst archive (made elsewhere) as it is, without repacking")
	keyPath := fs.String("key", "", "the release key (release.key from `mesh-release keygen`)")
	out := fs.String("o", "", "output directory for the archive and manifest.json")
	arch := fs.String("arch", "", "architecture to build for when building (default: this machine's)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	if *keyPath == "" {
		return errors.New("--key KEY is required (make one with `mesh-release keygen`)")
	}
	key, err := build.LoadKey(*keyPath)
	if err != nil {
		return err
	}
	r, err := build.Build(ctx, build.Options{Version: *ver, Key: key, OutDir: *out, Binary: *bin, Archive: *arc, GOARCH: *arch})
	if err != nil {
		return err
	}
	m := r.Manifest
	fmt.Printf("built %s %s/%s: %s (%d bytes, %s), binary %s, signed by %s\n",
		m.Version, m.OS, m.Arch, r.ArchivePath, m.Size, m.Digest, m.BinaryDigest, m.KeyID)
	fmt.Printf("manifest %s; next: mesh-release publish %s\n", r.ManifestPath, *out)
	return nil
}
