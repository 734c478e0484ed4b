// Package build makes a host release: the binaries, the reproducible archive and its signed
// manifest.
//
// It builds the mesh-host binary and the mesh-launcher from the same tree (or takes them built
// elsewhere), packs them into the reproducible host archive, and writes the signed manifest beside
// it — or signs an archive a release pipeline made, without repacking it. A release carrying its
// launcher is manifest schema 2; one without (NoLauncher, for hosts that read schema 1 only) is
// schema 1 (decision 0014).
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
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
)

// ManifestFile is the manifest's name in the output directory.
const ManifestFile = "manifest.json"

// HostPackage is the package built when no binary or archive is given.
const HostPackage = "./host/cmd/mesh-host"

// LauncherPackage is the package built when no launcher is given: the mesh-launcher of the
// same tree. It is built without a version stamp: the launcher has its own version, so an
// unchanged launcher is the same bytes in every release.
const LauncherPackage = "./launcher/cmd/mesh-launcher"

// LauncherVersionTimeout bounds `mesh-launcher version` when build asks a launcher its version.
const LauncherVersionTimeout = 10 * time.Second

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

	// Launcher packs this mesh-launcher instead of building LauncherPackage; NoLauncher packs
	// none (a schema 1 manifest, for a fleet whose hosts read schema 1 only). With Archive,
	// the launcher is the archive's own, if it has one.
	Launcher   string
	NoLauncher bool

	// Deltas are the releases to make deltas against (BaseFromDir, or a published version
	// read from the bus): the manifest lists them, schema 3 (decision 0028).
	Deltas []Base

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
	DeltaPaths   []string // one for each delta the manifest lists, in its order
}

// withDefaults returns o with every zero field at its default (decision 0041).
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
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
	if o.Launcher != "" && o.NoLauncher {
		return Result{}, errors.New("give --launcher or --no-launcher, not both")
	}
	if o.Archive != "" && o.Launcher != "" {
		return Result{}, errors.New("--archive is signed as it is, so --launcher cannot be added to it: pack mesh-launcher into the archive after mesh-host, or give --binary with --launcher")
	}
	if o.OutDir == "" {
		return Result{}, errors.New("no output directory given (-o DIR)")
	}
	o = o.withDefaults()
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
		m, tmp, err = packBinary(ctx, o.Binary, o)
	default:
		m, tmp, err = buildAndPack(ctx, o)
	}
	if err != nil {
		return Result{}, err
	}
	m.Schema = wire.ManifestSchema
	if m.HasLauncher() {
		m.Schema = wire.ManifestSchemaWithLauncher
	}
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
	if m, err = AddDeltas(ctx, o.OutDir, m, o.Deltas, o.Key, o.MaxBinary); err != nil {
		return Result{}, err
	}
	r := Result{Manifest: m, ArchivePath: ap, ManifestPath: mp}
	for _, d := range m.Deltas {
		r.DeltaPaths = append(r.DeltaPaths, filepath.Join(o.OutDir, d.Object))
	}
	return r, nil
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
	return packBinary(ctx, bin, o)
}

// packBinary packs bin, and the launcher Options name (built from the tree for bin's
// architecture unless one is given or none wanted), into a temporary archive in OutDir,
// hashing the binaries and the archive while they are copied.
func packBinary(ctx context.Context, bin string, o Options) (wire.Manifest, *atomicfile.File, error) {
	arch, err := archive.ArchOf(bin)
	if err != nil {
		return wire.Manifest{}, nil, err
	}
	f, size, err := openRegular(bin, "binary")
	if err != nil {
		return wire.Manifest{}, nil, err
	}
	defer f.Close()
	var (
		l      wire.ReleaseLauncher
		lf     *os.File
		lh     = sha256.New()
		launch = o.Launcher
	)
	if !o.NoLauncher {
		if launch == "" {
			dir, err := os.MkdirTemp(o.OutDir, ".build-launcher-*")
			if err != nil {
				return wire.Manifest{}, nil, err
			}
			defer os.RemoveAll(dir)
			launch = filepath.Join(dir, archive.LauncherName)
			if err := GoBuild(ctx, GoBuildOptions{Dir: o.SourceDir, Package: LauncherPackage, GOARCH: arch, Go: o.Go, Out: launch}); err != nil {
				return wire.Manifest{}, nil, err
			}
		}
		if l, err = describeLauncher(ctx, launch, arch); err != nil {
			return wire.Manifest{}, nil, err
		}
		if lf, l.Size, err = openRegular(launch, "launcher"); err != nil {
			return wire.Manifest{}, nil, err
		}
		defer lf.Close()
	}
	tmp, err := atomicfile.Create(o.OutDir, 0o644)
	if err != nil {
		return wire.Manifest{}, nil, fmt.Errorf("write the archive: %w", err)
	}
	bh, ah, n := sha256.New(), sha256.New(), &counter{}
	if lf == nil {
		err = archive.Pack(io.MultiWriter(tmp, ah, n), io.TeeReader(f, bh), size)
	} else {
		err = archive.PackWithLauncher(io.MultiWriter(tmp, ah, n), io.TeeReader(f, bh), size, io.TeeReader(lf, lh), l.Size)
	}
	if err != nil {
		tmp.Abort()
		return wire.Manifest{}, nil, fmt.Errorf("%s: %w", bin, err)
	}
	if lf != nil {
		// The digest is of the bytes packed, which the size check in Pack says were all of them.
		l.Digest = digest.NewDigestFromBytes(digest.SHA256, lh.Sum(nil))
	}
	return wire.Manifest{
		Arch:         arch,
		Size:         n.n,
		Digest:       digest.NewDigestFromBytes(digest.SHA256, ah.Sum(nil)),
		BinaryDigest: digest.NewDigestFromBytes(digest.SHA256, bh.Sum(nil)),
		Launcher:     l,
	}, tmp, nil
}

// openRegular opens a binary to pack (what names it in errors: "binary", "launcher") and
// returns its size.
func openRegular(path, what string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s %s is not a regular file", what, path)
	}
	return f, fi.Size(), nil
}

// describeLauncher checks that the launcher at path is a Linux executable for arch, as the host
// binary beside it is, and asks it its version.
func describeLauncher(ctx context.Context, path, arch string) (wire.ReleaseLauncher, error) {
	larch, err := archive.ArchOf(path)
	if err != nil {
		return wire.ReleaseLauncher{}, fmt.Errorf("launcher: %w", err)
	}
	if larch != arch {
		return wire.ReleaseLauncher{}, fmt.Errorf("launcher %s is built for %s but the host binary for %s; a release carries both for one architecture", path, larch, arch)
	}
	v, err := LauncherVersion(ctx, path)
	if err != nil {
		return wire.ReleaseLauncher{}, err
	}
	return wire.ReleaseLauncher{Version: v}, nil
}

// LauncherVersion runs `FILE version` — or, for a launcher older than that word, `FILE
// --version` — and returns the version it prints, which must be a semantic version. Each run
// is bounded by LauncherVersionTimeout and its output read to 4 KiB.
func LauncherVersion(ctx context.Context, path string) (string, error) {
	var errs []string
	for _, arg := range []string{"version", "--version"} {
		v, err := askVersion(ctx, path, arg)
		if err == nil {
			return v, nil
		}
		var exe *exec.Error
		if errors.As(err, &exe) || errors.Is(err, syscall.ENOEXEC) {
			return "", fmt.Errorf("launcher %s cannot be run on this machine (%s/%s) to tell its version: %w; build the release where it runs, or pass --no-launcher",
				path, runtime.GOOS, runtime.GOARCH, err)
		}
		errs = append(errs, fmt.Sprintf("`%s %s`: %v", archive.LauncherName, arg, err))
	}
	return "", fmt.Errorf("launcher %s does not tell its version: %s", path, strings.Join(errs, "; "))
}

func askVersion(ctx context.Context, path, arg string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, LauncherVersionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, arg)
	out := &capped{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = out, io.Discard
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("did not finish within %s", LauncherVersionTimeout)
		}
		return "", err
	}
	first, _, _ := strings.Cut(string(out.b), "\n")
	v := strings.TrimSpace(first)
	if !wire.ValidVersion(v) {
		return "", fmt.Errorf("printed %q, which is not %s", text.Bound(v), wire.VersionRule)
	}
	return v, nil
}

// capped keeps the first max bytes written to it.
type capped struct {
	b   []byte
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
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
	// The launcher, if the archive carries one, is written beside the binary to ask its version.
	ldir := filepath.Join(dir, "launcher")
	if err := os.Mkdir(ldir, 0o755); err != nil {
		tmp.Abort()
		return wire.Manifest{}, nil, err
	}
	rel, err := archive.ExtractRelease(ctx, tee, dir, archive.LauncherWant{}, archive.Limits{MaxBinary: o.MaxBinary})
	bin := rel.Host
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
	var l wire.ReleaseLauncher
	if rel.Launcher != nil {
		if o.NoLauncher {
			tmp.Abort()
			return wire.Manifest{}, nil, fmt.Errorf("%s carries %s, which --no-launcher would leave unsigned; repack it without, or drop --no-launcher", o.Archive, archive.LauncherName)
		}
		l, err = adoptLauncher(ctx, o.Archive, ldir, *rel.Launcher, arch, o.MaxBinary)
		if err != nil {
			tmp.Abort()
			return wire.Manifest{}, nil, err
		}
	}
	return wire.Manifest{Arch: arch, Size: n.n, Digest: digest.NewDigestFromBytes(digest.SHA256, ah.Sum(nil)), BinaryDigest: bin.Digest, Launcher: l}, tmp, nil
}

// adoptLauncher extracts the launcher an adopted archive carries (seen once as got) into dir,
// verified against what the first pass read, and asks it its version.
func adoptLauncher(ctx context.Context, path, dir string, got archive.Binary, arch string, maxBinary int64) (wire.ReleaseLauncher, error) {
	f, err := os.Open(path)
	if err != nil {
		return wire.ReleaseLauncher{}, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	hostDir, err := os.MkdirTemp(dir, "host-*")
	if err != nil {
		return wire.ReleaseLauncher{}, err
	}
	rel, err := archive.ExtractRelease(ctx, f, hostDir, archive.LauncherWant{Dir: dir, Size: got.Size, Digest: got.Digest}, archive.Limits{MaxBinary: maxBinary})
	if err == nil && rel.LauncherErr != nil {
		err = rel.LauncherErr
	}
	if err != nil {
		return wire.ReleaseLauncher{}, fmt.Errorf("%s: its %s: %w", path, archive.LauncherName, err)
	}
	l, err := describeLauncher(ctx, rel.Launcher.Path, arch)
	if err != nil {
		return wire.ReleaseLauncher{}, fmt.Errorf("%s: %w", path, err)
	}
	l.Digest, l.Size = got.Digest, got.Size
	return l, nil
}

// GoBuildOptions say how to build the host binary.
type GoBuildOptions struct {
	Dir     string // module root; default "."
	Package string // default HostPackage
	GOARCH  string // default runtime.GOARCH
	Go      string // default "go"
	Version string // stamped as main.version; "" stamps nothing (the launcher's own version)
	Out     string
}

// withDefaults returns o with every zero field at its default (decision 0041).
func (o GoBuildOptions) withDefaults() GoBuildOptions {
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
	return o
}

// GoBuild builds the host the way releases are built: static (CGO_ENABLED=0), for linux,
// stripped and with paths trimmed, so that the same source and toolchain give the same bytes:
//
//	CGO_ENABLED=0 GOOS=linux GOARCH=<arch> go build -trimpath -ldflags "-s -w -X main.version=<v>" -o OUT ./host/cmd/mesh-host
func GoBuild(ctx context.Context, o GoBuildOptions) error {
	o = o.withDefaults()
	ldflags := "-s -w"
	if o.Version != "" {
		ldflags += " -X main.version=" + o.Version
	}
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath", "-ldflags", ldflags, "-o", o.Out, o.Package)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+OS, "GOARCH="+o.GOARCH)
	out, err := cmd.CombinedOutput()
	if err != nil {
		instead := "--binary"
		if o.Package == LauncherPackage {
			instead = "--launcher FILE, or --no-launcher"
		}
		return fmt.Errorf("go build %s in %s failed (run from the repository root, or pass %s): %w\n%s",
			o.Package, o.Dir, instead, err, strings.TrimSpace(string(out)))
	}
	return nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
