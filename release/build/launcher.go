package build

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/ctxio"
	"github.com/novox/mesh-host/wire"
)

// The launcher is an object of its own (decision 0044): the zstd of the binary, named
// wire.LauncherObjectName by its own version, so a release whose launcher is unchanged names
// the object an earlier release put, and publishing it moves no launcher bytes.

// CompressLauncher writes the launcher object of the binary r (size bytes) to w: zstd with
// the archive's settings, one encoder goroutine, so the same binary always gives the same
// object bytes.
func CompressLauncher(w io.Writer, r io.Reader, size int64) error {
	zw, err := zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.SpeedBetterCompression),
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(8<<20),
		zstd.WithEncoderCRC(true))
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

// DecompressLauncher reads a launcher object (r) back into the binary, refusing one over
// wire.MaxLauncherSize bytes or a window over 64 MiB.
func DecompressLauncher(ctx context.Context, r io.Reader) ([]byte, error) {
	zr, err := zstd.NewReader(ctxio.Reader(ctx, r),
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	b, err := io.ReadAll(io.LimitReader(zr, wire.MaxLauncherSize+1))
	if err != nil {
		return nil, fmt.Errorf("launcher object: %w", err)
	}
	if len(b) > wire.MaxLauncherSize {
		return nil, fmt.Errorf("launcher object: decompresses to over %d bytes", wire.MaxLauncherSize)
	}
	return b, nil
}

// packLauncher compresses the launcher binary at path (of version v, built for p) into a staged
// object in dir and describes it.
func packLauncher(st *staged, dir, path, v string, p wire.Platform) (wire.LauncherObject, error) {
	if err := checkArch(path, "launcher", p); err != nil {
		return wire.LauncherObject{}, err
	}
	f, size, err := openRegular(path, "launcher")
	if err != nil {
		return wire.LauncherObject{}, err
	}
	defer f.Close()
	if size > wire.MaxLauncherSize {
		return wire.LauncherObject{}, fmt.Errorf("launcher %s is %d bytes, over the %d a manifest may name", path, size, wire.MaxLauncherSize)
	}
	l := wire.LauncherObject{Version: v, Object: wire.LauncherObjectName(v, p), BinarySize: size}
	tmp, err := st.create(dir, l.Object)
	if err != nil {
		return wire.LauncherObject{}, fmt.Errorf("write the launcher object: %w", err)
	}
	bh, oh, n := sha256.New(), sha256.New(), &counter{}
	if err := CompressLauncher(io.MultiWriter(tmp, oh, n), io.TeeReader(f, bh), size); err != nil {
		return wire.LauncherObject{}, fmt.Errorf("%s: %w", path, err)
	}
	l.Size = n.n
	l.Digest = digest.NewDigestFromBytes(digest.SHA256, oh.Sum(nil))
	l.BinaryDigest = digest.NewDigestFromBytes(digest.SHA256, bh.Sum(nil))
	return l, nil
}

// staged are files written to temporary names, renamed to theirs only when the whole build
// succeeded (commit), else removed (abort): a refused build leaves no object behind.
type staged struct {
	files []stagedFile
}

type stagedFile struct {
	f    *atomicfile.File
	name string
}

// create starts the staged file that becomes dir/name.
func (s *staged) create(dir, name string) (*atomicfile.File, error) {
	f, err := atomicfile.Create(dir, 0o644)
	if err != nil {
		return nil, err
	}
	s.files = append(s.files, stagedFile{f, name})
	return f, nil
}

// commit renames every staged file into dir under its name.
func (s *staged) commit(dir string) error {
	for len(s.files) > 0 {
		sf := s.files[0]
		s.files = s.files[1:]
		if err := sf.f.Commit(filepath.Join(dir, sf.name)); err != nil {
			return fmt.Errorf("write %s: %w", sf.name, err)
		}
	}
	return nil
}

// abort removes every staged file not committed.
func (s *staged) abort() {
	for _, sf := range s.files {
		sf.f.Abort()
	}
	s.files = nil
}
