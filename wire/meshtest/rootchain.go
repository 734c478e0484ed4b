package meshtest

import (
	"encoding/base64"
	"testing"

	"github.com/novox/mesh-host/wire"
)

// RootKey is the root key of the chains RootChain makes (threshold 1).
var RootKey = fixedKey("root")

// RootChain is roots v1…vN a node accepts in turn: each signed by RootKey, which is the root
// role of every one of them; ReleaseKey signs releases, SecondKey targets. expires is each
// root's expiry (RFC 3339).
func RootChain(tb testing.TB, n int, expires string) []wire.Root {
	tb.Helper()
	var out []wire.Root
	for v := 1; v <= n; v++ {
		r := wire.Root{Schema: wire.RootSchema, Version: uint64(v), Expires: expires, Keys: map[string]string{}, Roles: map[wire.Role]wire.RoleKeys{}}
		for role, k := range map[wire.Role]KeyPair{wire.RoleRoot: RootKey, wire.RoleReleases: ReleaseKey, wire.RoleTargets: SecondKey} {
			id := wire.KeyID(k.Public)
			r.Keys[id] = base64.StdEncoding.EncodeToString(k.Public)
			r.Roles[role] = wire.RoleKeys{Keys: []string{id}, Threshold: 1}
		}
		if err := r.Sign(RootKey.Private); err != nil {
			tb.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// PutRoots puts each root under its key (wire.RootKey) in the releases bucket.
func (b *Bus) PutRoots(roots ...wire.Root) {
	b.tb.Helper()
	for _, r := range roots {
		b.Put(b.Names.Releases(), wire.RootKey(r.Version), r.Marshal())
	}
}
