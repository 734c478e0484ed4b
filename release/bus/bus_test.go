package bus

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

func serveForTest(t *testing.T, dir, listen string) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Serve(ctx, ServeOptions{DataDir: dir, Listen: listen})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// connectedForTest serves a fresh bus on a free port and connects to it, both until the test
// ends; ctx bounds the test's calls.
func connectedForTest(t *testing.T) (context.Context, *Conn) {
	t.Helper()
	s := serveForTest(t, t.TempDir(), "127.0.0.1:-1")
	t.Cleanup(s.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	c, err := Connect(ctx, s.ClientURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return ctx, c
}

func TestInitIsIdempotentAndHeartbeatsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := serveForTest(t, dir, "127.0.0.1:-1")
	addr := s.Addr().String()
	c, err := Connect(ctx, s.ClientURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	names := wire.NamesFor("mesh")
	for i := 0; i < 2; i++ {
		if err := Init(ctx, c.JS, names); err != nil {
			t.Fatalf("init #%d: %v", i+1, err)
		}
	}
	for _, b := range []string{names.Declarations(), names.Targets(), names.Releases(), names.Rollouts()} {
		if _, err := c.JS.KeyValue(ctx, b); err != nil {
			t.Errorf("KV %s: %v", b, err)
		}
	}
	for _, b := range []string{names.Archives(), names.Blobs()} {
		if _, err := c.JS.ObjectStore(ctx, b); err != nil {
			t.Errorf("object store %s: %v", b, err)
		}
	}
	for i := 0; i < 3; i++ {
		if _, err := c.JS.Publish(ctx, names.Heartbeat("n1"), []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.JS.Publish(ctx, names.Heartbeat("n2"), []byte("z")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	s.Shutdown()

	s = serveForTest(t, dir, addr)
	defer s.Shutdown()
	c, err = Connect(ctx, s.ClientURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.JS.Stream(ctx, names.HeartbeatStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages after restart, want 2 (one per node)", info.State.Msgs)
	}
	m, err := st.GetLastMsgForSubject(ctx, names.Heartbeat("n1"))
	if err != nil || string(m.Data) != "c" {
		t.Fatalf("n1's last word = %q, %v; want \"c\"", m.Data, err)
	}
}

func TestInitRefusesAHeartbeatStreamKeepingMoreThanOne(t *testing.T) {
	ctx, c := connectedForTest(t)
	names := wire.NamesFor("mesh")
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: names.HeartbeatStream(), Subjects: []string{names.HeartbeatWildcard()}, MaxMsgsPerSubject: 5}); err != nil {
		t.Fatal(err)
	}
	if err := Init(ctx, c.JS, names); err == nil {
		t.Fatal("init accepted a heartbeat stream keeping 5 per subject")
	}
}

func TestServeRefusesABadListenAddress(t *testing.T) {
	for _, l := range []string{"4222", "127.0.0.1:http", "127.0.0.1:70000"} {
		if _, err := Serve(context.Background(), ServeOptions{DataDir: t.TempDir(), Listen: l}); err == nil {
			t.Errorf("Serve accepted listen %q", l)
		}
	}
}

func TestConnectErrorsNeverShowThePasswordInTheURL(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"nothing listens", "nats://mesh:S3cretPassw0rd@127.0.0.1:1"},
		{"a malformed URL that net/url quotes", "nats://mesh:S3cretPassw0rd@127.0.0.1:notaport"},
		{"a token", "nats://S3cretPassw0rd@127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := Connect(ctx, tc.url, "")
			if err == nil {
				t.Fatal("connected")
			}
			if strings.Contains(err.Error(), "S3cretPassw0rd") || !strings.Contains(err.Error(), "xxxxx@127.0.0.1") {
				t.Errorf("err = %v, want the URL named with its password redacted", err)
			}
		})
	}
}

func TestInitGivesEveryBucketAndTheStreamExplicitLimits(t *testing.T) {
	ctx, c := connectedForTest(t)
	names := wire.NamesFor("mesh")
	if err := Init(ctx, c.JS, names); err != nil {
		t.Fatal(err)
	}
	config := func(stream string) jetstream.StreamConfig {
		t.Helper()
		st, err := c.JS.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config
	}
	for _, tc := range []struct {
		bucket   string
		maxValue int32
		history  int64
	}{
		{names.Declarations(), 1 << 20, 10},
		{names.Targets(), 1 << 10, 10},
		{names.Releases(), 64 << 10, 1},
		{names.Rollouts(), 1 << 20, 5},
		{names.Withdrawals(), wire.MaxWithdrawalsBytes, 10},
	} {
		cfg := config("KV_" + tc.bucket)
		if cfg.MaxMsgSize != tc.maxValue || cfg.MaxMsgsPerSubject != tc.history || cfg.MaxBytes != -1 {
			t.Errorf("%s: max value %d, history %d, max bytes %d; want %d, %d, -1", tc.bucket, cfg.MaxMsgSize, cfg.MaxMsgsPerSubject, cfg.MaxBytes, tc.maxValue, tc.history)
		}
	}
	// Archives and blobs stay until an operator removes them, on file storage.
	for _, b := range []string{names.Archives(), names.Blobs()} {
		if cfg := config("OBJ_" + b); cfg.MaxBytes != -1 || cfg.Storage != jetstream.FileStorage {
			t.Errorf("object store %s: max bytes %d, storage %v; want -1 on file", b, cfg.MaxBytes, cfg.Storage)
		}
	}
	hb := config(names.HeartbeatStream())
	if hb.MaxMsgsPerSubject != 1 || hb.MaxMsgSize != wire.MaxHeartbeatBytes || hb.MaxAge != 30*24*time.Hour || hb.MaxBytes != 1<<30 || hb.Discard != jetstream.DiscardOld {
		t.Errorf("heartbeat stream: %+v", hb)
	}
	// The declarations bucket refuses a value over the default declaration limit itself.
	kv, err := c.JS.KeyValue(ctx, names.Declarations())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "n1", make([]byte, wire.DefaultMaxDeclarationBytes)); err != nil {
		t.Errorf("a value of exactly the limit: %v", err)
	}
}

// A bus set up by an older init (no limits) is still accepted, and init stays idempotent on it.
func TestInitAcceptsBucketsAndAStreamMadeWithoutLimits(t *testing.T) {
	ctx, c := connectedForTest(t)
	names := wire.NamesFor("mesh")
	for _, b := range []string{names.Declarations(), names.Targets(), names.Releases(), names.Rollouts()} {
		if _, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: names.Archives()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: names.HeartbeatStream(), Subjects: []string{names.HeartbeatWildcard()}, MaxMsgsPerSubject: 1}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := Init(ctx, c.JS, names); err != nil {
			t.Fatalf("init #%d over a bus made without limits: %v", i+1, err)
		}
	}
	// A bus from before blobs gets their object store.
	if _, err := c.JS.ObjectStore(ctx, names.Blobs()); err != nil {
		t.Errorf("blobs object store: %v", err)
	}
}

// A command that runs until stopped (a rollout's controller) must outlast a NATS server
// restarting: a Lasting connection never stops trying, comes back by itself and logs both
// ends of the outage; a plain one keeps the client's default.
func TestALastingConnectionOutlivesAServerRestartAndOthersKeepTheDefault(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := serveForTest(t, dir, "127.0.0.1:-1")
	addr := s.Addr().String()
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	c, err := Connect(ctx, s.ClientURL(), "", Lasting(log))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	plain, err := Connect(ctx, s.ClientURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	plain.Close()
	if c.NC.Opts.MaxReconnect != -1 || plain.NC.Opts.MaxReconnect == -1 {
		t.Fatalf("MaxReconnect: lasting %d, plain %d; want -1 (for ever) and the client's default", c.NC.Opts.MaxReconnect, plain.NC.Opts.MaxReconnect)
	}
	names := wire.NamesFor("mesh")
	if err := Init(ctx, c.JS, names); err != nil {
		t.Fatal(err)
	}

	s.Shutdown()
	for c.NC.IsConnected() {
		time.Sleep(10 * time.Millisecond)
	}
	s = serveForTest(t, dir, addr)
	defer s.Shutdown()
	for !c.NC.IsConnected() {
		if ctx.Err() != nil {
			t.Fatalf("not reconnected: %v", c.NC.LastError())
		}
		time.Sleep(10 * time.Millisecond)
	}
	kv, err := c.JS.KeyValue(ctx, names.Rollouts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "current", []byte(`{}`)); err != nil {
		t.Fatalf("the bus after the restart: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "lost the bus; reconnecting") || !strings.Contains(logged.String(), "back on the bus") {
		t.Errorf("the outage was not logged:\n%s", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Found by the 1,000-host rollout benchmark: every host watches the targets and declarations
// buckets, and a server's default of 1,000 consumers per stream refused the 1,001st watch, so
// that node never got its target. A bucket init made (on any server) and a stream on the bus
// serve runs (with no limit of its own) both take more.
func TestMoreThanAThousandNodesCanWatchTheBuckets(t *testing.T) {
	const watchers = 1_001
	consumers := func(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) {
		t.Helper()
		for i := range watchers {
			if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{InactiveThreshold: time.Minute, MemoryStorage: true}); err != nil {
				t.Fatalf("consumer %d on %s: %v", i+1, stream, err)
			}
		}
	}
	t.Run("a bucket made by init, on a server with the default limit", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		defer ns.Shutdown()
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("server not ready")
		}
		c, err := Connect(ctx, ns.ClientURL(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		names := wire.NamesFor("mesh")
		if err := Init(ctx, c.JS, names); err != nil {
			t.Fatal(err)
		}
		consumers(t, ctx, c.JS, "KV_"+names.Targets())
	})
	t.Run("any stream on the bus serve runs", func(t *testing.T) {
		_, c := connectedForTest(t)
		// A thousand consumers take seconds on a loaded machine: more than connectedForTest's 10 s.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "PLAIN", Subjects: []string{"plain.>"}, Storage: jetstream.MemoryStorage}); err != nil {
			t.Fatal(err)
		}
		consumers(t, ctx, c.JS, "PLAIN")
	})
}
