package targets

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// One key signs a target as before roots, byte for byte (key_id and signature); each further
// key adds its signature, and the target then carries signatures (a targets threshold, decision
// 0045); a key given twice is refused.
func TestASignerWithMoreKeysSignsWithEach(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	one := Signer{Key: meshtest.ReleaseKey.Private, TTL: DefaultTTL, Now: func() time.Time { return now }}
	before, err := wire.NewTarget("node.web-01", "v1.2.0", 0, now, DefaultTTL, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		more []meshtest.KeyPair
		keys []string
	}{
		{"one key: as before roots", nil, []string{wire.KeyID(meshtest.ReleaseKey.Public)}},
		{"two keys", []meshtest.KeyPair{meshtest.SecondKey}, []string{wire.KeyID(meshtest.ReleaseKey.Public), wire.KeyID(meshtest.SecondKey.Public)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := one
			for _, k := range tc.more {
				s.More = append(s.More, k.Private)
			}
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
			got, err := s.Sign("node.web-01", "v1.2.0", 0)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, sg := range got.List() {
				ids = append(ids, sg.KeyID)
			}
			if !slices.Equal(ids, tc.keys) || !slices.Equal(s.KeyIDs(), tc.keys) {
				t.Errorf("signed by %v (signer %v), want %v", ids, s.KeyIDs(), tc.keys)
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(got.Marshal(), &fields); err != nil {
				t.Fatal(err)
			}
			if _, many := fields["signatures"]; many != (len(tc.more) > 0) {
				t.Errorf("signatures present %v: %s", many, got.Marshal())
			}
			if len(tc.more) == 0 && !bytes.Equal(got.Marshal(), before.Marshal()) {
				t.Errorf("one key's target\n%s\nis not the target signed before roots\n%s", got.Marshal(), before.Marshal())
			}
		})
	}
	twice := one
	twice.More = append(twice.More, meshtest.ReleaseKey.Private)
	if err := twice.Check(); err == nil {
		t.Error("a key given twice was taken")
	}
}
