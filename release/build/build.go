// Package build makes a host release: it builds the mesh-host binary (or takes one built
// elsewhere), packs it into the reproducible host archive, and writes the signed manifest
// beside it — or signs an archive a release pipeline made, without repacking it.
package build

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
)

// ManifestFile is the manifest's name in the output directory.
const ManifestFile = "manifest.json"

// HostPackage is the package built when no binary or archive is given.
const HostPackage = "./host/cmd/mesh-host"

// OS is the only operating system hosts are released for.
const OS = "linux"

// Options say what to build. Version, Key and OutDir are required; at most one of Binary and
// Archive is set.
type Options struct {
	Version string             // vX.Y.Z, stamped into a built binary as main.version
	Key     ed25519.PrivateKey // the release key that signs the manifest
	OutDir  string             // where the archive and manifest.json are written (created if missing)

	Binary  string // pack this binary instead of building one
	Archive string // sign this archive as it is (validated with the strict extractor)

	SourceDir string           // module root to build HostPackage in; default "."
	GOARCH    string           // architecture to build for; default runtime.GOARCH
	Go        string           // the go command; default "go"
	Now       func() time.Time // the manifest's created time; default time.Now
	MaxBinary int64            // cap on the binary in an archive; default archive.DefaultMaxBinary
}

// Result is what Build wrote.
type Result struct {
	Manifest     wire.Manifest
	ArchivePath  string
	ManifestPath string
}

// Build makes the release Options describe and returns its manifest. The archive is named
// wire.ObjectName(version, "linux", arch), the architecture being read from the binary's ELF
// header; both files are written atomically.
func Build(ctx context.Context, o Options) (Result, error) {
	if !wire.ValidVersion(o.Version) {
		return Result{}, fmt.Errorf("version %q is not %s", o.Version, wire.VersionRule)
	}
	if len(o.Key) != ed25519.PrivateKeySize {
		return Result{}, errors.New("no release key given; make one with `mesh-release keygen` and pass --key")
	}
	if o.Binary != "" && o.Archive != "" {
		return Result{}, errors.New("give --binary or --archive, not both")
	}
	if o.OutDir == "" {
		return Result{}, errors.New("no output directory given (-o DIR)")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("output directory: %w", err)
	}
	var (
		m   wire.Manifest
		tmp *atomicfile.File
		err error
	)
	switch {
	case o.Archive != "":
		m, tmp, err = adoptArchive(ctx, o)
	case o.Binary != "":
		m, tmp, err = packBinary(o.Binary, o)
	default:
		m, tmp, err = buildAndPack(ctx, o)
	}
	if err != nil {
		return Result{}, err
	}
	m.Schema = wire.ManifestSchema
	m.Version = o.Version
	m.OS = OS
	m.Object = wire.ObjectName(m.Version, m.OS, m.Arch)
	m.Created = o.Now().UTC().Format(time.RFC3339)
	if err := m.Sign(o.Key); err != nil {
		tmp.Abort()
		return Result{}, err
	}
	ap := filepath.Join(o.OutDir, m.Object)
	if err := tmp.Commit(ap); err != nil {
		return Result{}, fmt.Errorf("write the archive: %w", err)
	}
	mp := filepath.Join(o.OutDir, ManifestFile)
	if err := atomicfile.WriteFile(mp, m.Marshal(), 0o644); err != nil {
		return Result{}, fmt.Errorf("write the manifest: %w", err)
	}
	return Result{Manifest: m, ArchivePath: ap, ManifestPath: mp}, nil
}

// buildAndPack builds HostPackage into a temporary directory and packs it.
func buildAndPack(ctx context.Context, o Options) (wire.Manifest, *atomicfile.File, error) {
	dir, err := os.MkdirTemp(o.OutDir, ".build-*")
	if err != nil {
		return wire.Manifest{}, nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, archive.BinaryName)
	if err := GoBuild(ctx, GoBuildOptions{Dir: o.SourceDir, GOARCH: o.GOARCH, Go: o.Go, Version: o.Version, Out: bin}); err != nil {
		return wire.Manifest{}, nil, err
	}
	return packBinary(bin, o)
}

// packBinary packs bin into a temporary archive in OutDir, hashing the binary and the archive
// while they are copied.
func packBinary(bin string, o Options) (wire.Manifest, *atomicfile.File, error) {
	arch, err := archive.ArchOf(bin)
	if err != nil {
		return wire.Manifest{}, nil, err
	}
	f, err := os.Open(bin)
	if err != nil {
		return wire.Manifest{}, nil, fmt.Errorf("binary: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return wire.Manifest{}, nil, fmt.Errorf("binary: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return wire.Manifest{}, nil, fmt.Errorf("binary %s is not a regular file", bin)
	}
	tmp, err := atomicfile.Create(o.OutDir, 0o644)
	if err != nil {
		return wire.Manifest{}, nil, fmt.Errorf("write the archive: %w", err)
	}
	bh, ah, n := sha256.New(), sha256.New(), &counter{}
	if err := archive.Pack(io.MultiWriter(tmp, ah, n), io.TeeReader(f, bh), fi.Size()); err != nil {
		tmp.Abort()
		return wire.Manifest{}, nil, fmt.Errorf("%s: %w", bin, err)
	}
	return wire.Manifest{
		Arch:         arch,
		Size:         n.n,
		Digest:       digest.NewDigestFromBytes(digest.SHA256, ah.Sum(nil)),
		BinaryDigest: digest.NewDigestFromBytes(digest.SHA256, bh.Sum(nil)),
	}, tmp, nil
}

// adoptArchive copies an archive made elsewhere into OutDir unchanged, extracting it with the
// strict extractor in the same pass to validate it and learn the binary's digest and
// architecture.
func adoptArchive(ctx context.Context, o Options) (wire.Manifest, *atomicfile.File, error) {
	f, err := os.Open(o.Archive)
	if err != nil {
		return wire.Manifest{}, nil, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	dir, err := os.MkdirTemp(o.OutDir, ".extract-*")
	if err != nil {
		return wire.Manifest{}, nil, err
	}
	defer os.RemoveAll(dir)
	tmp, err := atomicfile.Create(o.OutDir, 0o644)
	if err != nil {
		return wire.Manifest{}, nil, fmt.Errorf("write the archive: %w", err)
	}
	ah, n := sha256.New(), &counter{}
	tee := io.TeeReader(f, io.MultiWriter(tmp, ah, n))
	bin, err := archive.Extract(ctx, tee, dir, archive.Limits{MaxBinary: o.MaxBinary})
	if err == nil {
		_, err = io.Copy(io.Discard, tee) // the archive is copied whole, whatever the decoder left
	}
	if err != nil {
		tmp.Abort()
		return wire.Manifest{}, nil, fmt.Errorf("%s: %w", o.Archive, err)
	}
	arch, err := archive.ArchOf(bin.Path)
	if err != nil {
		tmp.Abort()
		return wire.Manifest{}, nil, fmt.Errorf("%s: %w", o.Archive, err)
	}
	return wire.Manifest{Arch: arch, Size: n.n, Digest: digest.NewDigestFromBytes(digest.SHA256, ah.Sum(nil)), BinaryDigest: bin.Digest}, tmp, nil
}

// GoBuildOptions say how to build the host binary.
type GoBuildOptions struct {
	Dir     string // module root; default "."
	Package string // default HostPackage
	GOARCH  string // default runtime.GOARCH
	Go      string // default "go"
	Version string // stamped as main.version
	Out     string
}

// GoBuild builds the host the way releases are built: static (CGO_ENABLED=0), for linux,
// stripped and with paths trimmed, so that the same source and toolchain give the same bytes:
//
//	CGO_ENABLED=0 GOOS=linux GOARCH=<arch> go build -trimpath -ldflags "-s -w -X main.version=<v>" -o OUT ./host/cmd/mesh-host
func GoBuild(ctx context.Context, o GoBuildOptions) error {
	if o.Dir == "" {
		o.Dir = "."
	}
	if o.Package == "" {
		o.Package = HostPackage
	}
	if o.GOARCH == "" {
		o.GOARCH = runtime.GOARCH
	}
	if o.Go == "" {
		o.Go = "go"
	}
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+o.Version, "-o", o.Out, o.Package)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+OS, "GOARCH="+o.GOARCH)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s in %s failed (run from the repository root, or pass --binary): %w\n%s",
			o.Package, o.Dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
