// Package archive is the host archive format, both sides of it: Pack writes the one
// reproducible tar+zstd archive a release holds (a single regular file named mesh-host), and
// Extract reads one back strictly, refusing anything else an archive could carry.
package archive

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/ctxio"
	"github.com/novox/mesh-host/internal/layout"
)

// BinaryName is the one entry a host archive holds: the host binary, named as it is in a
// version's directory on a node.
const BinaryName = layout.BinaryName

// Mode is the file mode of the packed and of the extracted binary.
const Mode = 0o755

// DefaultMaxBinary is the default cap on the extracted binary's size.
const DefaultMaxBinary = 256 << 20

// DefaultMaxWindow is the largest zstd window Extract accepts (zstd -19 uses 8 MiB; only
// --long or --ultra go beyond it).
const DefaultMaxWindow = 64 << 20

// ErrUnsafe is wrapped by every refusal of an archive's content; the message names the entry
// and what was wrong with it.
var ErrUnsafe = errors.New("refused host archive")

// Pack writes a host archive holding bin (size bytes, the mesh-host binary) to w. The output
// depends only on the binary's bytes and this package's pinned zstd version: fixed time,
// owner, name and mode; a single entry; one encoder goroutine.
func Pack(w io.Writer, bin io.Reader, size int64) error {
	zw, err := zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.SpeedBetterCompression),
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(8<<20),
		zstd.WithEncoderCRC(true))
	if err != nil {
		return fmt.Errorf("pack: zstd: %w", err)
	}
	tw := tar.NewWriter(zw)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     BinaryName,
		Mode:     Mode,
		Size:     size,
		ModTime:  time.Unix(0, 0), // fixed, so the same binary gives the same bytes
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		zw.Close()
		return fmt.Errorf("pack: %w", err)
	}
	n, err := io.Copy(tw, bin)
	if err != nil {
		zw.Close()
		return fmt.Errorf("pack: copying the binary: %w", err)
	}
	if n != size {
		zw.Close()
		return fmt.Errorf("pack: the binary is %d bytes, expected %d (did it change while packing?)", n, size)
	}
	if err := tw.Close(); err != nil {
		zw.Close()
		return fmt.Errorf("pack: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("pack: zstd: %w", err)
	}
	return nil
}

// Limits bound what Extract will decode. Zero fields take the defaults.
type Limits struct {
	MaxBinary int64  // largest binary accepted (DefaultMaxBinary)
	MaxWindow uint64 // largest zstd window accepted (DefaultMaxWindow)
}

func (l Limits) withDefaults() Limits {
	if l.MaxBinary <= 0 {
		l.MaxBinary = DefaultMaxBinary
	}
	if l.MaxWindow == 0 {
		l.MaxWindow = DefaultMaxWindow
	}
	return l
}

// Binary is what Extract wrote: the path of the binary, its size and its digest, hashed while
// it was written.
type Binary struct {
	Path   string
	Size   int64
	Digest digest.Digest
}

// tarSlack is what the tar framing around one file may add to the decoded stream: headers
// (with PAX records), padding and the end blocks, with room for a record-padded writer such
// as GNU tar (10 KiB records).
const tarSlack = 64 << 10

// Extract reads a host archive from r and writes its one binary to dir/mesh-host (dir must
// exist; the file must not). It refuses, wrapping ErrUnsafe: any entry that is not a regular
// file named mesh-host (or ./mesh-host) — directories, symlinks, hard links, devices, FIFOs,
// PAX global headers, absolute names, names with "..", a second entry; setuid, setgid or
// sticky modes; a binary larger than the limit; a decoded stream larger than the binary plus
// tar framing, or a zstd window larger than the limit (decompression bombs); anything but
// zero padding after the tar end. It reads r to its end, so the zstd checksum is verified.
// A failure to write dir/mesh-host (a full disk, an I/O error) is the machine's, not the
// archive's: it is returned wrapping the *os.PathError, never ErrUnsafe.
// On error the caller removes dir; Extract may have left a partial file there.
func Extract(ctx context.Context, r io.Reader, dir string, lim Limits) (Binary, error) {
	return extract(ctx, r, dir, lim, createFile)
}

// Peek reads the archive's first entry, checks it as Extract does and returns the size of the
// binary Extract would write, so the caller can check for room before extracting. The size is
// what the archive says: trust it once the archive's digest is verified.
func Peek(ctx context.Context, r io.Reader, lim Limits) (int64, error) {
	lim = lim.withDefaults()
	zr, tr, _, err := open(ctx, r, lim)
	if err != nil {
		return 0, err
	}
	defer zr.Close()
	hdr, err := first(tr, lim)
	if err != nil {
		return 0, err
	}
	return hdr.Size, nil
}

// dest is the file Extract writes the binary to: an *os.File, or a test's stand-in for a
// failing disk.
type dest interface {
	io.Writer
	Chmod(os.FileMode) error
	Sync() error
	Close() error
}

func createFile(path string) (dest, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, Mode)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func extract(ctx context.Context, r io.Reader, dir string, lim Limits, create func(string) (dest, error)) (Binary, error) {
	lim = lim.withDefaults()
	zr, tr, capped, err := open(ctx, r, lim)
	if err != nil {
		return Binary{}, err
	}
	defer zr.Close()
	if _, err := first(tr, lim); err != nil {
		return Binary{}, err
	}
	out := filepath.Join(dir, BinaryName)
	f, err := create(out)
	if err != nil {
		return Binary{}, fmt.Errorf("extract: %w", err)
	}
	h := sha256.New()
	w := &WriteRecorder{W: f}
	n, err := io.Copy(io.MultiWriter(w, h), tr)
	if err != nil {
		f.Close()
		if w.Err != nil {
			return Binary{}, fmt.Errorf("extract: %w", w.Err)
		}
		return Binary{}, readErr(err)
	}
	if err := f.Chmod(Mode); err != nil {
		f.Close()
		return Binary{}, fmt.Errorf("extract: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return Binary{}, fmt.Errorf("extract: sync %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return Binary{}, fmt.Errorf("extract: %w", err)
	}
	next, err := tr.Next()
	switch {
	case err == nil:
		return Binary{}, fmt.Errorf("%w: it holds more than one entry (%q after %s); a host archive holds exactly one file named %s",
			ErrUnsafe, next.Name, BinaryName, BinaryName)
	case !errors.Is(err, io.EOF):
		return Binary{}, readErr(err)
	}
	// After the tar end there may be only zero padding; reading to the end also makes the
	// zstd decoder check the frame checksum.
	if err := drainZeros(capped); err != nil {
		return Binary{}, err
	}
	return Binary{Path: out, Size: n, Digest: digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))}, nil
}

// open starts decoding r: the zstd decoder (the caller closes it), the tar reader on its
// capped output, and the cap itself.
func open(ctx context.Context, r io.Reader, lim Limits) (*zstd.Decoder, *tar.Reader, *capReader, error) {
	return openCapped(ctx, r, lim.MaxWindow, lim.MaxBinary+tarSlack)
}

// openCapped is open with the window limit and the cap on the decoded stream given directly;
// ExtractTree shares it with its own caps.
func openCapped(ctx context.Context, r io.Reader, maxWindow uint64, capBytes int64) (*zstd.Decoder, *tar.Reader, *capReader, error) {
	zr, err := zstd.NewReader(ctxio.Reader(ctx, r),
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(maxWindow),
		zstd.WithDecoderMaxMemory(maxWindow)) // for streams, a memory bound; output is capped below
	if err != nil {
		return nil, nil, nil, fmt.Errorf("extract: zstd: %w", err)
	}
	capped := &capReader{r: zr, left: capBytes, limit: capBytes}
	return zr, tar.NewReader(capped), capped, nil
}

// first reads and checks the archive's first entry.
func first(tr *tar.Reader, lim Limits) (*tar.Header, error) {
	hdr, err := tr.Next()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: the archive is empty; it must hold one file named %s", ErrUnsafe, BinaryName)
	}
	if err != nil {
		return nil, readErr(err)
	}
	if err := checkEntry(hdr, lim); err != nil {
		return nil, err
	}
	return hdr, nil
}

// WriteRecorder passes writes to W and keeps the error of a failed one, so that a caller copying
// with io.Copy can tell its destination failing (a full disk: the machine's problem) from its
// source failing (what was being read). Extract and the host's download both use it.
type WriteRecorder struct {
	W   io.Writer
	Err error // the first write error, if any
}

func (d *WriteRecorder) Write(p []byte) (int, error) {
	n, err := d.W.Write(p)
	if err != nil && d.Err == nil {
		d.Err = err
	}
	return n, err
}

func checkEntry(hdr *tar.Header, lim Limits) error {
	name := hdr.Name
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: entry %q %s; a host archive holds exactly one regular file named %s",
			ErrUnsafe, name, fmt.Sprintf(format, args...), BinaryName)
	}
	if p := kindProblem(hdr, false); p != "" {
		return refuse("%s", p)
	}
	if name != BinaryName && name != "./"+BinaryName {
		return refuse("is not named %s", BinaryName)
	}
	if p := modeProblem(hdr); p != "" {
		return refuse("%s", p)
	}
	if hdr.Size > lim.MaxBinary {
		return refuse("is %d bytes, over the %d-byte limit", hdr.Size, lim.MaxBinary)
	}
	return nil
}

// kindProblem says what is wrong with an entry's name or kind, or "" if nothing is: the rules
// every archive the host reads shares. Directories are allowed only where asked (ExtractTree).
func kindProblem(hdr *tar.Header, allowDir bool) string {
	switch {
	case strings.HasPrefix(hdr.Name, "/"):
		return "has an absolute path"
	case hasDotDot(hdr.Name):
		return "escapes the extraction directory with .."
	}
	switch hdr.Typeflag {
	case tar.TypeReg:
	case tar.TypeDir:
		if !allowDir {
			return "is a directory"
		}
	case tar.TypeSymlink:
		return fmt.Sprintf("is a symlink to %q", hdr.Linkname)
	case tar.TypeLink:
		return fmt.Sprintf("is a hard link to %q", hdr.Linkname)
	case tar.TypeChar, tar.TypeBlock:
		return "is a device node"
	case tar.TypeFifo:
		return "is a FIFO"
	case tar.TypeXGlobalHeader:
		return "is a PAX global header"
	default:
		return fmt.Sprintf("has tar type %q", string(hdr.Typeflag))
	}
	return ""
}

// modeProblem refuses setuid, setgid and sticky modes: an archive never makes a program that
// runs as someone else.
func modeProblem(hdr *tar.Header) string {
	if hdr.Mode&0o7000 != 0 {
		return fmt.Sprintf("has mode %#o (setuid, setgid or sticky)", hdr.Mode)
	}
	return ""
}

func hasDotDot(name string) bool {
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

// readErr words a decoding error for the operator.
func readErr(err error) error {
	var bomb *bombError
	switch {
	case errors.As(err, &bomb):
		return fmt.Errorf("%w: %v", ErrUnsafe, err)
	case errors.Is(err, zstd.ErrWindowSizeExceeded), errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return fmt.Errorf("%w: the zstd stream needs more memory than allowed (%v); repack it without --long/--ultra", ErrUnsafe, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("extract: %w", err)
	}
	return fmt.Errorf("%w: it is not a valid tar+zstd archive: %v", ErrUnsafe, err)
}

func drainZeros(r io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if b != 0 {
				return fmt.Errorf("%w: it holds data after the end of the tar stream", ErrUnsafe)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return readErr(err)
		}
	}
}

// bombError is returned when the decoded stream exceeds its cap.
type bombError struct{ limit int64 }

func (e *bombError) Error() string {
	return fmt.Sprintf("it decompresses to more than %d bytes (a decompression bomb, or a binary over the limit)", e.limit)
}

// capReader returns a bombError once more than left bytes are read through it.
type capReader struct {
	r     io.Reader
	left  int64
	limit int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One more byte distinguishes "exactly at the cap" from "over it".
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			return 0, &bombError{limit: c.limit}
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
