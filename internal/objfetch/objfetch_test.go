package objfetch_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
// as when a cluster's server is killed mid-fetch — is asked again after Config.Try, and the
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
	r, err := objfetch.Config{Try: 200 * time.Millisecond}.Open(ctx, js, "objs", info)
	if err != nil {
		t.Fatal(err)
	}
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

// Ask asks again while no answer comes within Try (a lost request) or nobody answers, and
// returns any other outcome at once: each case's request fails as fails says, then answers.
func TestAskAsksAgainOnlyWhileNoAnswerComes(t *testing.T) {
	other := errors.New("permission denied")
	for _, tc := range []struct {
		name  string
		fails []error // what the request does before it answers (nil: waits for its context)
		asks  int     // requests made
		want  error
	}{
		{name: "answered at once", asks: 1},
		{name: "lost twice", fails: []error{nil, nil}, asks: 3},
		{name: "nobody answered", fails: []error{nats.ErrNoResponders}, asks: 2},
		{name: "a server's timeout", fails: []error{nats.ErrTimeout}, asks: 2},
		{name: "another error ends it", fails: []error{other}, asks: 1, want: other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asks := 0
			got, err := objfetch.Ask(context.Background(), objfetch.Config{Try: 50 * time.Millisecond}, func(ctx context.Context) (string, error) {
				asks++
				if asks <= len(tc.fails) {
					if e := tc.fails[asks-1]; e != nil {
						return "", e
					}
					<-ctx.Done()
					return "", ctx.Err()
				}
				return "answer", nil
			})
			if asks != tc.asks || !errors.Is(err, tc.want) || (tc.want == nil && got != "answer") {
				t.Fatalf("%d asks, %q, %v; want %d asks, error %v", asks, got, err, tc.asks, tc.want)
			}
		})
	}
}

// A request never answered ends with the caller's context, not before.
func TestAskEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	asks := 0
	_, err := objfetch.Ask(ctx, objfetch.Config{Try: 20 * time.Millisecond}, func(rctx context.Context) (int, error) {
		if asks++; asks == 3 {
			cancel()
		}
		<-rctx.Done()
		return 0, rctx.Err()
	})
	if !errors.Is(err, context.Canceled) || asks != 3 {
		t.Fatalf("%d asks, %v; want 3 and the context's end", asks, err)
	}
}
