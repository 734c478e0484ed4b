package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

const declareAbout = `NODE is the node's id; FILE is the declaration (- reads stdin). The declaration is
validated as its host would (addressed to NODE, known fields, every resource's spec checked,
paths and units the installation owns refused, within --max-bytes) before anything is sent;
an error names the place, as in resources[3].spec.mode. It is stored only for a node that has heartbeated on this bus, so that a
mistyped id is not stored silently; --force stores it for a node not yet started.
Prints "declaration for NODE stored, revision N"; the host reports that revision.`

func declareCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	maxBytes := fs.Int64("max-bytes", wire.DefaultMaxDeclarationBytes, "refuse a declaration larger than this many `bytes` (hosts refuse one over their max_declaration_bytes)")
	force := fs.Bool("force", false, "store it even if NODE has never heartbeated (pre-declare a node not yet started)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("want NODE and FILE, got %d %s", len(pos), text.Plural(len(pos), "argument", "arguments"))
	}
	if *maxBytes <= 0 {
		return usagef("--max-bytes is %d; it must be a positive number of bytes", *maxBytes)
	}
	node, file := pos[0], pos[1]
	if err := wire.ValidNode(node); err != nil {
		return err
	}
	src := s.in
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("read the declaration: %w", err)
		}
		defer f.Close()
		src = f
	}
	data, size, err := readUpTo(src, *maxBytes)
	if err != nil {
		return fmt.Errorf("read the declaration %s: %w", file, err)
	}
	if err := wire.CheckDeclarationSize(size, *maxBytes); err != nil {
		return fmt.Errorf("%s: %w; split it, or raise --max-bytes if the hosts' max_declaration_bytes and the bucket's max value size allow it (nothing was put)", file, err)
	}
	if _, err := wire.ParseDeclaration(data, node); err != nil {
		// The error names the place (resources[3].spec.mode: …) and is bounded, so a huge key
		// does not flood the terminal.
		return fmt.Errorf("%s: %s (nothing was put)", file, text.Cut(err.Error(), wire.MaxErrorBytes))
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	n := b.names()
	never, err := unheard(ctx, c.JS, n, []string{node}, *force)
	if err != nil {
		return err
	}
	if len(never) > 0 && !*force {
		return neverHeardError(ctx, c.JS, n, never, "nothing was stored.")
	}
	kv, err := c.JS.KeyValue(ctx, n.Declarations())
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("KV bucket %s does not exist; run `mesh-release init` first: %w", n.Declarations(), err)
		}
		return fmt.Errorf("KV bucket %s: %w", n.Declarations(), err)
	}
	rev, err := kv.Put(ctx, node, data)
	if err != nil {
		return fmt.Errorf("put the declaration for %s: %w", node, err)
	}
	s.printf("declaration for %s stored, revision %d", node, rev)
	if len(never) > 0 {
		s.printf(" (pre-declared: %s has not heartbeated yet; its host takes it when it starts)", node)
	}
	s.println()
	return nil
}

// readUpTo reads r, keeping at most max bytes in memory; size is how long r was, counted to its
// end even past max so that a refusal can say it.
func readUpTo(r io.Reader, max int64) (data []byte, size int64, err error) {
	data, err = io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, 0, err
	}
	size = int64(len(data))
	if size > max {
		rest, err := io.Copy(io.Discard, r)
		if err != nil {
			return nil, 0, err
		}
		size += rest
	}
	return data, size, nil
}
