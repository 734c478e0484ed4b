package meshtest

import (
	"encoding/base64"
	"slices"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// RootKeys are the test root keys: a root of tests has three, of which two must sign.
var RootKeys = []KeyPair{fixedKey("root 1"), fixedKey("root 2"), fixedKey("root 3")}

// TargetKey signs targets, windows and the withdrawal list in tests that give it its own role.
var TargetKey = fixedKey("targets")

// NewRoot is root version v expiring at expires: RootKeys with threshold 2, rel the one releases
// key and tgt the one targets key (threshold 1 each), unsigned. Sign it with SignRoot.
func NewRoot(tb testing.TB, v uint64, expires time.Time, rel, tgt KeyPair) wire.Root {
	tb.Helper()
	r := wire.Root{Schema: wire.RootSchema, Version: v, Expires: expires.UTC().Format(time.RFC3339),
		Keys: map[string]string{}, Roles: map[wire.Role]wire.RoleKeys{}}
	ids := func(ks ...KeyPair) []string {
		var out []string
		for _, k := range ks {
			id := wire.KeyID(k.Public)
			r.Keys[id] = base64.StdEncoding.EncodeToString(k.Public)
			out = append(out, id)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	r.Roles[wire.RoleRoot] = wire.RoleKeys{Keys: ids(RootKeys...), Threshold: 2}
	r.Roles[wire.RoleReleases] = wire.RoleKeys{Keys: ids(rel), Threshold: 1}
	r.Roles[wire.RoleTargets] = wire.RoleKeys{Keys: ids(tgt), Threshold: 1}
	if err := r.Validate(); err != nil {
		tb.Fatal(err)
	}
	return r
}

// SignRoot returns r with a signature by each key added.
func SignRoot(tb testing.TB, r wire.Root, keys ...KeyPair) wire.Root {
	tb.Helper()
	r.Signatures = slices.Clone(r.Signatures)
	for _, k := range keys {
		if err := r.Sign(k.Private); err != nil {
			tb.Fatal(err)
		}
	}
	return r
}
