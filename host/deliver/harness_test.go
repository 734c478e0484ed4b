package deliver

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/meshtest"
)

// rollback.Records is the Records the host passes; this keeps the two in step.
var _ Records = (*rollback.Records)(nil)

// fixtureBuilds holds testdata/fakehost built per (version, mode, arch), once per test binary.
var fixtureBuilds = struct {
	sync.Mutex
	dir string
	m   map[string][]byte
}{m: map[string][]byte{}}

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	code := m.Run()
	if fixtureBuilds.dir != "" {
		os.RemoveAll(fixtureBuilds.dir)
	}
	os.Exit(code)
}

// fakehost returns the bytes of testdata/fakehost stamped with version and mode, built for goarch.
func fakehost(t testing.TB, version, mode, goarch string) []byte {
	t.Helper()
	fixtureBuilds.Lock()
	defer fixtureBuilds.Unlock()
	key := version + "-" + mode + "-" + goarch
	if b, ok := fixtureBuilds.m[key]; ok {
		return b
	}
	if fixtureBuilds.dir == "" {
		d, err := os.MkdirTemp("", "deliver-fixtures-*")
		if err != nil {
			t.Fatal(err)
		}
		fixtureBuilds.dir = d
	}
	out := filepath.Join(fixtureBuilds.dir, key)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version+" -X main.mode="+mode, "-o", out, "./testdata/fakehost")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fakehost: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	fixtureBuilds.m[key] = b
	return b
}

// harness is one node's root and a release side on a real embedded bus.
type harness struct {
	t       testing.TB
	bus     *meshtest.Bus
	js      jetstream.JetStream
	url     string
	root    string
	priv    ed25519.PrivateKey
	records *rollback.Records
	cfg     Config // what d was made with
	d       *Deliverer
}

func newHarness(t testing.TB, edit func(*Config)) *harness {
	t.Helper()
	b := meshtest.StartBus(t)
	url, js, priv := b.URL(), b.Conn.JS, meshtest.ReleaseKey.Private
	root := t.TempDir()
	rec, _, err := rollback.OpenForLauncher(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	h := &harness{t: t, bus: b, js: js, url: url, root: root, priv: priv, records: rec}
	cfg := Config{Root: root, JS: js, TrustedKeys: []ed25519.PublicKey{priv.Public().(ed25519.PublicKey)}, Records: rec,
		PreflightTimeout: 5 * time.Second, Backoff: Backoff{Initial: time.Hour}}
	if edit != nil {
		edit(&cfg)
	}
	h.cfg = cfg
	h.d, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// deliverVia replaces h.d by a Deliverer whose link to the bus is a connection to url (a relay
// in front of the bus) that reconnects as a host's link does.
func (h *harness) deliverVia(url string) {
	h.t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := h.cfg
	cfg.JS = js
	if h.d, err = New(cfg); err != nil {
		h.t.Fatal(err)
	}
}

func pack(t testing.TB, bin []byte) []byte {
	t.Helper()
	var a bytes.Buffer
	if err := archive.Pack(&a, bytes.NewReader(bin), int64(len(bin))); err != nil {
		t.Fatal(err)
	}
	return a.Bytes()
}

// manifestFor describes object (an archive holding bin) for this machine, unsigned.
func manifestFor(version string, object, bin []byte) wire.Manifest {
	return wire.Manifest{
		Schema: 1, Version: version, OS: runtime.GOOS, Arch: runtime.GOARCH,
		Object: wire.ObjectName(version, runtime.GOOS, runtime.GOARCH), Size: int64(len(object)),
		Digest: digest.FromBytes(object), BinaryDigest: digest.FromBytes(bin),
		Created: time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC).Format(time.RFC3339),
	}
}

func (h *harness) sign(m *wire.Manifest) {
	h.t.Helper()
	if err := m.Sign(h.priv); err != nil {
		h.t.Fatal(err)
	}
}

// put stores object (if not nil) under m.Object and the manifest under key.
func (h *harness) put(key string, m wire.Manifest, object []byte) {
	h.t.Helper()
	ctx := context.Background()
	n := wire.NamesFor("")
	if object != nil {
		obs, _ := h.js.ObjectStore(ctx, n.Archives())
		if _, err := obs.PutBytes(ctx, m.Object, object); err != nil {
			h.t.Fatal(err)
		}
	}
	kv, _ := h.js.KeyValue(ctx, n.Releases())
	if _, err := kv.Put(ctx, key, m.Marshal()); err != nil {
		h.t.Fatal(err)
	}
}

// release publishes bin as a correctly signed version.
func (h *harness) release(version string, bin []byte) wire.Manifest {
	h.t.Helper()
	a := pack(h.t, bin)
	m := manifestFor(version, a, bin)
	h.sign(&m)
	h.put(version, m, a)
	return m
}

// versionsEntries lists ROOT/versions.
func (h *harness) versionsEntries() []string {
	ents, _ := os.ReadDir(rollback.VersionsDir(h.root))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
