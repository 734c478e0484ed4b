package bus

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// A bus made by an init from before withdrawals gains the withdrawals bucket when init runs
// again, with a consumer limit that lets every host watch its list, and it file-stored.
func TestInitAddsTheWithdrawalsBucketToAnOlderBus(t *testing.T) {
	ctx, c := connectedForTest(t)
	names := wire.NamesFor("mesh")
	for _, b := range []string{names.Declarations(), names.Targets(), names.Releases(), names.Rollouts()} {
		if _, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.JS.KeyValue(ctx, names.Withdrawals()); err == nil {
		t.Fatal("the withdrawals bucket exists before init")
	}
	if err := Init(ctx, c.JS, names); err != nil {
		t.Fatal(err)
	}
	st, err := c.JS.Stream(ctx, "KV_"+names.Withdrawals())
	if err != nil {
		t.Fatalf("after init: %v", err)
	}
	cfg := st.CachedInfo().Config
	if cfg.MaxConsumers != KVMaxConsumers || cfg.Storage != jetstream.FileStorage || cfg.MaxMsgSize != wire.MaxWithdrawalsBytes || cfg.MaxMsgsPerSubject != 10 {
		t.Errorf("withdrawals bucket: max consumers %d, storage %v, max value %d, history %d; want %d, file, %d, 10",
			cfg.MaxConsumers, cfg.Storage, cfg.MaxMsgSize, cfg.MaxMsgsPerSubject, KVMaxConsumers, wire.MaxWithdrawalsBytes)
	}
}
