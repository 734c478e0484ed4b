// Package ctxio stops a long read when its context ends.
//
// Io.Copy and decoders read until EOF and know nothing of contexts.
package ctxio

import (
	"context"
	"io"
)

// Reader returns r that fails with ctx's error on the first Read after ctx ends.
func Reader(ctx context.Context, r io.Reader) io.Reader { return reader{ctx, r} }

type reader struct {
	ctx context.Context
	r   io.Reader
}

func (c reader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
