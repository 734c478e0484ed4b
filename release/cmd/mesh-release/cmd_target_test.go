package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// keyFile writes the test release key as `mesh-release keygen` writes release.key and returns
// its path.
func keyFile(t *testing.T) string { return keyFileOf(t, meshtest.ReleaseKey) }

func keyFileOf(t *testing.T, k meshtest.KeyPair) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "target.key")
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(k.Private.Seed())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Writing a target without a key is a usage error that says why a key is needed, before the bus
// is dialled; so is a validity out of bounds. A key file that cannot be read is a failure that
// names it.
func TestTargetWithoutAKeyIsAUsageErrorSayingWhy(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.key")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no --key", []string{"target", "--fleet", "v1.0.0"}, 2,
			"mesh-release target: --key FILE is required: hosts obey only what a key they trust signed (decision 0011)"},
		{"no --key for a node", []string{"target", "web-01", "v1.0.0", "--force"}, 2, "mesh-release target: --key FILE is required"},
		{"a validity under a minute", []string{"target", "--fleet", "v1.0.0", "--key", keyFile(t), "--target-ttl", "30s"}, 2,
			"mesh-release target: --target-ttl 30s: want between 1m0s and 87600h (10 years)"},
		{"a key file that is not there", []string{"target", "--fleet", "v1.0.0", "--key", missing}, 1,
			"mesh-release target: --key: release key: open " + missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No bus runs at this URL: a usage error must come first.
			code, out, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, tc.args...)
			if code != tc.code || out != "" || !strings.HasPrefix(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}

// What `target` puts on the bus is a target signed for the very key it is stored under by the
// key given (the release key, or a separate target key), valid for --target-ttl; and its seq
// moves forward even when the key was deleted in between (a host refuses a lower one).
func TestTargetSignsWhatItSetsForItsKeyAndNumbersItForward(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	n := wire.NamesFor("")
	announce(t, c, "v1.0.0")
	announce(t, c, "v1.1.0")
	heartbeat(t, c, "web-01")
	kv, err := c.JS.KeyValue(ctx, n.Targets())
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) wire.Target {
		t.Helper()
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		tg, err := wire.ParseTarget(e.Value())
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return tg
	}
	env := map[string]string{envNATSURL: url}
	var last uint64
	for _, tc := range []struct {
		name   string
		key    meshtest.KeyPair
		args   []string
		at     string
		ttl    time.Duration
		delete bool // the key is deleted first
	}{
		{"the release key, the default validity", meshtest.ReleaseKey, []string{"web-01", "v1.0.0"}, wire.NodeTargetKey("web-01"), 7 * 24 * time.Hour, false},
		{"a separate target key, two hours", meshtest.SecondKey, []string{"web-01", "v1.1.0", "--target-ttl", "2h"}, wire.NodeTargetKey("web-01"), 2 * time.Hour, false},
		{"after the key was deleted", meshtest.ReleaseKey, []string{"web-01", "v1.0.0"}, wire.NodeTargetKey("web-01"), 7 * 24 * time.Hour, true},
		{"the fleet key", meshtest.ReleaseKey, []string{"--fleet", "v1.1.0"}, wire.FleetTargetKey, 7 * 24 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.delete {
				if err := kv.Delete(ctx, tc.at); err != nil {
					t.Fatal(err)
				}
			}
			if code, out, errOut := runMain(t, env, append([]string{"target", "--key", keyFileOf(t, tc.key)}, tc.args...)...); code != 0 {
				t.Fatalf("exit %d, %q, %q", code, out, errOut)
			}
			got := get(tc.at)
			if err := got.Verify(tc.at, wire.LegacyTrust(nil, []ed25519.PublicKey{tc.key.Public}), time.Now()); err != nil {
				t.Errorf("the target on the bus: %v", err)
			}
			if got.KeyID != wire.KeyID(tc.key.Public) {
				t.Errorf("key_id %s; want %s", got.KeyID, wire.KeyID(tc.key.Public))
			}
			if left := time.Until(got.ExpiresAt()); left > tc.ttl || left < tc.ttl-time.Minute {
				t.Errorf("valid for %s more; want about %s", left, tc.ttl)
			}
			if tc.at != wire.FleetTargetKey {
				if got.Seq <= last {
					t.Errorf("seq %d after %d", got.Seq, last)
				}
				last = got.Seq
			}
		})
	}
}
