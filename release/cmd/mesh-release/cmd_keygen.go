package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/novox/mesh-host/release/build"
)

// runKeygen: mesh-release keygen --out DIR
func runKeygen(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write release.key (mode 0600) and release.pub into")
	if _, err := parseArgs(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out DIR is required")
	}
	pub, err := build.Keygen(*out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (keep it secret) and %s\n", filepath.Join(*out, build.KeyFile), filepath.Join(*out, build.PubFile))
	fmt.Printf("key_id %s; add this to each host's trusted_keys:\n%s\n", build.KeyID(pub), build.PublicKeyString(pub))
	return nil
}
