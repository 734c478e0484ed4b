// Package objfetch reads one object of a JetStream object store without a consumer.
//
// Each chunk is a direct get of the next message on the object's chunk subject, so a node fetches
// an archive or a blob leaving nothing on the server behind it, and needs no permission to create a
// consumer (docs/security.md, "A node creates no consumer"). It checks the chunks against the
// store's own size and digest of the object as they arrive, as nats.go's obs.Get does.
package objfetch

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RequestTry is how long one request of a fetch — the stream's info, a chunk, and what a caller
// asks through Ask — waits for its answer before it is asked again: a server of a cluster that
// dies holding the request takes the answer with it, and the request asked again is answered by
// another server (or by the same one once the link is back).
const RequestTry = 5 * time.Second

// noResponderPause is how long a request that nobody answered waits before it is asked again.
const noResponderPause = 250 * time.Millisecond

// Config is how a fetch asks; its zero value is the defaults (Open uses it).
type Config struct {
	// Try is how long one request waits for its answer before it is asked again (default
	// RequestTry).
	Try time.Duration
}

// withDefaults is c with every zero field given its default: the one place they are filled.
func (c Config) withDefaults() Config {
	if c.Try <= 0 {
		c.Try = RequestTry
	}
	return c
}

// Ask makes the request req makes, under a context that ends after c's Try, and asks again while no answer comes in that time or nobody answered (no server able to was up:
// after a short pause), until an answer or another error comes or ctx ends. A lost request then
// costs one try, not the caller's whole deadline (nats.go waits for an answer until its context
// ends: the request is not sent again after a reconnect). What bounds a request that is never
// answered (a link down for good, a subject the user may not ask on) is ctx.
func Ask[T any](ctx context.Context, c Config, req func(context.Context) (T, error)) (T, error) {
	c = c.withDefaults()
	for {
		tctx, cancel := context.WithTimeout(ctx, c.Try)
		v, err := req(tctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return v, err
		}
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		case errors.Is(err, nats.ErrNoResponders):
			// Asked again at once it would find nobody again: a short pause first.
			t := time.NewTimer(noResponderPause)
			select {
			case <-ctx.Done():
				t.Stop()
				return v, ctx.Err()
			case <-t.C:
			}
		default:
			return v, err
		}
	}
}

// Reader is an object's bytes, fetched a chunk at a time as they are read. Its Read returns
// jetstream.ErrDigestMismatch when the chunks do not match the store's digest of the object
// (or add up to more or fewer bytes than its size), and io.EOF only after they matched.
type Reader struct {
	cfg     Config
	ctx     context.Context
	stream  jetstream.Stream
	subject string
	info    *jetstream.ObjectInfo
	next    uint64 // the stream sequence the next chunk is looked for from
	got     uint64 // bytes fetched
	sum     hash.Hash
	buf     []byte
	err     error
}

// Open returns a Reader of the object info describes (from obs.GetInfo) in bucket, asking as
// the zero Config does. Its reads run under ctx: cancel it to end a fetch.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, info *jetstream.ObjectInfo) (*Reader, error) {
	return Config{}.Open(ctx, js, bucket, info)
}

// Open returns a Reader of the object info describes in bucket, every request asked as c says.
func (c Config) Open(ctx context.Context, js jetstream.JetStream, bucket string, info *jetstream.ObjectInfo) (*Reader, error) {
	c = c.withDefaults()
	if info == nil || info.NUID == "" {
		return nil, errors.New("objfetch: no object info")
	}
	if info.Opts != nil && info.Opts.Link != nil {
		return nil, fmt.Errorf("objfetch: object %s in %s is a link, which the mesh never puts", info.Name, bucket)
	}
	st, err := Ask(ctx, c, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, "OBJ_"+bucket) })
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return nil, cause
		}
		return nil, fmt.Errorf("objfetch: object store %s: %w", bucket, err)
	}
	if !st.CachedInfo().Config.AllowDirect {
		return nil, fmt.Errorf("objfetch: object store %s does not allow direct gets (its stream's allow_direct); recreate it with `mesh-release init`", bucket)
	}
	return &Reader{cfg: c, ctx: ctx, stream: st, subject: "$O." + bucket + ".C." + info.NUID, info: info, next: 1, sum: sha256.New()}, nil
}

// Info is what Open was given.
func (r *Reader) Info() *jetstream.ObjectInfo { return r.info }

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.err = r.fetch()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// fetch gets the next chunk into buf, or says why there is none: io.EOF once every byte came
// and matched the digest.
func (r *Reader) fetch() error {
	if r.got == r.info.Size {
		if got := "SHA-256=" + base64.URLEncoding.EncodeToString(r.sum.Sum(nil)); got != r.info.Digest {
			return fmt.Errorf("%w: the chunks' digest is %s, the store's %s", jetstream.ErrDigestMismatch, got, r.info.Digest)
		}
		return io.EOF
	}
	m, err := r.get()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("%w: the object store holds %d of the object's %d bytes", jetstream.ErrDigestMismatch, r.got, r.info.Size)
	}
	if err != nil {
		if cause := context.Cause(r.ctx); cause != nil && r.ctx.Err() != nil {
			return cause
		}
		return fmt.Errorf("objfetch: chunk after %d bytes: %w", r.got, err)
	}
	if m.Subject != r.subject || m.Sequence < r.next {
		return fmt.Errorf("objfetch: the server answered with %s #%d for the next chunk of %s from #%d", m.Subject, m.Sequence, r.subject, r.next)
	}
	if r.got+uint64(len(m.Data)) > r.info.Size {
		return fmt.Errorf("%w: the chunks hold more than the object's %d bytes", jetstream.ErrDigestMismatch, r.info.Size)
	}
	r.next = m.Sequence + 1
	r.got += uint64(len(m.Data))
	r.sum.Write(m.Data)
	r.buf = m.Data
	if len(m.Data) == 0 {
		return r.fetch()
	}
	return nil
}

// get is the next chunk's message, asked for again when its answer does not come within the
// Config's Try (the server holding the request died) or nobody answered (no replica of a
// cluster's stream was up to): until one answers or r.ctx ends — the host's stall timer ends a
// fetch that makes no progress.
func (r *Reader) get() (*jetstream.RawStreamMsg, error) {
	return Ask(r.ctx, r.cfg, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return r.stream.GetMsg(ctx, r.next, jetstream.WithGetMsgSubject(r.subject))
	})
}

// Close ends the reader; nothing is left on the server to remove.
func (r *Reader) Close() error {
	if r.err == nil {
		r.err = errors.New("objfetch: reader closed")
	}
	return nil
}
