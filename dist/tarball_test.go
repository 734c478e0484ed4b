package dist

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTarballHoldsBothBinariesTheUnitAReadmeAndTheInstaller(t *testing.T) {
	a := built(t)
	for _, p := range a.nodes {
		t.Run(p.deb, func(t *testing.T) {
			entries := readTarball(t, p.tarball)
			want := map[string]int64{
				p.topDir + "/":                      0o755,
				p.topDir + "/mesh-launcher":         0o755,
				p.topDir + "/mesh-host":             0o755,
				p.topDir + "/mesh-launcher.service": 0o644,
				p.topDir + "/README":                0o644,
				p.topDir + "/install.sh":            0o755,
			}
			for name, mode := range want {
				h, ok := entries[name]
				if !ok {
					t.Errorf("the tarball has no %s", name)
					continue
				}
				if h.Mode&0o7777 != mode {
					t.Errorf("%s has mode %o, want %o", name, h.Mode&0o7777, mode)
				}
				if h.Uid != 0 || h.Gid != 0 {
					t.Errorf("%s is owned by %d:%d, want 0:0 (an unpacking root keeps it)", name, h.Uid, h.Gid)
				}
			}
			for name := range entries {
				if _, ok := want[name]; !ok {
					t.Errorf("the tarball holds %s, which nothing asked for", name)
				}
			}
		})
	}
}

// readTarball lists a .tar.gz by name.
func readTarball(t *testing.T, path string) map[string]*tar.Header {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(zr)
	entries := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		entries[h.Name] = h
	}
}

// unpack extracts the tarball for this machine into a new temporary directory as `tar -xzf`
// would and returns the directory holding its files.
func unpack(t *testing.T, a artifacts) string {
	t.Helper()
	return unpackTarball(t, a.tarball, a.topDir)
}

// unpackTarball extracts tarball, whose top-level directory is top, into a new temporary
// directory and returns the directory holding its files.
func unpackTarball(t *testing.T, tarball, top string) string {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(dst, dir+string(filepath.Separator)) {
			t.Fatalf("the tarball's %s lands outside the directory it is unpacked in", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, os.FileMode(h.Mode&0o777)); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode&0o777))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("the tarball's %s is neither a file nor a directory", h.Name)
		}
	}
	return filepath.Join(dir, top)
}
