package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

func runDeclare(ctx context.Context, args []string) error {
	return declareCmd(ctx, args, os.Stdin, os.Stdout)
}

func declareCmd(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	var b busFlags
	fs := newFlagSet("declare", "[--nats URL] [--creds FILE] [--prefix mesh] [--max-bytes 1048576] NODE FILE   (FILE - reads stdin)")
	b.register(fs)
	maxBytes := fs.Int64("max-bytes", wire.DefaultMaxDeclarationBytes, "refuse a declaration larger than this many `bytes` (hosts refuse one over their max_declaration_bytes)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return errors.New("want a node id and a declaration file")
	}
	if *maxBytes <= 0 {
		return fmt.Errorf("--max-bytes is %d; it must be a positive number of bytes", *maxBytes)
	}
	node, file := pos[0], pos[1]
	if err := wire.ValidNode(node); err != nil {
		return err
	}
	src := in
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
		// The error quotes the file; bounded, so a huge key does not flood the terminal.
		return fmt.Errorf("%s: %s (nothing was put)", file, rollback.Cut(err.Error(), wire.MaxErrorBytes))
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	n := b.names()
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
	fmt.Fprintln(out, rev)
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
