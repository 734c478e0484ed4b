package deliver

import (
	"context"
	"runtime"
	"testing"
)

// A node with 28 MiB free was refused a 12 MB release: staging asked for a fixed 160 MiB
// (the archive + the 128 MiB binary cap + a 32 MiB margin) instead of what the release needs.
func TestDeliverStagesA12MBReleaseWith28MiBFree(t *testing.T) {
	cases := []struct {
		name string
		bin  func(t *testing.T) []byte
	}{
		{"TestDeliverStagesA12MBReleaseThatCompressesWith28MiBFree", func(t *testing.T) []byte {
			bin := fakehost(t, v1, "ok", runtime.GOARCH)
			return padded(bin, 12<<20-len(bin))
		}},
		{"TestDeliverStagesA12MBReleaseThatDoesNotCompressWith28MiBFree", func(t *testing.T) []byte {
			bin := fakehost(t, v1, "ok", runtime.GOARCH)
			return withTail(bin, 12<<20-len(bin))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.release(v1, c.bin(t))
			h.d.env.freeSpace = func(string) (uint64, error) { return 28 << 20, nil }
			if err := h.d.Deliver(context.Background(), v1, nil); err != nil {
				t.Fatal(err)
			}
			if !h.d.Have(v1) {
				t.Fatal("not staged")
			}
		})
	}
}
