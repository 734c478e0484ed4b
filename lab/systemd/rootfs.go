package systemd

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/novox/mesh-host/internal/filelock"
)

// rootfsFormat changes when what the harness does to a built rootfs changes, so a cache entry
// made by an older harness is not reused.
const rootfsFormat = "1"

// RootfsSpec is everything a rootfs is built from; its Key names the cache entry.
type RootfsSpec struct {
	Suite   string
	Variant string
	Include []string
	Mirror  string
	Arch    string
}

// withDefaults returns s with every field left empty at the rootfs the issue proved by hand:
// bookworm minbase with systemd as init, D-Bus (systemctl needs it), ip and ps, from the
// machine's own Debian mirror (decision 0041: the zero spec is the default one).
func (s RootfsSpec) withDefaults() RootfsSpec {
	if s.Suite == "" {
		s.Suite = "bookworm"
	}
	if s.Variant == "" {
		s.Variant = "minbase"
	}
	if s.Include == nil {
		s.Include = []string{"systemd", "systemd-sysv", "dbus", "iproute2", "procps"}
	}
	if s.Mirror == "" {
		s.Mirror = DebianMirror()
	}
	if s.Arch == "" {
		s.Arch = runtime.GOARCH
	}
	return s
}

// Key is a short digest of the spec and the harness's rootfs format.
func (s RootfsSpec) Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "format=%s\nsuite=%s\nvariant=%s\ninclude=%s\nmirror=%s\narch=%s\n",
		rootfsFormat, s.Suite, s.Variant, strings.Join(s.Include, ","), s.Mirror, s.Arch)
	return s.Suite + "-" + s.Arch + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// DebianMirror is the first Debian mirror in /etc/apt/sources.list(.d) that serves the main
// archive (not -security, not -updates), or deb.debian.org when there is none: on the machines
// the lab runs on, the Debian mirror is the one network address outside the lab that answers.
func DebianMirror() string {
	files := []string{"/etc/apt/sources.list"}
	for _, pat := range []string{"/etc/apt/sources.list.d/*.sources", "/etc/apt/sources.list.d/*.list"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	for _, f := range files {
		if u := mirrorIn(f); u != "" {
			return u
		}
	}
	return "http://deb.debian.org/debian"
}

// mirrorIn reads one sources file in either format: one-line ("deb URI suite comp") or deb822
// ("URIs: …" in a stanza whose Types include deb).
func mirrorIn(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	debian := func(u string) bool {
		return strings.HasPrefix(u, "http") && strings.Contains(u, "debian") && !strings.Contains(u, "security")
	}
	sc := bufio.NewScanner(f)
	var uris []string
	deb := false
	flush := func() string {
		defer func() { uris, deb = nil, false }()
		if !deb {
			return ""
		}
		for _, u := range uris {
			if debian(u) {
				return strings.TrimSuffix(u, "/")
			}
		}
		return ""
	}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		fields := strings.Fields(line)
		switch {
		case line == "":
			if u := flush(); u != "" {
				return u
			}
		case strings.HasPrefix(line, "#"):
		case fields[0] == "deb" && len(fields) >= 3:
			u := fields[1]
			if strings.HasPrefix(u, "[") { // deb [options] URI suite …
				for i, fl := range fields {
					if strings.HasSuffix(fl, "]") && i+1 < len(fields) {
						u = fields[i+1]
						break
					}
				}
			}
			if debian(u) {
				return strings.TrimSuffix(u, "/")
			}
		case strings.EqualFold(fields[0], "Types:"):
			for _, t := range fields[1:] {
				deb = deb || t == "deb"
			}
		case strings.EqualFold(fields[0], "URIs:"):
			uris = append(uris, fields[1:]...)
		}
	}
	return flush()
}

// RootfsReport says what Rootfs did and how long it took.
type RootfsReport struct {
	Dir       string        // the extracted base, read-only by convention
	Archive   string        // the cached tar.zst
	Built     time.Duration // debootstrap and archiving; 0 when the archive was cached
	Extracted time.Duration // unpacking the archive; 0 when the extracted base was cached too
}

func (r RootfsReport) String() string {
	switch {
	case r.Built > 0:
		return fmt.Sprintf("rootfs built in %s (cold) → %s", r.Built.Round(time.Millisecond), r.Archive)
	case r.Extracted > 0:
		return fmt.Sprintf("rootfs extracted from cache in %s ← %s", r.Extracted.Round(time.Millisecond), r.Archive)
	}
	return "rootfs reused from cache: " + r.Dir
}

// DefaultCacheDir is $MESH_LAB_CACHE, else $XDG_CACHE_HOME/mesh-lab, else /var/cache/mesh-lab.
func DefaultCacheDir() string {
	if d := os.Getenv("MESH_LAB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "mesh-lab")
	}
	return "/var/cache/mesh-lab"
}

// Rootfs returns an extracted base built from spec, building and caching it when needed:
// CACHE/rootfs-KEY.tar.zst is the cache entry (portable, e.g. to a CI cache) and
// CACHE/rootfs-KEY/ its extraction, each made under a temp name and renamed into place. One
// builder at a time per key: the others wait on CACHE/rootfs-KEY.lock and then reuse its work.
func Rootfs(ctx context.Context, cacheDir string, spec RootfsSpec, logf func(string, ...any)) (RootfsReport, error) {
	key := spec.Key()
	rep := RootfsReport{
		Dir:     filepath.Join(cacheDir, "rootfs-"+key),
		Archive: filepath.Join(cacheDir, "rootfs-"+key+".tar.zst"),
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return rep, fmt.Errorf("rootfs cache %s: %w", cacheDir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, "rootfs-"+key+".lock"))
	if err != nil {
		return rep, err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(rep.Dir, "etc", "os-release")); err == nil {
		return rep, nil
	}
	tmp, err := os.MkdirTemp(cacheDir, ".tmp-rootfs-"+key+"-")
	if err != nil {
		return rep, fmt.Errorf("rootfs cache %s: %w", cacheDir, err)
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if _, err := os.Stat(rep.Archive); err == nil {
		start := time.Now()
		if err := unpack(ctx, rep.Archive, root); err != nil {
			return rep, err
		}
		rep.Extracted = time.Since(start)
	} else {
		start := time.Now()
		logf("building rootfs %s with debootstrap from %s (about a minute, once per cache)", key, spec.Mirror)
		if err := debootstrap(ctx, spec, root); err != nil {
			return rep, err
		}
		if err := pack(ctx, root, rep.Archive); err != nil {
			return rep, err
		}
		rep.Built = time.Since(start)
	}
	if err := os.Rename(root, rep.Dir); err != nil {
		return rep, fmt.Errorf("rootfs: placing %s: %w", rep.Dir, err)
	}
	return rep, nil
}

func debootstrap(ctx context.Context, spec RootfsSpec, dir string) error {
	args := []string{"--variant=" + spec.Variant, "--arch=" + debArch(spec.Arch)}
	if len(spec.Include) > 0 {
		args = append(args, "--include="+strings.Join(spec.Include, ","))
	}
	args = append(args, spec.Suite, dir, spec.Mirror)
	out, err := exec.CommandContext(ctx, "debootstrap", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("debootstrap %s: %w\n%s", strings.Join(args, " "), err, tail(out, 40))
	}
	// Each node gets its own machine-id in its layer; the base has none, so one that is
	// forgotten shows as a first boot rather than as a clone of another node.
	if err := os.WriteFile(filepath.Join(dir, "etc", "machine-id"), nil, 0o444); err != nil {
		return fmt.Errorf("rootfs: clearing machine-id: %w", err)
	}
	return nil
}

// debArch maps GOARCH to Debian's architecture names where they differ.
func debArch(goarch string) string {
	switch goarch {
	case "386":
		return "i386"
	case "arm":
		return "armhf"
	}
	return goarch
}

// tarFlags keep what a root filesystem needs: owners by number, modes, xattrs (file capabilities).
var tarFlags = []string{"--numeric-owner", "--xattrs", "--xattrs-include=*"}

// pack writes dir as a tar.zst at dst: tar for the filesystem's semantics, zstd in-process,
// a temp file fsynced and renamed so a cache entry is whole or absent.
func pack(ctx context.Context, dir, dst string) error {
	f, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst)+"-")
	if err != nil {
		return fmt.Errorf("rootfs archive: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("rootfs archive: %w", err)
	}
	zw, err := zstd.NewWriter(f)
	if err != nil {
		return fmt.Errorf("rootfs archive: %w", err)
	}
	cmd := exec.CommandContext(ctx, "tar", append(append([]string{"-C", dir}, tarFlags...), "-cpf", "-", ".")...)
	cmd.Stdout = zw
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("rootfs archive: tar: %w\n%s", err, stderr.String())
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("rootfs archive: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("rootfs archive: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("rootfs archive: %w", err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("rootfs archive: %w", err)
	}
	return syncDir(filepath.Dir(dst))
}

func unpack(ctx context.Context, src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("rootfs archive: %w", err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		return fmt.Errorf("rootfs archive %s: %w", src, err)
	}
	defer zr.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	cmd := exec.CommandContext(ctx, "tar", append(append([]string{"-C", dir}, tarFlags...), "-xpf", "-")...)
	cmd.Stdin = zr
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rootfs archive %s: unpacking (delete it to rebuild): %w\n%s", src, err, out)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockFile takes the exclusive lock on path (internal/filelock), waiting until ctx ends.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("rootfs lock: %w", err)
	}
	if err := filelock.Wait(ctx, f, 200*time.Millisecond); err != nil {
		f.Close()
		if errors.Is(err, filelock.ErrBusy) {
			return nil, fmt.Errorf("rootfs lock %s: waiting for another build: %w", path, ctx.Err())
		}
		return nil, fmt.Errorf("rootfs lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// tail is the last n lines of out, for errors an operator reads.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
