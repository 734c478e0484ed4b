package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/buslayout"
)

// The limits Init gives what it creates (docs/wire.md, "Limits"), said in wire/buslayout,
// the one place the bus's layout is written, so that the tests' embedded bus is made the same way.
const (
	KVMaxConsumers    = buslayout.KVMaxConsumers
	MaxTargetBytes    = buslayout.MaxTargetBytes
	MaxManifestBytes  = buslayout.MaxManifestBytes
	MaxRolloutBytes   = buslayout.MaxRolloutBytes
	RolloutChunkBytes = buslayout.RolloutChunkBytes
	MaxRolloutChunks  = buslayout.MaxRolloutChunks
	HeartbeatMaxAge   = buslayout.HeartbeatMaxAge
	HeartbeatMaxBytes = buslayout.HeartbeatMaxBytes
)

// Init creates the mesh's buckets and heartbeat stream under names if they are missing, each
// with explicit limits, as `mesh-release init` does (buslayout.Create). Safe to repeat.
func Init(ctx context.Context, js jetstream.JetStream, n wire.Names) error {
	return buslayout.Create(ctx, js, n)
}

// InitReplicated is Init with every bucket, object store and stream kept on replicas servers of
// a cluster (buslayout.CreateReplicated).
func InitReplicated(ctx context.Context, js jetstream.JetStream, n wire.Names, replicas int) error {
	return buslayout.CreateReplicated(ctx, js, n, replicas)
}

// Replicas is how many servers keep the mesh's streams, as init made them (1 before init): what
// is created later is kept on as many.
func Replicas(ctx context.Context, js jetstream.JetStream, n wire.Names) (int, error) {
	return buslayout.Replicas(ctx, js, n)
}

// BlobsConfig is the object store of blobs, as Init and `mesh-release blob put` create it.
func BlobsConfig(n wire.Names) jetstream.ObjectStoreConfig { return buslayout.BlobsConfig(n) }
