package delta_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire/delta"
)

// pair is a base and a next version of it: random bytes (incompressible alone), with a few
// edits and an insertion, as a point release changes a binary.
func pair(size int) (base, next []byte) {
	r := rand.New(rand.NewPCG(1, 2))
	base = make([]byte, size)
	for i := range base {
		base[i] = byte(r.Uint32())
	}
	next = append([]byte(nil), base[:size/3]...)
	next = append(next, []byte("a new function the point release added")...)
	next = append(next, base[size/3:]...)
	for i := 0; i < 50; i++ {
		next[r.IntN(len(next))] ^= 0xff
	}
	return base, next
}

func TestApplyRebuildsTheBinaryMakeWasGiven(t *testing.T) {
	base, next := pair(3 << 20)
	var d bytes.Buffer
	if err := delta.Make(&d, base, next); err != nil {
		t.Fatal(err)
	}
	if d.Len() > len(next)/20 {
		t.Errorf("the delta is %d bytes for a %d-byte binary that differs from its base in a few places; want under 5%%", d.Len(), len(next))
	}
	var out bytes.Buffer
	res, err := delta.Apply(context.Background(), &out, base, bytes.NewReader(d.Bytes()), int64(len(next)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), next) || res.Size != int64(len(next)) || res.Digest != digest.FromBytes(next) {
		t.Fatalf("rebuilt %d bytes (%s), want %d (%s)", res.Size, res.Digest, len(next), digest.FromBytes(next))
	}
}

func TestApplyRefuses(t *testing.T) {
	base, next := pair(2 << 20)
	var d bytes.Buffer
	if err := delta.Make(&d, base, next); err != nil {
		t.Fatal(err)
	}
	other := append([]byte(nil), base...)
	for i := 0; i < len(other); i += 4096 {
		other[i] ^= 0x55
	}
	corrupt := append([]byte(nil), d.Bytes()...)
	corrupt[len(corrupt)/2] ^= 0xff
	// A delta whose window is over what Apply accepts for this base: made against a tiny base.
	var huge bytes.Buffer
	if err := delta.Make(&huge, base[:4096], append(next, next...)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		base   []byte
		delta  []byte
		maxOut int64
	}{
		{"a delta made against other bytes rebuilds other bytes or is refused", other, d.Bytes(), int64(len(next))},
		{"a corrupt delta is refused", base, corrupt, int64(len(next))},
		{"a truncated delta is refused", base, d.Bytes()[:d.Len()/2], int64(len(next))},
		{"output over the cap is refused", base, d.Bytes(), int64(len(next)) - 1},
		{"a window larger than the base allows is refused", base[:4096], huge.Bytes(), 1 << 30},
		{"no bytes at all is refused", base, nil, int64(len(next))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			res, err := delta.Apply(context.Background(), &out, tc.base, bytes.NewReader(tc.delta), tc.maxOut)
			if err == nil {
				if res.Digest == digest.FromBytes(next) {
					t.Fatalf("rebuilt the new binary from a bad input")
				}
				if tc.name != "a delta made against other bytes rebuilds other bytes or is refused" {
					t.Fatalf("no error; rebuilt %d bytes", res.Size)
				}
				return
			}
			if !errors.Is(err, delta.ErrRefused) {
				t.Fatalf("err = %v, want ErrRefused", err)
			}
		})
	}
}

func TestApplyStopsWhenItsContextEnds(t *testing.T) {
	base, next := pair(1 << 20)
	var d bytes.Buffer
	if err := delta.Make(&d, base, next); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := delta.Apply(ctx, &bytes.Buffer{}, base, bytes.NewReader(d.Bytes()), int64(len(next))); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestWindowCoversBaseAndNext(t *testing.T) {
	for _, tc := range []struct {
		base, next int64
		want       int
	}{
		{13 << 20, 13 << 20, 32 << 20},
		{1000, 1000, 1 << 20},
		{16 << 20, 0, 16 << 20},
	} {
		if got := delta.Window(tc.base, tc.next); got != tc.want {
			t.Errorf("Window(%d, %d) = %d, want %d", tc.base, tc.next, got, tc.want)
		}
	}
	if got := delta.MaxWindow(13 << 20); got != 64<<20 {
		t.Errorf("MaxWindow(13 MiB) = %d, want 64 MiB", got)
	}
}
