package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
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
	key := filepath.Join(*out, build.KeyFile)
	s.printf("wrote %s (keep it secret) and %s\n", key, filepath.Join(*out, build.PubFile))
	s.printf("key_id %s; add this to each host's trusted_keys:\n%s\n", build.KeyID(pub), build.PublicKeyString(pub))
	if top, ok := gitWorkTree(*out); ok {
		// Said after the key is written, not instead: the operator may have meant it (an ignored
		// directory); one `git add .` of an unignored one would publish the key that signs
		// everything the fleet runs.
		fmt.Fprintf(s.err, "mesh-release keygen: warning: the secret key %s is inside the git work tree %s: keep it out of every commit (list it in .gitignore), or better, keep it outside any checkout\n", key, top)
	}
	return nil
}

// gitWorkTree returns the top of the git work tree that holds dir, found by walking up for a
// .git entry (a directory in a clone, a file in a linked worktree or submodule). It does not
// run git: the release machine may not have it, and a key is as exposed either way.
func gitWorkTree(dir string) (string, bool) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d, true
		} else if !errors.Is(err, os.ErrNotExist) {
			// Unreadable: say nothing rather than guess.
			return "", false
		}
		up := filepath.Dir(d)
		if up == d {
			return "", false
		}
		d = up
	}
}
