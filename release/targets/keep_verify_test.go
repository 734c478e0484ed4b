package targets

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Found profiling a rollout of 100,000 simulated nodes (issue 20): each pass of the keeper —
// one a minute — checked the signature of every target in the bucket again, a third of the
// controller's CPU. A key's target is now checked once per revision; what is due is unchanged.
func TestKeepChecksEachTargetsSignatureOncePerRevision(t *testing.T) {
	s, err := NewSigner(meshtest.ReleaseKey.Private, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	checks := 0
	k := &keeper{signer: s, log: slog.New(slog.DiscardHandler), names: wire.NamesFor(""), keys: map[string]Current{},
		retryAt: map[string]time.Time{}, foreign: map[string]uint64{},
		verify: func(key string, tg wire.Target) bool { checks++; return s.Signed(key, tg) }}
	const n = 50
	for i := range n {
		key := wire.NodeTargetKey(fmt.Sprintf("n%02d", i))
		signer := meshtest.ReleaseKey
		if i%10 == 0 {
			signer = meshtest.StrangerKey // another key's target: never due here
		}
		tg, err := wire.NewTarget(key, "v1.2.0", 0, time.Now(), time.Hour, signer.Private)
		if err != nil {
			t.Fatal(err)
		}
		k.keys[key] = Current{Key: key, Rev: uint64(i + 1), Value: tg.Marshal(), Target: tg}
	}
	for pass := 1; pass <= 3; pass++ {
		k.pass(context.Background(), Writer{}) // nothing is due: an hour of an hour's TTL left
		if checks != n {
			t.Fatalf("after pass %d: %d signature checks of %d targets; want %d, each revision once", pass, checks, n, n)
		}
	}
	for key, c := range k.keys {
		if k.due(c) {
			t.Errorf("%s is due with an hour left", key)
		}
	}
	key := wire.NodeTargetKey("n01")
	c := k.keys[key]
	c.Rev = 1000 // written again
	k.keys[key] = c
	k.pass(context.Background(), Writer{})
	if checks != n+1 {
		t.Errorf("%d checks after one key changed; want %d, the changed one checked again", checks, n+1)
	}
}
