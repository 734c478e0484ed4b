package build

import (
	"bytes"
	"context"
	"os"
	"slices"
	"testing"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Each of MoreKeys adds its signature to the manifest (a releases threshold of two, decision
// 0045), which then carries signatures; without them the manifest is the one signature it was.
func TestBuildWithMoreKeysSignsTheManifestWithEach(t *testing.T) {
	bin := tiny(t, "amd64")
	for _, tc := range []struct {
		name string
		more []meshtest.KeyPair
	}{
		{"one key", nil},
		{"two keys", []meshtest.KeyPair{meshtest.SecondKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Version: "v1.2.3", Key: meshtest.ReleaseKey.Private, OutDir: t.TempDir(), Binary: bin, NoLauncher: true, Now: fixedNow}
			want := []string{wire.KeyID(meshtest.ReleaseKey.Public)}
			for _, k := range tc.more {
				o.MoreKeys = append(o.MoreKeys, k.Private)
				want = append(want, wire.KeyID(k.Public))
			}
			r, err := Build(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(r.ManifestPath)
			if err != nil {
				t.Fatal(err)
			}
			m, err := wire.ParseManifest(raw)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sg := range m.List() {
				got = append(got, sg.KeyID)
			}
			if !slices.Equal(got, want) || bytes.Contains(raw, []byte(`"signatures"`)) != (len(tc.more) > 0) {
				t.Errorf("signed by %v, want %v:\n%s", got, want, raw)
			}
		})
	}
}
