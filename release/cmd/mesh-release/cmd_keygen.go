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
	if _, err := deliveryParse(fs, args); err != nil {
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

// deliveryParse parses flags and positional arguments in any order (`publish DIR --nats URL`
// as well as `publish --nats URL DIR`) and returns the positional ones.
func deliveryParse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
