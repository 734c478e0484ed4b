// Package archive is the host archive format, both sides: Pack writes it reproducibly, Extract
// reads it strictly.
//
// Pack writes the one reproducible tar+zstd archive a release holds (a regular file named
// mesh-host, then, in a release carrying its launcher, one named mesh-launcher), and Extract reads
// one back strictly, refusing anything else an archive could carry. A schema 4 release's
// launcher is an object of its own: CompressLauncher and NewLauncherReader (launcher.go).
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

// BinaryName is the first entry a host archive holds: the host binary, named as it is in a
// version's directory on a node.
const BinaryName = layout.BinaryName

// LauncherName is the second entry a host archive may hold: the mesh-launcher built from the
// same tree, named as it is in ROOT/launchers/<v> on a node (decision 0014).
const LauncherName = "mesh-launcher"

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
	return pack(w, []packed{{BinaryName, bin, size}})
}

// PackWithLauncher writes a host archive holding bin (mesh-host), then launcher (mesh-launcher,
// launcherSize bytes), as Pack does: the same two binaries always give the same bytes.
func PackWithLauncher(w io.Writer, bin io.Reader, size int64, launcher io.Reader, launcherSize int64) error {
	return pack(w, []packed{{BinaryName, bin, size}, {LauncherName, launcher, launcherSize}})
}

type packed struct {
	name string
	r    io.Reader
	size int64
}

func pack(w io.Writer, files []packed) error {
	zw, err := newEncoder(w)
	if err != nil {
		return fmt.Errorf("pack: zstd: %w", err)
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     f.name,
			Mode:     Mode,
			Size:     f.size,
			ModTime:  time.Unix(0, 0), // fixed, so the same binary gives the same bytes
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			zw.Close()
			return fmt.Errorf("pack: %w", err)
		}
		n, err := io.Copy(tw, f.r)
		if err != nil {
			zw.Close()
			return fmt.Errorf("pack: copying %s: %w", f.name, err)
		}
		if n != f.size {
			zw.Close()
			return fmt.Errorf("pack: %s is %d bytes, expected %d (did it change while packing?)", f.name, n, f.size)
		}
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

// Extract reads a host archive from r and writes its binary to dir/mesh-host (dir must exist;
// the file must not). It refuses, wrapping ErrUnsafe: a first entry that is not a regular file
// named mesh-host (or ./mesh-host), a second that is not one named mesh-launcher, a third —
// directories, symlinks, hard links, devices, FIFOs, PAX global headers, absolute names, names
// with ".."; setuid, setgid or sticky modes; a binary larger than the limit; a decoded stream
// larger than the binaries plus tar framing, or a zstd window larger than the limit
// (decompression bombs); anything but zero padding after the tar end. A mesh-launcher entry is
// read through and not written (ExtractRelease writes it). It reads r to its end, so the zstd
// checksum is verified.
// A failure to write dir/mesh-host (a full disk, an I/O error) is the machine's, not the
// archive's: it is returned wrapping the *os.PathError, never ErrUnsafe.
// On error the caller removes dir; Extract may have left a partial file there.
func Extract(ctx context.Context, r io.Reader, dir string, lim Limits) (Binary, error) {
	rel, err := extract(ctx, r, dir, LauncherWant{}, lim, createFile)
	return rel.Host, err
}

// LauncherWant says what ExtractRelease does with a mesh-launcher entry.
type LauncherWant struct {
	// Dir, when set, is where the launcher is written, as Dir/mesh-launcher (Dir must exist,
	// the file must not); "" reads it through, hashing it, without writing it.
	Dir string
	// Size and Digest, required with Dir, are what the launcher must be (its manifest's): an
	// entry of another size is not written, and the bytes are verified while they are written.
	Size   int64
	Digest digest.Digest
}

// Release is what ExtractRelease read.
type Release struct {
	Host Binary
	// Launcher is the archive's mesh-launcher entry: nil when it holds none. Its Path is set
	// only when it was written to LauncherWant.Dir and matched the size and digest wanted.
	Launcher *Binary
	// LauncherErr says why a launcher asked for was not written or not kept (another size or
	// digest than wanted, a failed write); its partial file is removed. It is no fault of the
	// host binary, which was extracted whole.
	LauncherErr error
}

// ExtractRelease is Extract that also writes the archive's mesh-launcher, when it has one and
// want.Dir is set: the same strict reading, the same single pass over r.
func ExtractRelease(ctx context.Context, r io.Reader, dir string, want LauncherWant, lim Limits) (Release, error) {
	return extract(ctx, r, dir, want, lim, createFile)
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

func extract(ctx context.Context, r io.Reader, dir string, want LauncherWant, lim Limits, create func(string) (dest, error)) (Release, error) {
	lim = lim.withDefaults()
	zr, tr, capped, err := open(ctx, r, lim)
	if err != nil {
		return Release{}, err
	}
	defer zr.Close()
	if _, err := first(tr, lim); err != nil {
		return Release{}, err
	}
	out := filepath.Join(dir, BinaryName)
	f, err := create(out)
	if err != nil {
		return Release{}, fmt.Errorf("extract: %w", err)
	}
	h := sha256.New()
	n, err := writeEntry(f, out, io.MultiWriter(h), tr)
	if err != nil {
		return Release{}, err
	}
	rel := Release{Host: Binary{Path: out, Size: n, Digest: digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))}}
	next, err := tr.Next()
	switch {
	case err == nil:
		if err := checkLauncherEntry(next, lim); err != nil {
			return Release{}, err
		}
		// The second entry may be as large as the first: the cap grows by what it declares.
		capped.extend(next.Size + tarSlack)
		if err := readLauncher(&rel, tr, next, want, create); err != nil {
			return Release{}, err
		}
		third, err := tr.Next()
		switch {
		case err == nil:
			return Release{}, fmt.Errorf("%w: it holds a third entry (%q after %s and %s); a host archive holds %s, then at most %s",
				ErrUnsafe, third.Name, BinaryName, LauncherName, BinaryName, LauncherName)
		case !errors.Is(err, io.EOF):
			return Release{}, readErr(err)
		}
	case !errors.Is(err, io.EOF):
		return Release{}, readErr(err)
	}
	// After the tar end there may be only zero padding; reading to the end also makes the
	// zstd decoder check the frame checksum.
	if err := drainZeros(capped); err != nil {
		return Release{}, err
	}
	return rel, nil
}

// writeEntry copies the current entry of tr to f (at path), through also, then sets the mode,
// fsyncs and closes f. A write failure is the machine's (the *os.PathError), a read failure
// the archive's.
func writeEntry(f dest, path string, also io.Writer, tr io.Reader) (int64, error) {
	w := &WriteRecorder{W: f}
	n, err := io.Copy(io.MultiWriter(w, also), tr)
	if err != nil {
		f.Close()
		if w.Err != nil {
			return n, fmt.Errorf("extract: %w", w.Err)
		}
		return n, readErr(err)
	}
	if err := f.Chmod(Mode); err != nil {
		f.Close()
		return n, fmt.Errorf("extract: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return n, fmt.Errorf("extract: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return n, fmt.Errorf("extract: %w", err)
	}
	return n, nil
}

// readLauncher reads the mesh-launcher entry: written to want.Dir, verified while it is
// written, when asked and its size is the one wanted; otherwise read through and hashed. It
// fills rel.Launcher, and rel.LauncherErr with why a launcher asked for was not kept (the
// archive is still good); its error is a fault of the archive or of reading, which refuses the
// archive whole.
func readLauncher(rel *Release, tr io.Reader, hdr *tar.Header, want LauncherWant, create func(string) (dest, error)) error {
	h := sha256.New()
	sum := func(n int64) *Binary {
		return &Binary{Size: n, Digest: digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))}
	}
	discard := func(why error) error {
		n, err := io.Copy(h, tr)
		if err != nil {
			return readErr(err)
		}
		rel.Launcher, rel.LauncherErr = sum(n), why
		return nil
	}
	switch {
	case want.Dir == "":
		return discard(nil)
	case hdr.Size != want.Size:
		return discard(fmt.Errorf("the archive's %s is %d bytes, its manifest signed %d", LauncherName, hdr.Size, want.Size))
	case want.Digest.Validate() != nil:
		return discard(fmt.Errorf("no valid digest to verify %s against (%q)", LauncherName, string(want.Digest)))
	}
	out := filepath.Join(want.Dir, LauncherName)
	f, err := create(out)
	if err != nil {
		return discard(fmt.Errorf("write %s: %w", LauncherName, err))
	}
	v := want.Digest.Verifier()
	n, err := writeEntry(f, out, io.MultiWriter(h, v), tr)
	if err != nil {
		os.Remove(out)
		if errors.Is(err, ErrUnsafe) {
			return err
		}
		// A write that failed (a full disk) leaves the rest of the entry to read through; what
		// was hashed is not the whole entry, so no digest is said.
		if _, rerr := io.Copy(io.Discard, tr); rerr != nil {
			return readErr(rerr)
		}
		rel.Launcher, rel.LauncherErr = &Binary{Size: hdr.Size}, fmt.Errorf("write %s: %w", LauncherName, err)
		return nil
	}
	rel.Launcher = sum(n)
	if !v.Verified() {
		os.Remove(out)
		rel.LauncherErr = fmt.Errorf("the archive's %s is %s, its manifest signed %s", LauncherName, rel.Launcher.Digest, want.Digest)
		return nil
	}
	rel.Launcher.Path = out
	return nil
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
	return checkNamed(hdr, lim, BinaryName, "first")
}

// checkLauncherEntry checks an archive's second entry: the mesh-launcher, or nothing.
func checkLauncherEntry(hdr *tar.Header, lim Limits) error {
	return checkNamed(hdr, lim, LauncherName, "second")
}

func checkNamed(hdr *tar.Header, lim Limits, want, nth string) error {
	name := hdr.Name
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: entry %q %s; a host archive holds a regular file named %s, then at most one named %s",
			ErrUnsafe, name, fmt.Sprintf(format, args...), BinaryName, LauncherName)
	}
	if p := kindProblem(hdr, false); p != "" {
		return refuse("%s", p)
	}
	if name != want && name != "./"+want {
		if nth == "second" {
			return fmt.Errorf("%w: it holds more than one entry, and the second, %q, is not named %s; a host archive holds a regular file named %s, then at most one named %s",
				ErrUnsafe, name, LauncherName, BinaryName, LauncherName)
		}
		return refuse("is not named %s (the %s entry must be)", want, nth)
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

// extend allows n more bytes: a second entry, checked against the size limit, declares them.
func (c *capReader) extend(n int64) {
	c.left += n
	c.limit += n
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
