package targets

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A window set for a group is one document naming the group, under each node's key, signed
// for that key; setting it again numbers it after what it replaces; clear deletes the keys and
// says what they held; the keeper, which reads the same bucket, leaves windows alone.
func TestSetWindowWritesEachNodesKeyNamingTheGroupAndClearRemovesThem(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx := meshtest.Context(t, 20*time.Second)
	kv := b.KV(b.Names.Targets())
	spec, err := wire.ParseWindowSpec("mon-fri 02:00-04:00 Europe/Brussels")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	set, err := SetWindow(ctx, kv, []string{"web-01", "web-02"}, false, spec, meshtest.ReleaseKey.Private, DefaultWindowTTL, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != 2 || set[0].Key != "window.node.web-01" || set[1].Key != "window.node.web-02" {
		t.Fatalf("set %+v", set)
	}
	for _, s := range set {
		e, err := kv.Get(ctx, s.Key)
		if err != nil {
			t.Fatal(err)
		}
		w, err := wire.ParseWindow(e.Value())
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Verify(s.Key, wire.LegacyTrust(nil, trusted(meshtest.ReleaseKey)), time.Now()); err != nil {
			t.Errorf("%s: %v", s.Key, err)
		}
		if strings.Join(w.Nodes, ",") != "web-01,web-02" || w.String() != "mon-fri 02:00-04:00 Europe/Brussels" {
			t.Errorf("%s holds %v for %v", s.Key, w, w.Nodes)
		}
	}
	again, err := SetWindow(ctx, kv, []string{"web-01"}, false, spec, meshtest.ReleaseKey.Private, DefaultWindowTTL, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Window.Seq <= set[0].Window.Seq {
		t.Errorf("set again at the same clock: seq %d, not after %d", again[0].Window.Seq, set[0].Window.Seq)
	}
	if _, err := SetWindow(ctx, kv, nil, true, spec, meshtest.ReleaseKey.Private, DefaultWindowTTL, nil); err != nil {
		t.Fatal(err)
	}
	shown, err := Windows(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range shown {
		keys = append(keys, s.Key)
	}
	if got := strings.Join(keys, " "); got != "window.node.web-01 window.node.web-02 window.fleet" {
		t.Errorf("shown %s, want the nodes' then the fleet's", got)
	}
	cleared, err := ClearWindow(ctx, kv, []string{"web-02", "web-03"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if cleared[0].Revision == 0 || cleared[0].Window.Start != "02:00" || cleared[1].Revision != 0 {
		t.Errorf("cleared %+v: want web-02's window, and nothing for web-03", cleared)
	}
	if _, err := kv.Get(ctx, "window.node.web-02"); err == nil {
		t.Error("window.node.web-02 is still there after clear")
	}
}

func TestWindowKeysRefuseWhatNamesNoNodeOrTooMany(t *testing.T) {
	many := make([]string, wire.MaxWindowNodes+1)
	for i := range many {
		many[i] = "n" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)
	}
	for _, tc := range []struct {
		name  string
		nodes []string
		fleet bool
		want  string
	}{
		{"nodes and the fleet", []string{"a"}, true, "not both"},
		{"neither", nil, false, "no node ids"},
		{"a node twice", []string{"a", "a"}, false, "named twice"},
		{"a bad node id", []string{"a b"}, false, "a b"},
		{"more than a window names", many, false, "at most 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := WindowKeys(tc.nodes, tc.fleet)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// An urgent target signed again for its version (the keeper does, with a signer that is not
// urgent) stays urgent; a target for another version is urgent only if its signer is.
func TestATargetSignedAgainForItsVersionStaysUrgent(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx := meshtest.Context(t, 20*time.Second)
	kv := b.KV(b.Names.Targets())
	urgent := Writer{KV: kv, Signer: Signer{Key: meshtest.ReleaseKey.Private, TTL: time.Hour, Urgent: true}}
	plain := Writer{KV: kv, Signer: testSigner(time.Hour)}
	const key = "node.web-01"
	for _, tc := range []struct {
		name    string
		w       Writer
		version string
		urgent  bool
	}{
		{"set urgent", urgent, "v1.1.0", true},
		{"signed again by a plain signer, same version", plain, "v1.1.0", true},
		{"another version by a plain signer", plain, "v1.2.0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.w.Update(ctx, key, nil, func(Current) Decision { return SetTo(tc.version) }); err != nil {
				t.Fatal(err)
			}
			tg, _ := read(t, b, key)
			if tg.Urgent != tc.urgent || tg.Version != tc.version || tg.Verify(key, wire.LegacyTrust(nil, trusted(meshtest.ReleaseKey)), time.Now()) != nil {
				t.Errorf("target %+v: want %s, urgent %v, verifying", tg, tc.version, tc.urgent)
			}
		})
	}
}
