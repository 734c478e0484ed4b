package publish

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/delta"
	"github.com/novox/mesh-host/wire/meshtest"
)

// payloads are successive "binaries": random bytes, each a small edit of the one before.
func payloads(n int) [][]byte {
	r := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 256<<10)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	out := [][]byte{b}
	for len(out) < n {
		next := bytes.Clone(out[len(out)-1])
		for range 20 {
			next[r.IntN(len(next))] ^= 0xff
		}
		out = append(out, next)
	}
	return out
}

func TestPublishAddsDeltasAgainstTheThreeNewestPublishedVersions(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	bins := payloads(6)
	versions := []string{"v1.0.0", "v1.0.1", "v1.1.0", "v1.2.0", "v1.10.0", "v1.3.0"}
	for i, v := range versions[:5] {
		dir, _ := buildDir(t, priv, v, bins[i])
		if _, err := PublishWith(ctx, js, names, dir, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	// v1.3.0 gets deltas from v1.2.0, v1.1.0 and v1.0.1: older than itself (v1.10.0 is newer),
	// newest first.
	dir, m := buildDir(t, priv, "v1.3.0", bins[5])
	r, err := PublishWith(ctx, js, names, dir, Options{Key: priv, Deltas: DefaultDeltas})
	if err != nil {
		t.Fatal(err)
	}
	var bases []string
	for _, d := range r.Manifest.Deltas {
		bases = append(bases, d.BaseVersion)
	}
	if got := strings.Join(bases, " "); got != "v1.2.0 v1.1.0 v1.0.1" || len(r.Added) != 3 || r.Manifest.Schema != wire.ManifestSchemaWithDeltas {
		t.Fatalf("deltas from %q (added %d), schema %d", got, len(r.Added), r.Manifest.Schema)
	}
	kv, _ := js.KeyValue(ctx, names.Releases())
	e, err := kv.Get(ctx, "v1.3.0")
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.ParseManifest(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil)); err != nil {
		t.Fatal(err)
	}
	if written, _ := os.ReadFile(filepath.Join(dir, ManifestFile)); !bytes.Equal(written, e.Value()) {
		t.Fatal("the build directory's manifest.json is not the one announced")
	}
	for i, d := range got.Deltas {
		stored := storedObject(t, js, d.Object)
		local, _ := os.ReadFile(filepath.Join(dir, d.Object))
		if !bytes.Equal(stored, local) || int64(len(stored)) != d.Size {
			t.Fatalf("delta %s: stored %d bytes, local %d, manifest %d", d.Object, len(stored), len(local), d.Size)
		}
		var out bytes.Buffer
		res, err := delta.Apply(ctx, &out, bins[3-i], bytes.NewReader(stored), 1<<20)
		if err != nil || res.Digest != m.BinaryDigest {
			t.Fatalf("delta from %s rebuilds %s, %v; want %s", d.BaseVersion, res.Digest, err, m.BinaryDigest)
		}
	}
}

func TestPublishWithoutAKeyAddsNoDeltasAndSaysWhy(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	bins := payloads(2)
	dir, _ := buildDir(t, priv, "v1.0.0", bins[0])
	if _, err := PublishWith(ctx, js, names, dir, Options{Deltas: DefaultDeltas}); err != nil {
		t.Fatal(err)
	}
	dir, m := buildDir(t, priv, "v1.0.1", bins[1])
	r, err := PublishWith(ctx, js, names, dir, Options{Deltas: DefaultDeltas})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Manifest.Deltas) != 0 || r.Manifest.Schema != m.Schema || !strings.Contains(r.NoDeltas, "no release key") {
		t.Fatalf("deltas %v, schema %d, note %q", r.Manifest.Deltas, r.Manifest.Schema, r.NoDeltas)
	}
}

func TestPublishRefusesToSignDeltasWithAnotherKey(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	bins := payloads(2)
	dir, _ := buildDir(t, priv, "v1.0.0", bins[0])
	if _, err := Publish(ctx, js, names, dir); err != nil {
		t.Fatal(err)
	}
	dir, _ = buildDir(t, priv, "v1.0.1", bins[1])
	_, err := PublishWith(ctx, js, names, dir, Options{Key: meshtest.SecondKey.Private, Deltas: DefaultDeltas})
	if err == nil || !strings.Contains(err.Error(), "sign deltas with the key that signed the build") {
		t.Fatalf("err = %v", err)
	}
	kv, _ := js.KeyValue(ctx, names.Releases())
	if _, err := kv.Get(ctx, "v1.0.1"); err == nil {
		t.Fatal("announced after refusing")
	}
}
