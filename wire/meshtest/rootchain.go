package meshtest

import (
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// RootChain is roots v1…vN a node accepts in turn (NewRoot: ReleaseKey signs releases,
// SecondKey targets), each signed by two of RootKeys, the root role of every one of them.
func RootChain(tb testing.TB, n int, expires time.Time) []wire.Root {
	tb.Helper()
	var out []wire.Root
	for v := 1; v <= n; v++ {
		out = append(out, SignRoot(tb, NewRoot(tb, uint64(v), expires, ReleaseKey, SecondKey), RootKeys[0], RootKeys[1]))
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
