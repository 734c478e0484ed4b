package main

import (
	"context"
	"errors"
	"flag"
	"strings"

	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

// keepTargetsInServe is serve's --key: while serve runs it re-signs every target its key signed
// before the target's validity runs under half of --target-ttl (targets.Keep), so a fleet whose
// targets nobody touches for a week is not frozen by its own expiry.
func keepTargetsInServe(fs *flag.FlagSet) func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error {
	var k keyFlags
	fs.Var(&k.paths, "key", "a target key `FILE` (release.key, or a key hosts trust as a target key): serve re-signs the targets, windows and withdrawal list it signed before they expire (default $"+envReleaseKey+"); repeat it for a targets threshold of two or more")
	fs.DurationVar(&k.ttl, "target-ttl", targets.DefaultTTL, "with --key, how long each re-signed target stays valid")
	return func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error {
		k.getenv = s.getenv
		if path, _ := k.file(); path == "" {
			return nil // no key: nothing to re-sign with
		}
		signer, err := k.signer()
		if err != nil {
			return err
		}
		creds := ""
		if store != nil {
			creds = store.AdminCreds()
		}
		c, err := srv.Connect(ctx, creds)
		if err != nil {
			return err
		}
		log := logkey.Text(s.err, nil).With("component", "targets")
		go func() {
			defer c.Close()
			if err := targets.KeepSigned(ctx, c.JS, n, signer, log); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("re-signing targets stopped", "err", err)
			}
		}()
		s.printf("targets: re-signing those key %s signed before they expire (valid %s each)\n", strings.Join(signer.KeyIDs(), "+"), signer.TTL)
		return nil
	}
}
