package publish

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/meshtest"
)

// buildDir writes what `mesh-release build` writes for payload as the binary.
func buildDir(t *testing.T, priv ed25519.PrivateKey, version string, payload []byte) (string, wire.Manifest) {
	t.Helper()
	dir := t.TempDir()
	var a bytes.Buffer
	if err := archive.Pack(&a, bytes.NewReader(payload), int64(len(payload))); err != nil {
		t.Fatal(err)
	}
	m := wire.Manifest{
		Schema: 1, Version: version, OS: "linux", Arch: "amd64",
		Object: wire.ObjectName(version, "linux", "amd64"), Size: int64(a.Len()),
		Digest: digest.FromBytes(a.Bytes()), BinaryDigest: digest.FromBytes(payload),
		Created: time.Now().UTC().Format(time.RFC3339),
	}
	if priv != nil {
		if err := m.Sign(priv); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, m.Object), a.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, ManifestFile), m.Marshal(), 0o644)
	return dir, m
}

var names = wire.NamesFor("")

func storedObject(t *testing.T, js jetstream.JetStream, name string) []byte {
	t.Helper()
	obs, _ := js.ObjectStore(context.Background(), names.Archives())
	b, err := obs.GetBytes(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPublishPutsTheArchiveAndAnnouncesTheManifest(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	dir, m := buildDir(t, priv, "v1.0.0", []byte("binary one"))
	r, err := Publish(ctx, js, names, dir)
	if err != nil || r.AlreadyPublished {
		t.Fatalf("publish: %+v, %v", r, err)
	}
	a, _ := os.ReadFile(filepath.Join(dir, m.Object))
	if !bytes.Equal(storedObject(t, js, m.Object), a) {
		t.Fatal("stored object differs from the archive")
	}
	kv, _ := js.KeyValue(ctx, names.Releases())
	e, err := kv.Get(ctx, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.ParseManifest(e.Value())
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("announced %+v, %v", got, err)
	}
	if err := got.Verify(wire.LegacyTrust([]ed25519.PublicKey{priv.Public().(ed25519.PublicKey)}, nil)); err != nil {
		t.Fatal(err)
	}
}

func TestPublishSameVersionSameArchiveIsANoOp(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	dir, _ := buildDir(t, priv, "v1.0.0", []byte("binary one"))
	if _, err := Publish(ctx, js, names, dir); err != nil {
		t.Fatal(err)
	}
	kv, _ := js.KeyValue(ctx, names.Releases())
	before, _ := kv.Get(ctx, "v1.0.0")
	// A rebuild of the same binary: same archive, new created time and signature.
	dir2, _ := buildDir(t, priv, "v1.0.0", []byte("binary one"))
	r, err := Publish(ctx, js, names, dir2)
	if err != nil || !r.AlreadyPublished {
		t.Fatalf("republish: %+v, %v", r, err)
	}
	after, _ := kv.Get(ctx, "v1.0.0")
	if after.Revision() != before.Revision() {
		t.Fatal("the announcement was rewritten")
	}
}

func TestPublishRefusesSameVersionWithOtherBytes(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	dir, m := buildDir(t, priv, "v1.0.0", []byte("binary one"))
	if _, err := Publish(ctx, js, names, dir); err != nil {
		t.Fatal(err)
	}
	first := storedObject(t, js, m.Object)
	dir2, _ := buildDir(t, priv, "v1.0.0", []byte("binary two, other bytes"))
	_, err := Publish(ctx, js, names, dir2)
	if !errors.Is(err, ErrAlreadyPublished) || !strings.Contains(err.Error(), "build a new version") {
		t.Fatalf("got %v, want ErrAlreadyPublished telling to build a new version", err)
	}
	if !bytes.Equal(storedObject(t, js, m.Object), first) {
		t.Fatal("the published archive was replaced")
	}
	kv, _ := js.KeyValue(ctx, names.Releases())
	e, _ := kv.Get(ctx, "v1.0.0")
	if got, _ := wire.ParseManifest(e.Value()); got.Digest != m.Digest {
		t.Fatal("the announcement was replaced")
	}
}

func TestPublishRefusesAnArchiveThatDoesNotMatchItsManifest(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	dir, m := buildDir(t, meshtest.ReleaseKey.Private, "v1.0.0", []byte("binary one"))
	p := filepath.Join(dir, m.Object)
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 0xff // same size, other bytes
	os.WriteFile(p, b, 0o644)
	if _, err := Publish(ctx, js, names, dir); err == nil || !strings.Contains(err.Error(), "changed after the build") {
		t.Fatalf("got %v", err)
	}
	obs, _ := js.ObjectStore(ctx, names.Archives())
	if _, err := obs.GetInfo(ctx, m.Object); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("the mismatching object was left in the store: %v", err)
	}
	kv, _ := js.KeyValue(ctx, names.Releases())
	if _, err := kv.Get(ctx, "v1.0.0"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the version was announced: %v", err)
	}
}

func TestPublishRefusesAnUnsignedManifest(t *testing.T) {
	js := meshtest.StartBus(t).Conn.JS
	dir, _ := buildDir(t, nil, "v1.0.0", []byte("binary one"))
	if _, err := Publish(context.Background(), js, names, dir); !errors.Is(err, wire.ErrUnsigned) {
		t.Fatalf("got %v, want wire.ErrUnsigned", err)
	}
}

func TestPublishWithoutBucketsSaysToRunInit(t *testing.T) {
	js := meshtest.StartBus(t, meshtest.NoBuckets()).Conn.JS
	dir, _ := buildDir(t, meshtest.ReleaseKey.Private, "v1.0.0", []byte("binary one"))
	if _, err := Publish(context.Background(), js, names, dir); err == nil || !strings.Contains(err.Error(), "mesh-release init") {
		t.Fatalf("got %v", err)
	}
}

var signer = targets.Signer{Key: meshtest.ReleaseKey.Private, TTL: targets.DefaultTTL}

func TestTargetSetsNodeKeysAndTheFleetKey(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	dir, _ := buildDir(t, meshtest.ReleaseKey.Private, "v1.0.0", []byte("binary one"))
	if _, err := Publish(ctx, js, names, dir); err != nil {
		t.Fatal(err)
	}
	set, err := Target(ctx, js, names, "v1.0.0", []string{"node-a", "node_b"}, false, signer)
	if err != nil || len(set) != 2 || set[0].Key != "node.node-a" || set[1].Revision <= set[0].Revision {
		t.Fatalf("%+v, %v; want node.node-a and node.node_b with rising revisions", set, err)
	}
	if _, err := Target(ctx, js, names, "v1.0.0", nil, true, signer); err != nil {
		t.Fatal(err)
	}
	kv, _ := js.KeyValue(ctx, names.Targets())
	for _, k := range []string{"node.node-a", "node.node_b", wire.FleetTargetKey} {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if tg, err := wire.ParseTarget(e.Value()); err != nil || tg.Version != "v1.0.0" {
			t.Fatalf("%s: %+v, %v", k, tg, err)
		} else if err := tg.Verify(k, wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public}), time.Now()); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

func TestTargetRefuses(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	dir, _ := buildDir(t, meshtest.ReleaseKey.Private, "v1.0.0", []byte("binary one"))
	if _, err := Publish(ctx, js, names, dir); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		version string
		nodes   []string
		fleet   bool
		want    string
	}{
		{"TestTargetRefusesAnUnpublishedVersion", "v2.0.0", []string{"a"}, false, "not published"},
		{"TestTargetRefusesANonSemverVersion", "latest", []string{"a"}, false, "semantic version"},
		{"TestTargetRefusesANodeIdWithADot", "v1.0.0", []string{"web1.example.com"}, false, "node id"},
		{"TestTargetRefusesNodesAndFleetTogether", "v1.0.0", []string{"a"}, true, "not both"},
		{"TestTargetRefusesNoNodesAndNoFleet", "v1.0.0", nil, false, "--fleet"},
		{"TestTargetRefusesAWithdrawnVersion", "v1.0.0", []string{"a"}, false, `v1.0.0 is withdrawn (at `},
		{"TestTargetRefusesWithoutAKey", "v1.0.0", []string{"a"}, false, "no target key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := signer
			switch c.name {
			case "TestTargetRefusesAWithdrawnVersion":
				if _, err := targets.Withdraw(ctx, js, names, "v1.0.0", "broken", meshtest.ReleaseKey.Private, nil); err != nil {
					t.Fatal(err)
				}
			case "TestTargetRefusesWithoutAKey":
				s.Key = nil
			}
			if _, err := Target(ctx, js, names, c.version, c.nodes, c.fleet, s); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	kv, _ := js.KeyValue(ctx, names.Targets())
	if _, err := kv.Get(ctx, "node.a"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a refused target was set: %v", err)
	}
}
