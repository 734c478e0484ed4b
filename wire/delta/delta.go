// Package delta makes and applies the delta of a host binary against an earlier one.
//
// It is a zstd frame compressed with the earlier binary as a raw dictionary, the `zstd
// --patch-from` technique. A node that has the base binary fetches the delta instead of the full
// archive and rebuilds the new binary from the two (decision 0028).
//
// Guarantees, each a test:
//   - Apply writes exactly the bytes Make was given, hashing them as they are written;
//   - Apply refuses a delta made against another base, a corrupt delta, one whose window is
//     larger than MaxWindow allows for its base, and output beyond its cap, with ErrRefused;
//   - its memory is bounded by MemoryBound: the base, one window of history and the decoder's
//     block buffers, whatever the delta says.
//
// The frame carries no dictionary ID (ID 0, as `zstd --patch-from` writes it), so a delta can
// also be checked by hand: `zstd -d --patch-from=BASE --long=25 DELTA -o NEW`.
package delta

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/bits"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/ctxio"
)

// ErrRefused is wrapped by Apply's error when the delta cannot rebuild a binary from this base:
// corrupt, made against other bytes, a window too large, or output over the cap. The caller
// falls back to the full archive; it is never a reason to mark the release bad.
var ErrRefused = errors.New("delta refused")

// dictID is the frame's dictionary ID: 0, none written, as zstd --patch-from does.
const dictID = 0

// minWindow is the smallest window a delta is made with.
const minWindow = 1 << 20

// Window is the window Make uses for a base and a new binary of these sizes: the power of two
// that covers both, so any byte of the base can be referred to from anywhere in the new binary
// (an offset into the dictionary counts the base's tail and what was decoded before it).
func Window(baseSize, newSize int64) int {
	w := ceilPow2(baseSize + newSize)
	return int(max(w, minWindow))
}

// MaxWindow is the largest window Apply accepts for a base of this size: Window of the base and
// a new binary up to three times its size. A delta with a larger window (a new binary far larger
// than its base) is refused, and the node takes the full archive.
func MaxWindow(baseSize int64) uint64 { return uint64(Window(baseSize, 3*baseSize)) }

// MemoryBound is what Apply holds at most for a base of this size, beyond the caller's buffers:
// the base itself (the dictionary, which the caller has read), one window of history, and the
// decoder's block buffers (about 1 MiB with WithDecoderLowmem and one goroutine). For the 13 MB
// host binary against itself: 13 + 32 + 1 MiB in the worst case (a 32 MiB window), and
// BenchmarkRebuild measures what it takes.
func MemoryBound(baseSize int64) int64 { return baseSize + int64(MaxWindow(baseSize)) + 1<<20 }

// Make writes the delta of next against base to w with zstd's best level.
func Make(w io.Writer, base, next []byte) error {
	zw, err := zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.SpeedBestCompression),
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(Window(int64(len(base)), int64(len(next)))),
		zstd.WithEncoderCRC(true),
		zstd.WithEncoderDictRaw(dictID, base))
	if err != nil {
		return fmt.Errorf("delta: %w", err)
	}
	if _, err := zw.Write(next); err != nil {
		zw.Close()
		return fmt.Errorf("delta: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("delta: %w", err)
	}
	return nil
}

// Result is what Apply wrote.
type Result struct {
	Size   int64
	Digest digest.Digest // sha256 of the bytes written
}

// Apply rebuilds a binary from base and the delta read from r, writing it to w and hashing it as
// it goes; it writes at most maxOut bytes. A delta that does not decode against base, or would
// write more, wraps ErrRefused; a failure to write to w is returned as it is.
func Apply(ctx context.Context, w io.Writer, base []byte, r io.Reader, maxOut int64) (Result, error) {
	zr, err := zstd.NewReader(ctxio.Reader(ctx, r),
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(MaxWindow(int64(len(base)))),
		zstd.WithDecoderDictRaw(dictID, base))
	if err != nil {
		return Result{}, fmt.Errorf("delta: %w", err)
	}
	defer zr.Close()
	h := sha256.New()
	out := &writeRecorder{w: w}
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(zr, maxOut+1))
	switch {
	case out.err != nil:
		return Result{}, out.err
	case ctx.Err() != nil:
		return Result{}, ctx.Err()
	case err != nil:
		return Result{}, fmt.Errorf("%w: it does not decode against this base (%v)", ErrRefused, err)
	case n > maxOut:
		return Result{}, fmt.Errorf("%w: it rebuilds more than %d bytes", ErrRefused, maxOut)
	case n == 0:
		return Result{}, fmt.Errorf("%w: it rebuilds no bytes", ErrRefused)
	}
	return Result{Size: n, Digest: digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))}, nil
}

// writeRecorder keeps the first error of the writer it wraps, to tell a write failure (the
// machine's) from a decode failure (the delta's).
type writeRecorder struct {
	w   io.Writer
	err error
}

func (r *writeRecorder) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}

func ceilPow2(n int64) int64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(uint64(n-1))
}
