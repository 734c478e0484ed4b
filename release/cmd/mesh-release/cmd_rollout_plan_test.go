package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// planReaderBeat publishes a heartbeat of node on v1.0.0 whose host reads rollout plans.
func planReaderBeat(t *testing.T, c *bus.Conn, node string) {
	t.Helper()
	hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", SentAt: time.Now().UTC(),
		ManifestSchema: wire.ManifestSchemaPlatforms, Plans: wire.PlanSchema,
		Profile: &wire.Profile{OS: "linux", Arch: "amd64", Platform: "linux/amd64"}}
	if _, err := c.JS.Publish(context.Background(), wire.NamesFor("").Heartbeat(node), hb.Marshal()); err != nil {
		t.Fatal(err)
	}
}

// `rollout plan` prints which nodes each batch holds, needs no key, writes nothing, and prints
// the same twice and for the same --salt; another salt orders the fleet otherwise; a bad salt is
// a usage error.
func TestRolloutPlanPrintsTheBatchesAndWritesNothing(t *testing.T) {
	url, c := startServeConnected(t)
	announcePlatforms(t, c, "v1.1.0", "linux/amd64")
	for i := 1; i <= 30; i++ {
		planReaderBeat(t, c, fmt.Sprintf("web-%02d", i))
	}
	heartbeatOn(t, c, "old-1", "linux/amd64", wire.ManifestSchemaPlatforms) // a host from before plans
	env := map[string]string{envNATSURL: url}
	args := []string{"rollout", "plan", "v1.1.0", "--canary", "2", "--steps", "10,50,100"}
	code, out, errOut := runMain(t, env, args...)
	if code != 0 || errOut != "" {
		t.Fatalf("rollout plan: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"plan of v1.1.0: 31 nodes in ", "salt " + wire.PlanSalt("v1.1.0"), "waves 10%, 50%, 100%",
		"  1/", "canary  plan in 1  2 nodes",
		"per-node targets: 1 node not taking the plan (a host from before plans, or a target of its own): old-1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rollout plan does not say %q:\n%s", want, out)
		}
	}
	if _, again, _ := runMain(t, env, args...); again != out {
		t.Errorf("rollout plan printed otherwise the second time:\n%s\nthen\n%s", out, again)
	}
	salted := append(args, "--salt", strings.Repeat("ab", 16))
	if _, other, _ := runMain(t, env, salted...); other == out || !strings.Contains(other, "salt "+strings.Repeat("ab", 16)) {
		t.Errorf("--salt did not change the order:\n%s", other)
	}
	if code, _, errOut := runMain(t, env, append(args, "--salt", "xyz")...); code != 2 || !strings.Contains(errOut, "--salt") {
		t.Errorf("a bad salt: exit %d, stderr %q; want a usage error naming --salt", code, errOut)
	}
	kv, err := c.JS.KeyValue(context.Background(), wire.NamesFor("").Rollouts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(context.Background(), wire.PlanKey); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("rollout plan wrote the plan key: %v", err)
	}
	if _, err := kv.Get(context.Background(), "current"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("rollout plan started a rollout: %v", err)
	}
}
