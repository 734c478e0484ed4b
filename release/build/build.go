// Package build makes a host release: each platform's binaries, archive and launcher object, and
// the signed manifest.
//
// It builds the mesh-host binary and the mesh-launcher for every platform asked from the same
// tree (or takes one platform's built elsewhere), packs each host binary alone into its
// reproducible archive, compresses each launcher into an object of its own, and writes the
// signed manifest of schema 4 beside them (decision 0044) — or signs one platform's archive a
// release pipeline made, without repacking it.
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
	"slices"
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
// unchanged launcher is the same bytes, and the same object, in every release.
const LauncherPackage = "./launcher/cmd/mesh-launcher"

// LauncherVersionTimeout bounds `mesh-launcher version` when build asks a launcher its version.
const LauncherVersionTimeout = 10 * time.Second

// OS is the only operating system hosts are released for.
const OS = "linux"

// Options say what to build. Version, Key and OutDir are required; at most one of Binary and
// Archive is set, and with either, at most one platform.
type Options struct {
	Version string             // vX.Y.Z, stamped into a built binary as main.version
	Key     ed25519.PrivateKey // the release key that signs the manifest
	// MoreKeys each add their signature after Key's, for a root whose releases role needs two
	// or more (decision 0045); without them the manifest carries Key's alone, as before roots.
	MoreKeys []ed25519.PrivateKey
	OutDir   string // where the objects and manifest.json are written (created if missing)

	// Platforms are the platforms to build for (default wire.DefaultPlatforms). With Binary or
	// Archive there is one: the one given, else the binary's own (linux and its ELF
	// architecture, arm taken as arm/v7).
	Platforms []wire.Platform

	Binary  string // pack this binary instead of building one
	Archive string // sign this archive (mesh-host alone) as it is, validated with the strict extractor

	// Launcher is this mesh-launcher instead of building LauncherPackage; NoLauncher names
	// none. With Archive, only a Launcher given is named.
	Launcher   string
	NoLauncher bool

	// Deltas are the releases (and launchers) to make deltas against (BaseFromDir, or a
	// published version read from the bus): each platform's entry lists those of its platform.
	Deltas []Base

	SourceDir string           // module root to build in; default "."
	Go        string           // the go command; default "go"
	Now       func() time.Time // the manifest's created time; default time.Now
	MaxBinary int64            // cap on the binary in an archive; default archive.DefaultMaxBinary

	// HostPackage and LauncherPackage are the packages built (default HostPackage and
	// LauncherPackage): the tests build small stand-ins.
	HostPackage, LauncherPackage string
}

// Result is what Build wrote.
type Result struct {
	Manifest     wire.Manifest
	ManifestPath string
	// Paths are the files the manifest names, each platform's in its order: its archive, its
	// host deltas, its launcher object, its launcher deltas.
	Paths []string
}

// withDefaults returns o with every zero field at its default (decision 0041).
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HostPackage == "" {
		o.HostPackage = HostPackage
	}
	if o.LauncherPackage == "" {
		o.LauncherPackage = LauncherPackage
	}
	return o
}

// check refuses options that contradict each other, before anything is built.
func (o Options) check() error {
	if !wire.ValidVersion(o.Version) {
		return fmt.Errorf("version %q is not %s", text.Bound(o.Version), wire.VersionRule)
	}
	if len(o.Key) != ed25519.PrivateKeySize {
		return errors.New("no release key given; make one with `mesh-release keygen` and pass --key")
	}
	if o.Binary != "" && o.Archive != "" {
		return errors.New("give --binary or --archive, not both")
	}
	if o.Launcher != "" && o.NoLauncher {
		return errors.New("give --launcher or --no-launcher, not both")
	}
	if o.OutDir == "" {
		return errors.New("no output directory given (-o DIR)")
	}
	if len(o.Platforms) > wire.MaxPlatforms {
		return fmt.Errorf("%d platforms asked; at most %d", len(o.Platforms), wire.MaxPlatforms)
	}
	for i, p := range o.Platforms {
		if p.OS != OS {
			return fmt.Errorf("platform %s: hosts are released for %s only", p, OS)
		}
		if slices.Contains(o.Platforms[:i], p) {
			return fmt.Errorf("platform %s is named twice", p)
		}
	}
	given := o.Binary != "" || o.Archive != "" || o.Launcher != ""
	if given && len(o.Platforms) > 1 {
		return fmt.Errorf("--binary, --archive and --launcher are one platform's files, and %d platforms are asked (%s); build them from the tree, or name one platform", len(o.Platforms), platformList(o.Platforms))
	}
	return nil
}

// Build makes the release Options describe and returns its manifest: for each platform the
// archive wire.PlatformObjectName and the launcher object wire.LauncherObjectName, then
// manifest.json, signed. Every file is written atomically, and none is written unless every
// platform built.
func Build(ctx context.Context, o Options) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	o = o.withDefaults()
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("output directory: %w", err)
	}
	work, err := os.MkdirTemp(o.OutDir, ".build-*")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)
	srcs, err := o.sources(ctx, work)
	if err != nil {
		return Result{}, err
	}
	var st staged
	defer st.abort()
	m := wire.Manifest{Schema: wire.ManifestSchemaPlatforms, Version: o.Version, Created: o.Now().UTC().Format(time.RFC3339)}
	for _, s := range srcs {
		pb, err := o.platformBuild(ctx, &st, work, s)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", s.platform, err)
		}
		m.Platforms = append(m.Platforms, pb)
	}
	slices.SortFunc(m.Platforms, func(a, b wire.PlatformBuild) int { return strings.Compare(a.Platform, b.Platform) })
	if err := o.sign(&m); err != nil {
		return Result{}, err
	}
	if err := st.commit(o.OutDir); err != nil {
		return Result{}, err
	}
	mp := filepath.Join(o.OutDir, ManifestFile)
	if err := atomicfile.WriteFile(mp, m.Marshal(), 0o644); err != nil {
		return Result{}, fmt.Errorf("write the manifest: %w", err)
	}
	if m, err = AddDeltas(ctx, o.OutDir, m, o.Deltas, o.Key, o.MaxBinary); err != nil {
		return Result{}, err
	}
	if len(o.Deltas) > 0 && len(o.MoreKeys) > 0 {
		// AddDeltas signed the manifest listing them with Key alone: the others sign it again.
		if err := o.sign(&m); err != nil {
			return Result{}, err
		}
		if err := atomicfile.WriteFile(mp, m.Marshal(), 0o644); err != nil {
			return Result{}, fmt.Errorf("write the manifest: %w", err)
		}
	}
	return Result{Manifest: m, ManifestPath: mp, Paths: ObjectPaths(o.OutDir, m)}, nil
}

// ObjectPaths are the files in dir that m names, each platform's in its order: the archive,
// the host deltas, the launcher object, the launcher deltas (schema 1–3: the archive, then
// the deltas).
func ObjectPaths(dir string, m wire.Manifest) []string {
	var out []string
	add := func(name string) { out = append(out, filepath.Join(dir, name)) }
	if m.Schema != wire.ManifestSchemaPlatforms {
		add(m.Object)
		for _, d := range m.Deltas {
			add(d.Object)
		}
		return out
	}
	for _, pb := range m.Platforms {
		add(pb.Object)
		for _, d := range pb.Deltas {
			add(d.Object)
		}
		if !pb.Launcher.IsZero() {
			add(pb.Launcher.Object)
			for _, d := range pb.Launcher.Deltas {
				add(d.Object)
			}
		}
	}
	return out
}

// source is where one platform's files come from: a host binary (built or given) or an
// archive, and a launcher binary ("" for none) of version launcherVersion once known.
type source struct {
	platform        wire.Platform
	host, archive   string
	launcher        string
	launcherVersion string
}

// sources resolves the platforms and builds from the tree what was not given, into work.
func (o Options) sources(ctx context.Context, work string) ([]source, error) {
	platforms := o.Platforms
	if o.Binary != "" || o.Archive != "" {
		var err error
		if platforms, err = o.givenPlatform(ctx, work); err != nil {
			return nil, err
		}
	} else if len(platforms) == 0 {
		var err error
		if platforms, err = wire.ParsePlatforms(wire.DefaultPlatforms); err != nil {
			return nil, err
		}
	}
	srcs := make([]source, len(platforms))
	for i, p := range platforms {
		s := source{platform: p, host: o.Binary, archive: o.Archive, launcher: o.Launcher}
		if s.host == "" && s.archive == "" {
			s.host = filepath.Join(work, "mesh-host-"+p.Slug())
			if err := GoBuild(ctx, o.goBuild(p, o.HostPackage, o.Version, s.host)); err != nil {
				return nil, err
			}
		}
		if s.launcher == "" && !o.NoLauncher && o.Archive == "" {
			s.launcher = filepath.Join(work, "mesh-launcher-"+p.Slug())
			if err := GoBuild(ctx, o.goBuild(p, o.LauncherPackage, "", s.launcher)); err != nil {
				return nil, err
			}
		}
		srcs[i] = s
	}
	return srcs, o.launcherVersions(ctx, work, srcs)
}

// givenPlatform is the one platform of a given binary or archive: the one asked, which its
// ELF architecture must match, else the binary's own.
func (o Options) givenPlatform(ctx context.Context, work string) ([]wire.Platform, error) {
	bin := o.Binary
	if o.Archive != "" {
		// The archive's binary is read here once to learn its architecture; platformBuild
		// reads it again as it copies it.
		dir, err := os.MkdirTemp(work, "peek-*")
		if err != nil {
			return nil, err
		}
		f, err := os.Open(o.Archive)
		if err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
		rel, err := archive.ExtractRelease(ctx, f, dir, archive.LauncherWant{}, archive.Limits{MaxBinary: o.MaxBinary})
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.Archive, err)
		}
		bin = rel.Host.Path
	}
	arch, err := archive.ArchOf(bin)
	if err != nil {
		if o.Archive != "" {
			return nil, fmt.Errorf("%s: %w", o.Archive, err)
		}
		return nil, err
	}
	if len(o.Platforms) == 1 {
		if p := o.Platforms[0]; p.Arch != arch {
			return nil, fmt.Errorf("the binary is built for %s, and the platform asked is %s", arch, p)
		}
		return o.Platforms, nil
	}
	return []wire.Platform{wire.NodePlatform(OS, arch, "")}, nil
}

// goBuild is how pkg is built for p.
func (o Options) goBuild(p wire.Platform, pkg, version, out string) GoBuildOptions {
	return GoBuildOptions{Dir: o.SourceDir, Package: pkg, GOARCH: p.Arch, GOARM: goarm(p), Go: o.Go, Version: version, Out: out}
}

// goarm is GOARM for an arm platform's variant (v7 → 7), "" otherwise.
func goarm(p wire.Platform) string {
	if p.Arch != "arm" {
		return ""
	}
	return strings.TrimPrefix(p.Variant, "v")
}

// launcherVersions asks each launcher its version. The launchers built from the tree are one
// source, so one answer serves them all: the one built for this machine is asked, or, when no
// platform is this machine's, one built for it to ask — no emulator needed.
func (o Options) launcherVersions(ctx context.Context, work string, srcs []source) error {
	if o.Launcher != "" {
		for i := range srcs {
			if err := checkArch(srcs[i].launcher, "launcher", srcs[i].platform); err != nil {
				return err
			}
			v, err := LauncherVersion(ctx, srcs[i].launcher)
			if err != nil {
				return err
			}
			srcs[i].launcherVersion = v
		}
		return nil
	}
	if o.NoLauncher || o.Archive != "" || len(srcs) == 0 {
		return nil
	}
	ask := ""
	for _, s := range srcs {
		if s.platform.OS == runtime.GOOS && s.platform.Arch == runtime.GOARCH {
			ask = s.launcher
		}
	}
	if ask == "" {
		ask = filepath.Join(work, "mesh-launcher-native")
		if err := GoBuild(ctx, GoBuildOptions{Dir: o.SourceDir, Package: o.LauncherPackage, Go: o.Go, Out: ask}); err != nil {
			return err
		}
	}
	v, err := LauncherVersion(ctx, ask)
	if err != nil {
		return err
	}
	for i := range srcs {
		srcs[i].launcherVersion = v
	}
	return nil
}

// checkArch refuses a binary (what: "binary", "launcher") not built for p's architecture.
func checkArch(path, what string, p wire.Platform) error {
	arch, err := archive.ArchOf(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if arch != p.Arch {
		return fmt.Errorf("%s %s is built for %s but the release is for %s; a platform's build carries binaries of its architecture", what, path, arch, p)
	}
	return nil
}

// platformBuild packs (or adopts) one platform's host archive and compresses its launcher,
// staging both in st, and describes them.
func (o Options) platformBuild(ctx context.Context, st *staged, work string, s source) (wire.PlatformBuild, error) {
	pb := wire.PlatformBuild{Platform: s.platform.String(), Object: wire.PlatformObjectName(o.Version, s.platform)}
	var err error
	if s.archive != "" {
		err = o.adoptArchive(ctx, st, work, s.archive, &pb)
	} else {
		err = o.packHost(st, s.host, s.platform, &pb)
	}
	if err != nil {
		return wire.PlatformBuild{}, err
	}
	if s.launcher == "" {
		return pb, nil
	}
	if pb.Launcher, err = packLauncher(st, o.OutDir, s.launcher, s.launcherVersion, s.platform); err != nil {
		return wire.PlatformBuild{}, err
	}
	return pb, nil
}

// packHost packs the host binary alone into a staged archive, hashing the binary and the
// archive while they are copied.
func (o Options) packHost(st *staged, bin string, p wire.Platform, pb *wire.PlatformBuild) error {
	if err := checkArch(bin, "binary", p); err != nil {
		return err
	}
	f, size, err := openRegular(bin, "binary")
	if err != nil {
		return err
	}
	defer f.Close()
	tmp, err := st.create(o.OutDir, pb.Object)
	if err != nil {
		return fmt.Errorf("write the archive: %w", err)
	}
	bh, ah, n := sha256.New(), sha256.New(), &counter{}
	if err := archive.Pack(io.MultiWriter(tmp, ah, n), io.TeeReader(f, bh), size); err != nil {
		return fmt.Errorf("%s: %w", bin, err)
	}
	pb.Size = n.n
	pb.Digest = digest.NewDigestFromBytes(digest.SHA256, ah.Sum(nil))
	pb.BinaryDigest = digest.NewDigestFromBytes(digest.SHA256, bh.Sum(nil))
	return nil
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

// adoptArchive copies an archive made elsewhere into a staged file unchanged, extracting it
// with the strict extractor in the same pass to validate it and learn the binary's digest. A
// schema 4 archive holds mesh-host alone: one carrying a launcher is refused.
func (o Options) adoptArchive(ctx context.Context, st *staged, work, path string, pb *wire.PlatformBuild) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	dir, err := os.MkdirTemp(work, "extract-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tmp, err := st.create(o.OutDir, pb.Object)
	if err != nil {
		return fmt.Errorf("write the archive: %w", err)
	}
	ah, n := sha256.New(), &counter{}
	tee := io.TeeReader(f, io.MultiWriter(tmp, ah, n))
	rel, err := archive.ExtractRelease(ctx, tee, dir, archive.LauncherWant{}, archive.Limits{MaxBinary: o.MaxBinary})
	if err == nil {
		_, err = io.Copy(io.Discard, tee) // the archive is copied whole, whatever the decoder left
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if rel.Launcher != nil {
		return fmt.Errorf("%s carries %s; a release's archive holds mesh-host alone and the launcher is its own object: repack it without, and give the launcher with --launcher FILE", path, archive.LauncherName)
	}
	pb.Size = n.n
	pb.Digest = digest.NewDigestFromBytes(digest.SHA256, ah.Sum(nil))
	pb.BinaryDigest = rel.Host.Digest
	return nil
}

// GoBuildOptions say how to build the host binary.
type GoBuildOptions struct {
	Dir     string // module root; default "."
	Package string // default HostPackage
	GOARCH  string // default runtime.GOARCH
	GOARM   string // for GOARCH arm: the variant's number (7 for arm/v7); "" is Go's default
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
//	CGO_ENABLED=0 GOOS=linux GOARCH=<arch> [GOARM=<n>] go build -trimpath -ldflags "-s -w -X main.version=<v>" -o OUT ./host/cmd/mesh-host
func GoBuild(ctx context.Context, o GoBuildOptions) error {
	o = o.withDefaults()
	ldflags := "-s -w"
	if o.Version != "" {
		ldflags += " -X main.version=" + o.Version
	}
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath", "-ldflags", ldflags, "-o", o.Out, o.Package)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+OS, "GOARCH="+o.GOARCH)
	if o.GOARM != "" {
		cmd.Env = append(cmd.Env, "GOARM="+o.GOARM)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		instead := "--binary"
		if o.Package == LauncherPackage {
			instead = "--launcher FILE, or --no-launcher"
		}
		target := o.GOARCH
		if o.GOARM != "" {
			target += " GOARM=" + o.GOARM
		}
		return fmt.Errorf("go build %s for %s in %s failed (run from the repository root, or pass %s): %w\n%s",
			o.Package, target, o.Dir, instead, err, strings.TrimSpace(string(out)))
	}
	return nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// platformList is the platforms as the flag takes them: linux/amd64,linux/arm64.
func platformList(ps []wire.Platform) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// sign signs m with Key, then adds the signature of each of MoreKeys.
func (o Options) sign(m *wire.Manifest) error {
	if err := m.Sign(o.Key); err != nil {
		return err
	}
	for _, k := range o.MoreKeys {
		if err := m.AddSignature(k); err != nil {
			return err
		}
	}
	return nil
}
