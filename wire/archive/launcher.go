package archive

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// A launcher object (manifest schema 4) is the mesh-launcher binary compressed with zstd alone,
// no tar around it: one object for every release that carries that launcher, so it must be the
// same bytes each time the same binary is compressed. Both sides use these two functions.

// newEncoder is the zstd encoder of archives and launcher objects: one goroutine, fixed level
// and window, so the same input always gives the same bytes.
func newEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.SpeedBetterCompression),
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(8<<20),
		zstd.WithEncoderCRC(true))
}

// CompressLauncher writes the launcher object of the binary r, of size bytes, to w.
func CompressLauncher(w io.Writer, r io.Reader, size int64) error {
	zw, err := newEncoder(w)
	if err != nil {
		return fmt.Errorf("launcher object: zstd: %w", err)
	}
	n, err := io.Copy(zw, r)
	if err != nil {
		zw.Close()
		return fmt.Errorf("launcher object: %w", err)
	}
	if n != size {
		zw.Close()
		return fmt.Errorf("launcher object: the launcher is %d bytes, expected %d (did it change while packing?)", n, size)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("launcher object: zstd: %w", err)
	}
	return nil
}

// NewLauncherReader reads the binary a launcher object holds: one goroutine, little memory, and
// a window of at most DefaultMaxWindow. The caller bounds how much it reads (the signed
// binary_size) and checks the digest.
func NewLauncherReader(r io.Reader) (io.ReadCloser, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(DefaultMaxWindow), zstd.WithDecoderMaxMemory(DefaultMaxWindow))
	if err != nil {
		return nil, fmt.Errorf("launcher object: zstd: %w", err)
	}
	return zr.IOReadCloser(), nil
}
