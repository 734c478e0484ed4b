// Package buslayout makes the mesh's bus as `mesh-release init` does: its buckets, object stores
// and heartbeat stream.
//
// Each is made under a prefix with explicit limits (docs/wire.md, "Limits"): the layout is part
// of the contract, so it lives under wire/. The release side (release/bus.Init) and the tests'
// embedded bus (wire/meshtest) make the same bus, and test support need not import the release
// side.
package buslayout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// Limits Create gives what it creates (docs/wire.md, "Limits"). KV buckets keep no byte cap: a
// full KV bucket refuses new values (it discards new, not old), which would stop declaring for
// the whole fleet; keys × history × max value size bound them instead.
const (
	// KVMaxConsumers is each KV bucket's consumer limit. Hosts hold none since decision 0022
	// (they follow their keys by subscription and direct get); it stays for buckets and hosts
	// from before, when every host watched the declarations and the targets bucket with one
	// consumer each and a server's default of 1,000 per stream left the 1,001st node out.
	KVMaxConsumers   = 1_000_000
	MaxTargetBytes   = wire.MaxTargetBytes   // a signed target (about 250 bytes with one signature)
	MaxManifestBytes = wire.MaxManifestBytes // a manifest, a root (wire.MaxRootBytes)
	// MaxRolloutBytes is the rollouts bucket's max value size. A rollout is stored as a small
	// head under rollout.<id> (status, batches, halt, lease; no node list) and its node list in
	// chunks under nodes.<id>.<n> (decision 0021), so the number of nodes is not bounded by it.
	MaxRolloutBytes = 1 << 20
	// RolloutChunkBytes bounds each chunk of a rollout's node list: a quarter of a value, so that
	// one chunk with its headers fits a server's default max_payload (1 MiB) with room to spare.
	RolloutChunkBytes = 256 << 10
	// MaxRolloutChunks bounds the chunks a head may name, what a reader fetches for one rollout:
	// 4,096 × 256 KiB is 1 GiB, some 25 million nodes with 20-byte ids.
	MaxRolloutChunks   = 4096
	HeartbeatMaxAge    = 30 * 24 * time.Hour // a node unheard for 30 days leaves the fleet view
	HeartbeatMaxBytes  = 1 << 30             // the longest-silent nodes' words go first
	declarationHistory = 10
	targetHistory      = 10
	releaseHistory     = 1
	rolloutHistory     = 5
	withdrawalsHistory = 10
)

// Create creates the mesh's buckets and heartbeat stream under names if they are missing, each
// with explicit limits: KV declarations (values up to wire.DefaultMaxDeclarationBytes),
// host_targets, host_releases, rollouts, host_withdrawals (one key, the signed list, up to
// wire.MaxWithdrawalsBytes); object stores host_archives and blobs (BlobsConfig); and the heartbeat stream
// keeping one message per node subject on file storage, so every node's last word survives a
// restart. Existing ones are left as the operator configured them, except that a heartbeat stream
// not keeping exactly one message per subject is an error. Safe to repeat. Each is kept on one
// server; CreateReplicated keeps them on several.
func Create(ctx context.Context, js jetstream.JetStream, n wire.Names) error {
	return CreateReplicated(ctx, js, n, 1)
}

// MaxReplicas is the most copies NATS JetStream keeps of a stream.
const MaxReplicas = 5

// CreateReplicated is Create with every bucket, object store and stream kept on replicas
// servers of a cluster (3 on a cluster: any one server may be lost), so that losing a server
// loses nothing and stops nothing. The replicas of one that exists are not changed: an
// operator changes them with `nats stream edit --replicas`.
func CreateReplicated(ctx context.Context, js jetstream.JetStream, n wire.Names, replicas int) error {
	if replicas < 1 || replicas > MaxReplicas {
		return fmt.Errorf("init: %d replicas: a stream is kept on 1 to %d servers", replicas, MaxReplicas)
	}
	kvs := []jetstream.KeyValueConfig{
		{Bucket: n.Declarations(), Description: "mesh: each node's declaration, key = node id",
			History: declarationHistory, MaxValueSize: wire.DefaultMaxDeclarationBytes, MaxBytes: -1, Storage: jetstream.FileStorage},
		{Bucket: n.Targets(), Description: "mesh: host version to run, keys node.<id> and fleet",
			History: targetHistory, MaxValueSize: MaxTargetBytes, MaxBytes: -1, Storage: jetstream.FileStorage},
		{Bucket: n.Releases(), Description: "mesh: signed host release manifests, key = version",
			History: releaseHistory, MaxValueSize: MaxManifestBytes, MaxBytes: -1, Storage: jetstream.FileStorage},
		{Bucket: n.Rollouts(), Description: "mesh: rollout state",
			History: rolloutHistory, MaxValueSize: MaxRolloutBytes, MaxBytes: -1, Storage: jetstream.FileStorage},
		{Bucket: n.Withdrawals(), Description: "mesh: withdrawn host versions, key list (signed)",
			History: withdrawalsHistory, MaxValueSize: wire.MaxWithdrawalsBytes, MaxBytes: -1, Storage: jetstream.FileStorage},
	}
	for _, cfg := range kvs {
		cfg.Replicas = replicas
		if _, err := js.CreateKeyValue(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("init: create KV bucket %s: %w", cfg.Bucket, err)
		}
		if err := allowWatches(ctx, js, cfg.Bucket); err != nil {
			return err
		}
	}
	// Archives are kept until an operator removes them: a node may need an old version again.
	obj := jetstream.ObjectStoreConfig{Bucket: n.Archives(), Description: "mesh: host archives, fetched by digest", MaxBytes: -1, Storage: jetstream.FileStorage}
	for _, cfg := range []jetstream.ObjectStoreConfig{obj, BlobsConfig(n)} {
		cfg.Replicas = replicas
		if _, err := js.CreateObjectStore(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("init: create object store %s: %w", cfg.Bucket, err)
		}
	}
	sc := jetstream.StreamConfig{
		Name:              n.HeartbeatStream(),
		Description:       "mesh: each node's last heartbeat",
		Subjects:          []string{n.HeartbeatWildcard()},
		MaxMsgsPerSubject: 1,
		MaxMsgSize:        wire.MaxHeartbeatBytes,
		MaxAge:            HeartbeatMaxAge,
		MaxBytes:          HeartbeatMaxBytes,
		MaxMsgs:           -1,
		Storage:           jetstream.FileStorage,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       true,
		Replicas:          replicas,
	}
	_, err := js.CreateStream(ctx, sc)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("init: create stream %s: %w", sc.Name, err)
	}
	s, err := js.Stream(ctx, sc.Name)
	if err != nil {
		return fmt.Errorf("init: read stream %s: %w", sc.Name, err)
	}
	have := s.CachedInfo().Config
	if have.MaxMsgsPerSubject != 1 || !slices.Contains(have.Subjects, n.HeartbeatWildcard()) {
		return fmt.Errorf("init: stream %s exists but keeps %d messages per subject on %v; it must keep 1 on %s — fix it with `nats stream edit` or delete it and run init again",
			sc.Name, have.MaxMsgsPerSubject, have.Subjects, n.HeartbeatWildcard())
	}
	return nil
}

// BlobsConfig is the object store of blobs, what declarations name by digest (object name =
// "sha256:<hex>"), as Create and `mesh-release blob put` create it. Like archives, blobs are kept
// until an operator removes them: a node joining later needs what the declarations name.
func BlobsConfig(n wire.Names) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{Bucket: n.Blobs(), Description: "mesh: blobs declarations name by digest, object name = the digest",
		MaxBytes: -1, Storage: jetstream.FileStorage}
}

// Replicas is how many servers keep the mesh's streams, as the bus was made: the replicas of
// the declarations bucket's stream, or 1 when it does not exist yet. What a command creates
// later (the blobs store, the enrolment buckets) is kept on as many, so a cluster's bus has no
// stream that one lost server takes with it.
func Replicas(ctx context.Context, js jetstream.JetStream, n wire.Names) (int, error) {
	st, err := js.Stream(ctx, "KV_"+n.Declarations())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the stream of KV bucket %s (how many servers keep the mesh's streams): %w", n.Declarations(), err)
	}
	if r := st.CachedInfo().Config.Replicas; r > 1 {
		return r, nil
	}
	return 1, nil
}

// allowWatches gives the stream behind KV bucket an explicit consumer limit (KVMaxConsumers)
// unless it has one: a stream without one takes the server's default, 1,000 unless the server
// says otherwise. A limit an operator set is left alone.
func allowWatches(ctx context.Context, js jetstream.JetStream, bucket string) error {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return fmt.Errorf("init: read the stream of KV bucket %s: %w", bucket, err)
	}
	cfg := st.CachedInfo().Config
	if cfg.MaxConsumers > 0 {
		return nil
	}
	cfg.MaxConsumers = KVMaxConsumers
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("init: allow %d watches on KV bucket %s (its stream's max_consumers): %w", KVMaxConsumers, bucket, err)
	}
	return nil
}
