package blobs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/host/blobs"
	rblobs "github.com/novox/mesh-host/release/blobs"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A 16 MiB blob fetched from a real embedded bus into an empty cache (hash, fsync, rename), and
// opened again from the cache.
//
//	go test ./host/blobs -run '^$' -bench . -benchtime 5x
func BenchmarkFetch16MiB(b *testing.B) {
	bus := meshtest.StartBus(b)
	body := make([]byte, 16<<20)
	rand.Read(body)
	d := putB(b, bus.Conn.JS, body)
	src := blobs.Bus(bus.Conn.JS, bus.Names.Blobs(), nil)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		c := blobs.New(b.TempDir(), src, blobs.Config{})
		drain(b, c, d)
	}
}

func BenchmarkCachedOpen(b *testing.B) {
	bundle := b.TempDir()
	body := bytes.Repeat([]byte("x"), 1<<20)
	d := digest.FromBytes(body).String()
	p := filepath.Join(bundle, "blobs", "sha256", digest.Digest(d).Encoded())
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(p, body, 0o644); err != nil {
		b.Fatal(err)
	}
	c := blobs.New(b.TempDir(), blobs.Dir(bundle), blobs.Config{})
	drain(b, c, d)
	b.ReportAllocs()
	for b.Loop() {
		r, err := c.Open(context.Background(), d)
		if err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}

func drain(b *testing.B, c *blobs.Cache, d string) {
	r, err := c.Open(context.Background(), d)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		b.Fatal(err)
	}
}

func putB(b *testing.B, js jetstream.JetStream, body []byte) string {
	f := filepath.Join(b.TempDir(), "blob")
	if err := os.WriteFile(f, body, 0o600); err != nil {
		b.Fatal(err)
	}
	p, err := rblobs.PutFile(context.Background(), js, wire.NamesFor(""), f)
	if err != nil {
		b.Fatal(err)
	}
	return p.Digest.String()
}
