package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/host/wire"
)

func runDeclare(ctx context.Context, args []string) error {
	return declareCmd(ctx, args, os.Stdin, os.Stdout)
}

func declareCmd(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	var b busFlags
	fs := newFlagSet("declare", "[--nats URL] [--creds FILE] [--prefix mesh] NODE FILE   (FILE - reads stdin)")
	b.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return errors.New("want a node id and a declaration file")
	}
	node, file := pos[0], pos[1]
	if err := wire.ValidNode(node); err != nil {
		return err
	}
	var data []byte
	if file == "-" {
		data, err = io.ReadAll(in)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return fmt.Errorf("read the declaration: %w", err)
	}
	if _, err := wire.ParseDeclaration(data, node); err != nil {
		return fmt.Errorf("%s: %w (nothing was put)", file, err)
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
