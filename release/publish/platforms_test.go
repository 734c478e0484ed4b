package publish

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/delta"
	"github.com/novox/mesh-host/wire/meshtest"
)

// plat is one platform's binaries in a build directory buildDir4 writes: the host and, when
// launcher is set, the launcher of launcherVersion.
type plat struct {
	platform        string
	host            []byte
	launcherVersion string
	launcher        []byte
}

// buildDir4 writes what `mesh-release build` writes for these platforms: manifest schema 4, each
// host packed alone, each launcher compressed into its own object.
func buildDir4(t *testing.T, priv ed25519.PrivateKey, version string, plats ...plat) (string, wire.Manifest) {
	t.Helper()
	dir := t.TempDir()
	m := wire.Manifest{Schema: wire.ManifestSchemaPlatforms, Version: version, Created: time.Now().UTC().Format(time.RFC3339)}
	for _, pl := range plats {
		p, err := wire.ParsePlatform(pl.platform)
		if err != nil {
			t.Fatal(err)
		}
		var a bytes.Buffer
		if err := archive.Pack(&a, bytes.NewReader(pl.host), int64(len(pl.host))); err != nil {
			t.Fatal(err)
		}
		pb := wire.PlatformBuild{Platform: p.String(), Object: wire.PlatformObjectName(version, p), Size: int64(a.Len()),
			Digest: digest.FromBytes(a.Bytes()), BinaryDigest: digest.FromBytes(pl.host)}
		os.WriteFile(filepath.Join(dir, pb.Object), a.Bytes(), 0o644)
		if pl.launcher != nil {
			var l bytes.Buffer
			if err := archive.CompressLauncher(&l, bytes.NewReader(pl.launcher), int64(len(pl.launcher))); err != nil {
				t.Fatal(err)
			}
			pb.Launcher = wire.LauncherObject{Version: pl.launcherVersion, Object: wire.LauncherObjectName(pl.launcherVersion, p), Size: int64(l.Len()),
				Digest: digest.FromBytes(l.Bytes()), BinaryDigest: digest.FromBytes(pl.launcher), BinarySize: int64(len(pl.launcher))}
			os.WriteFile(filepath.Join(dir, pb.Launcher.Object), l.Bytes(), 0o644)
		}
		m.Platforms = append(m.Platforms, pb)
	}
	slices.SortFunc(m.Platforms, func(a, b wire.PlatformBuild) int { return strings.Compare(a.Platform, b.Platform) })
	if err := m.Sign(priv); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ManifestFile), m.Marshal(), 0o644)
	return dir, m
}

func announced(t *testing.T, js jetstream.JetStream, version string) wire.Manifest {
	t.Helper()
	kv, _ := js.KeyValue(context.Background(), names.Releases())
	e, err := kv.Get(context.Background(), version)
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.ParseManifest(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Verify(wire.LegacyTrust([]ed25519.PublicKey{meshtest.ReleaseKey.Public}, nil)); err != nil {
		t.Fatal(err)
	}
	return m
}

var (
	amd64 = wire.Platform{OS: "linux", Arch: "amd64"}
	arm64 = wire.Platform{OS: "linux", Arch: "arm64"}
)

// A release of two platforms: every object of each is in the store, byte for byte, and the
// manifest announced is the build's, signed.
func TestPublishPutsEveryPlatformsObjectsAndTheManifestLast(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	bins := payloads(4)
	dir, m := buildDir4(t, meshtest.ReleaseKey.Private, "v1.0.0",
		plat{"linux/amd64", bins[0], "v0.1.0", bins[1]}, plat{"linux/arm64", bins[2], "v0.1.0", bins[3]})
	r, err := Publish(ctx, js, names, dir)
	if err != nil || r.AlreadyPublished {
		t.Fatalf("publish: %+v, %v", r, err)
	}
	if got := announced(t, js, "v1.0.0"); !bytes.Equal(got.Marshal(), m.Marshal()) {
		t.Fatal("the announced manifest is not the build's")
	}
	if len(r.Objects) != 4 {
		t.Fatalf("objects %+v, want each platform's archive and launcher", r.Objects)
	}
	for _, o := range r.Objects {
		local, _ := os.ReadFile(filepath.Join(dir, o.Name))
		if !o.Put || !bytes.Equal(storedObject(t, js, o.Name), local) {
			t.Errorf("%s (%s %s): put %v, or the store holds other bytes", o.Name, o.Platform, o.Kind, o.Put)
		}
	}
	if total, launcher := r.Sent(arm64); launcher == 0 || total <= launcher {
		t.Errorf("linux/arm64 sent %d bytes, %d of them the launcher's", total, launcher)
	}
	// Again: nothing changes.
	r, err = Publish(ctx, js, names, dir)
	if err != nil || !r.AlreadyPublished {
		t.Fatalf("republish: %+v, %v", r, err)
	}
}

// The point of the launcher as its own object: a release whose launcher did not change sends
// none of its bytes — not the object, not new deltas — and lists the launcher deltas the
// release that put it listed; a new launcher gets deltas from the earlier launchers.
func TestPublishSendsNoLauncherBytesWhenTheLauncherIsUnchanged(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	hosts, launchers := payloads(4), payloads(2)
	o := Options{Key: priv, Deltas: DefaultDeltas}
	steps := []struct {
		version, launcherVersion string
		host, launcher           []byte
		launcherSent             bool
		hostDeltas               []string // base versions
		launcherDeltas           []string
	}{
		{"v1.0.0", "v0.1.0", hosts[0], launchers[0], true, nil, nil},
		{"v1.0.1", "v0.1.0", hosts[1], launchers[0], false, []string{"v1.0.0"}, nil},
		{"v1.1.0", "v0.2.0", hosts[2], launchers[1], true, []string{"v1.0.1", "v1.0.0"}, []string{"v0.1.0"}},
		{"v1.1.1", "v0.2.0", hosts[3], launchers[1], false, []string{"v1.1.0", "v1.0.1", "v1.0.0"}, []string{"v0.1.0"}},
	}
	for _, st := range steps {
		dir, _ := buildDir4(t, priv, st.version, plat{"linux/amd64", st.host, st.launcherVersion, st.launcher})
		r, err := PublishWith(ctx, js, names, dir, o)
		if err != nil {
			t.Fatalf("%s: %v", st.version, err)
		}
		b, _ := announced(t, js, st.version).For(amd64)
		total, launcher := r.Sent(amd64)
		if (launcher > 0) != st.launcherSent || total == 0 {
			t.Errorf("%s: sent %d bytes, %d of them the launcher's; want launcher bytes: %v", st.version, total, launcher, st.launcherSent)
		}
		if got := baseVersions(b.Deltas); !slices.Equal(got, st.hostDeltas) {
			t.Errorf("%s: host deltas from %v, want %v", st.version, got, st.hostDeltas)
		}
		if got := baseVersions(b.Launcher.Deltas); !slices.Equal(got, st.launcherDeltas) {
			t.Errorf("%s: launcher deltas from %v, want %v", st.version, got, st.launcherDeltas)
		}
		for _, d := range b.Launcher.Deltas {
			var out bytes.Buffer
			res, err := delta.Apply(ctx, &out, launchers[0], bytes.NewReader(storedObject(t, js, d.Object)), 1<<20)
			if err != nil || res.Digest != b.Launcher.BinaryDigest {
				t.Errorf("%s: the launcher delta %s rebuilds %s, %v; want %s", st.version, d.Object, res.Digest, err, b.Launcher.BinaryDigest)
			}
		}
	}
}

func baseVersions(ds []wire.ReleaseDelta) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.BaseVersion)
	}
	return out
}

// Host deltas are made per platform, against the earlier releases that have a build for it:
// a platform added in a later release gets none until it has a predecessor.
func TestPublishMakesHostDeltasPerPlatform(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	bins := payloads(3)
	dir, _ := buildDir4(t, priv, "v1.0.0", plat{platform: "linux/amd64", host: bins[0]})
	if _, err := Publish(ctx, js, names, dir); err != nil {
		t.Fatal(err)
	}
	dir, _ = buildDir4(t, priv, "v1.0.1", plat{platform: "linux/amd64", host: bins[1]}, plat{platform: "linux/arm64", host: bins[2]})
	r, err := PublishWith(ctx, js, names, dir, Options{Key: priv, Deltas: DefaultDeltas})
	if err != nil {
		t.Fatal(err)
	}
	m := announced(t, js, "v1.0.1")
	a, _ := m.For(amd64)
	b, _ := m.For(arm64)
	if len(a.Deltas) != 1 || a.Deltas[0].Object != "mesh-host-v1.0.1-linux-amd64.delta-from-v1.0.0.zst" || len(b.Deltas) != 0 || len(r.Added) != 1 {
		t.Fatalf("amd64 deltas %+v, arm64 deltas %+v, added %d", a.Deltas, b.Deltas, len(r.Added))
	}
}

// A launcher version is one binary for good: other bytes under its object's name are refused,
// not put over the ones earlier releases name, and the version is not announced.
func TestPublishRefusesALauncherObjectThatIsInTheStoreWithOtherBytes(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	bins := payloads(3)
	dir, _ := buildDir4(t, priv, "v1.0.0", plat{"linux/amd64", bins[0], "v0.1.0", bins[1]})
	if _, err := Publish(ctx, js, names, dir); err != nil {
		t.Fatal(err)
	}
	name := wire.LauncherObjectName("v0.1.0", amd64)
	before := storedObject(t, js, name)
	dir, _ = buildDir4(t, priv, "v1.0.1", plat{"linux/amd64", bins[0], "v0.1.0", bins[2]})
	_, err := Publish(ctx, js, names, dir)
	if err == nil || !strings.Contains(err.Error(), "a launcher version is one binary for good") {
		t.Fatalf("err = %v", err)
	}
	if !bytes.Equal(storedObject(t, js, name), before) {
		t.Fatal("the launcher object was replaced")
	}
	kv, _ := js.KeyValue(ctx, names.Releases())
	if _, err := kv.Get(ctx, "v1.0.1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("v1.0.1 was announced: %v", err)
	}
}

// The bridge (decision 0042): --manifest-schema 3 announces, under the version, the
// single-platform manifest of one platform's build that hosts reading schema 1 to 3 verify —
// the same archive, its deltas, no launcher — and puts no other platform's objects.
func TestPublishManifestSchema3AnnouncesOnePlatformsBuildForTodaysHosts(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	bins := payloads(4)
	dir, _ := buildDir4(t, priv, "v1.0.0", plat{platform: "linux/amd64", host: bins[0]})
	r, err := PublishWith(ctx, js, names, dir, Options{Key: priv, ManifestSchema: 3})
	if err != nil {
		t.Fatal(err)
	}
	if m := announced(t, js, "v1.0.0"); m.Schema != wire.ManifestSchema || m.Arch != "amd64" || m.Object != "mesh-host-v1.0.0-linux-amd64.tar.zst" || m.HasLauncher() {
		t.Fatalf("announced %+v, want the schema 1 manifest of the amd64 build", m)
	}
	dir, m4 := buildDir4(t, priv, "v1.0.1", plat{"linux/amd64", bins[1], "v0.1.0", bins[2]}, plat{platform: "linux/arm64", host: bins[3]})
	r, err = PublishWith(ctx, js, names, dir, Options{Key: priv, Deltas: DefaultDeltas, ManifestSchema: 3, Platform: amd64})
	if err != nil {
		t.Fatal(err)
	}
	m := announced(t, js, "v1.0.1")
	if m.Schema != wire.ManifestSchemaWithDeltas || m.Object != m4.Platforms[0].Object || m.Digest != m4.Platforms[0].Digest || m.HasLauncher() ||
		len(m.Deltas) != 1 || m.Deltas[0].BaseVersion != "v1.0.0" {
		t.Fatalf("announced %+v, want the schema 3 manifest of the amd64 build with its delta from v1.0.0", m)
	}
	var got []string
	for _, o := range r.Objects {
		got = append(got, o.Name)
	}
	if want := []string{m.Deltas[0].Object, m.Object}; !slices.Equal(got, want) {
		t.Fatalf("put %v, want only %v", got, want)
	}
	// Publishing the build again either way is no change to the version: the same one again is a
	// no-op, the schema 4 manifest is another announcement, refused.
	if r, err := PublishWith(ctx, js, names, dir, Options{Key: priv, ManifestSchema: 3, Platform: amd64}); err != nil || !r.AlreadyPublished {
		t.Fatalf("again: %+v, %v", r, err)
	}
	if _, err := Publish(ctx, js, names, dir); !errors.Is(err, ErrAlreadyPublished) {
		t.Fatalf("the schema 4 manifest of a version published as schema 3: %v, want ErrAlreadyPublished", err)
	}
}

func TestPublishManifestSchema3Refuses(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	bins := payloads(2)
	two, _ := buildDir4(t, priv, "v1.0.0", plat{platform: "linux/amd64", host: bins[0]}, plat{platform: "linux/arm64", host: bins[1]})
	arm, _ := buildDir4(t, priv, "v1.0.0", plat{platform: "linux/arm/v7", host: bins[0]})
	legacy, _ := buildDir(t, priv, "v1.0.0", bins[0])
	for _, tc := range []struct {
		name string
		dir  string
		o    Options
		want string
	}{
		{"two platforms and none named", two, Options{Key: priv, ManifestSchema: 3}, "v1.0.0 has builds for 2 platforms (linux/amd64, linux/arm64) and a manifest of schema 3 names one: say which with --platform"},
		{"a platform the build lacks", two, Options{Key: priv, ManifestSchema: 3, Platform: wire.Platform{OS: "linux", Arch: "riscv64"}}, "v1.0.0 has no build for linux/riscv64 (it has linux/amd64, linux/arm64)"},
		{"a platform with a variant", arm, Options{Key: priv, ManifestSchema: 3}, "hosts that read schema 1 to 3 know an archive by os and arch alone"},
		{"no key", two, Options{ManifestSchema: 3, Platform: amd64}, "--manifest-schema 3 signs a manifest of its own: pass --key"},
		{"another key", two, Options{Key: meshtest.SecondKey.Private, ManifestSchema: 3, Platform: amd64}, "sign the schema 3 manifest with the key that signed the build"},
		{"a build of schema 1", legacy, Options{Key: priv, ManifestSchema: 3}, "v1.0.0 is schema 1 already"},
		{"schema 2", two, Options{Key: priv, ManifestSchema: 2}, "--manifest-schema 2: publish writes schema 4"},
		{"a platform without schema 3", two, Options{Key: priv, Platform: amd64}, "--platform names the build --manifest-schema 3 publishes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PublishWith(ctx, js, names, tc.dir, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
	kv, _ := js.KeyValue(ctx, names.Releases())
	if _, err := kv.Get(ctx, "v1.0.0"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a refused publish announced v1.0.0: %v", err)
	}
}

// The first schema 4 release's new launcher gets its delta from the launcher a schema 2 release
// carried in its archive, as well as its host delta from that archive's host.
func TestPublishMakesALauncherDeltaFromALauncherThatRodeInAnArchive(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	priv := meshtest.ReleaseKey.Private
	hosts, launchers := payloads(2), payloads(2)
	var a bytes.Buffer
	if err := archive.PackWithLauncher(&a, bytes.NewReader(hosts[0]), int64(len(hosts[0])), bytes.NewReader(launchers[0]), int64(len(launchers[0]))); err != nil {
		t.Fatal(err)
	}
	old := wire.Manifest{Schema: wire.ManifestSchemaWithLauncher, Version: "v1.0.0", OS: "linux", Arch: "amd64",
		Object: wire.ObjectName("v1.0.0", "linux", "amd64"), Size: int64(a.Len()), Digest: digest.FromBytes(a.Bytes()),
		BinaryDigest: digest.FromBytes(hosts[0]), Created: time.Now().UTC().Format(time.RFC3339),
		Launcher: wire.ReleaseLauncher{Version: "v0.1.0", Digest: digest.FromBytes(launchers[0]), Size: int64(len(launchers[0]))}}
	if err := old.Sign(priv); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, old.Object), a.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, ManifestFile), old.Marshal(), 0o644)
	if _, err := Publish(ctx, js, names, dir); err != nil {
		t.Fatal(err)
	}
	dir, _ = buildDir4(t, priv, "v1.1.0", plat{"linux/amd64", hosts[1], "v0.2.0", launchers[1]})
	if _, err := PublishWith(ctx, js, names, dir, Options{Key: priv, Deltas: DefaultDeltas}); err != nil {
		t.Fatal(err)
	}
	b, _ := announced(t, js, "v1.1.0").For(amd64)
	if got := baseVersions(b.Deltas); !slices.Equal(got, []string{"v1.0.0"}) {
		t.Errorf("host deltas from %v, want v1.0.0", got)
	}
	if len(b.Launcher.Deltas) != 1 || b.Launcher.Deltas[0].Object != "mesh-launcher-v0.2.0-linux-amd64.delta-from-v0.1.0.zst" {
		t.Fatalf("launcher deltas %+v, want one from v0.1.0", b.Launcher.Deltas)
	}
	var out bytes.Buffer
	res, err := delta.Apply(ctx, &out, launchers[0], bytes.NewReader(storedObject(t, js, b.Launcher.Deltas[0].Object)), 1<<20)
	if err != nil || res.Digest != b.Launcher.BinaryDigest {
		t.Fatalf("the launcher delta rebuilds %s, %v; want %s", res.Digest, err, b.Launcher.BinaryDigest)
	}
}
