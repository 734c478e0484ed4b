package main

import (
	"context"
	"flag"
	"path/filepath"

	"github.com/novox/mesh-host/release/build"
)

func keygenCmd(_ context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	out := fs.String("out", "", "`DIR` to write release.key (mode 0600) and release.pub into (required)")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out DIR is required")
	}
	pub, err := build.Keygen(*out)
	if err != nil {
		return err
	}
	s.printf("wrote %s (keep it secret) and %s\n", filepath.Join(*out, build.KeyFile), filepath.Join(*out, build.PubFile))
	s.printf("key_id %s; add this to each host's trusted_keys:\n%s\n", build.KeyID(pub), build.PublicKeyString(pub))
	return nil
}
