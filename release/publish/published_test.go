package publish

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire/meshtest"
)

// Published is the one rule every command asks (target, rollout start, withdraw, a delta's
// base): a manifest under the version's key. Absent, deleted or purged, a version is not
// published, said with the bucket and the command that publishes; a missing bucket says to run
// init.
func TestPublishedIsAManifestUnderTheVersionsKey(t *testing.T) {
	ctx := context.Background()
	js := meshtest.StartBus(t).Conn.JS
	dir, _ := buildDir(t, meshtest.ReleaseKey.Private, "v1.0.0", []byte("binary one"))
	if _, err := Publish(ctx, js, names, dir); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, names.Releases())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v2.0.0", "v3.0.0"} {
		if _, err := kv.Put(ctx, v, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "v2.0.0"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "v3.0.0"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version   string
		published bool
	}{
		{"v1.0.0", true},
		{"v1.9.9", false},
		{"v2.0.0", false}, // deleted
		{"v3.0.0", false}, // purged
	} {
		t.Run(tc.version, func(t *testing.T) {
			raw, err := Published(ctx, js, names, tc.version)
			if tc.published {
				if err != nil || !bytes.Contains(raw, []byte(`"version": "v1.0.0"`)) {
					t.Fatalf("Published = %q, %v; want the manifest", raw, err)
				}
				return
			}
			want := tc.version + " is not published in " + names.Releases() + "; publish it first with `mesh-release publish`"
			if !errors.Is(err, ErrNotPublished) || err.Error() != want {
				t.Fatalf("Published = %v; want ErrNotPublished saying %q", err, want)
			}
		})
	}
	bare := meshtest.StartBus(t, meshtest.NoBuckets()).Conn.JS
	if _, err := Published(ctx, bare, names, "v1.0.0"); err == nil || errors.Is(err, ErrNotPublished) || !strings.Contains(err.Error(), "mesh-release init") {
		t.Fatalf("without buckets: %v; want the init hint", err)
	}
}
