package objfetch_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/objfetch"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Each case puts an object of three chunks and a half, spoils the store as it says, and reads
// the object by direct gets: a whole object reads back byte for byte, and a store that lost a
// chunk or holds other bytes gives jetstream.ErrDigestMismatch, never a short or wrong read
// ending in io.EOF. No read leaves a consumer on the server.
func TestAnObjectIsReadByDirectGetsAndCheckedAgainstTheStoresDigest(t *testing.T) {
	const chunk = 128 << 10
	body := make([]byte, 3*chunk+chunk/2)
	for i := range body {
		body[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, ctx context.Context, st jetstream.Stream, info *jetstream.ObjectInfo)
		want  error // nil: the body, then io.EOF
	}{
		{name: "a whole object reads back", spoil: func(*testing.T, context.Context, jetstream.Stream, *jetstream.ObjectInfo) {}},
		{name: "a chunk deleted from the store is a digest mismatch", want: jetstream.ErrDigestMismatch,
			spoil: func(t *testing.T, ctx context.Context, st jetstream.Stream, info *jetstream.ObjectInfo) {
				m, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject("$O.objs.C."+info.NUID))
				if err != nil {
					t.Fatal(err)
				}
				if err := st.DeleteMsg(ctx, m.Sequence+1); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "the metadata's digest of other bytes is a digest mismatch", want: jetstream.ErrDigestMismatch,
			spoil: func(_ *testing.T, _ context.Context, _ jetstream.Stream, info *jetstream.ObjectInfo) {
				info.Digest = "SHA-256=" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
			}},
		{name: "a size larger than the chunks hold is a digest mismatch", want: jetstream.ErrDigestMismatch,
			spoil: func(_ *testing.T, _ context.Context, _ jetstream.Stream, info *jetstream.ObjectInfo) { info.Size++ }},
		{name: "a size smaller than the chunks hold is a digest mismatch", want: jetstream.ErrDigestMismatch,
			spoil: func(_ *testing.T, _ context.Context, _ jetstream.Stream, info *jetstream.ObjectInfo) { info.Size-- }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t, meshtest.NoBuckets())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			obs, err := b.Conn.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "objs"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := obs.PutBytes(ctx, "o", body); err != nil {
				t.Fatal(err)
			}
			info, err := obs.GetInfo(ctx, "o")
			if err != nil {
				t.Fatal(err)
			}
			st, err := b.Conn.JS.Stream(ctx, "OBJ_objs")
			if err != nil {
				t.Fatal(err)
			}
			tc.spoil(t, ctx, st, info)
			r, err := objfetch.Open(ctx, b.Conn.JS, "objs", info)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("read: %v", err)
			case tc.want == nil && !bytes.Equal(got, body):
				t.Fatalf("read %d bytes, not the %d put", len(got), len(body))
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("read %d bytes, err %v; want %v", len(got), err, tc.want)
			}
			if si, err := st.Info(ctx); err != nil || si.State.Consumers != 0 {
				t.Errorf("consumers on the store after the read: %v %v", si.State.Consumers, err)
			}
		})
	}
}

// A chunk's get whose answer never comes — the server that would have answered it was lost,
// as when a cluster's server is killed mid-fetch — is asked again after Reader.Try, and the
// object reads back whole; before, the read waited for the answer until its context ended (the
// host's stall timeout, 30 s).
func TestAChunkWhoseAnswerIsLostIsAskedForAgain(t *testing.T) {
	const chunk = 128 << 10
	body := make([]byte, 2*chunk+chunk/3)
	for i := range body {
		body[i] = byte(i * 13)
	}
	b := meshtest.StartBus(t, meshtest.NoBuckets())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := b.Conn.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "objs"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, "o", body); err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	js := &losingJS{JetStream: b.Conn.JS, lose: map[int]bool{2: true}}
	r, err := objfetch.Open(ctx, js, "objs", info)
	if err != nil {
		t.Fatal(err)
	}
	r.Try = 200 * time.Millisecond
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read %d bytes of %d, err %v; want the object whole", len(got), len(body), err)
	}
	if js.gets != 4 {
		t.Errorf("%d gets, want 4: three chunks, the second asked twice", js.gets)
	}
}

// losingJS is a JetStream whose streams lose the answer to the gets numbered in lose (1 is the
// first): such a get waits, as one sent to a server that died does, until its context ends.
type losingJS struct {
	jetstream.JetStream
	lose map[int]bool
	gets int
}

func (j *losingJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := j.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return &losingStream{Stream: st, js: j}, nil
}

type losingStream struct {
	jetstream.Stream
	js *losingJS
}

func (s *losingStream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	s.js.gets++
	if s.js.lose[s.js.gets] {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Stream.GetMsg(ctx, seq, opts...)
}
