package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire/meshtest"
)

var (
	binaryFixture   = []byte("#!/bin/sh\necho v1.0.0\n")
	launcherFixture = []byte("#!/bin/sh\necho v0.3.0\n")
)

func packWithLauncher(t testing.TB) []byte {
	t.Helper()
	var a bytes.Buffer
	if err := PackWithLauncher(&a, bytes.NewReader(binaryFixture), int64(len(binaryFixture)), bytes.NewReader(launcherFixture), int64(len(launcherFixture))); err != nil {
		t.Fatal(err)
	}
	return a.Bytes()
}

func TestPackWithLauncherThenExtractReleaseWritesBoth(t *testing.T) {
	a := packWithLauncher(t)
	dir, ldir := t.TempDir(), t.TempDir()
	want := LauncherWant{Dir: ldir, Size: int64(len(launcherFixture)), Digest: digest.FromBytes(launcherFixture)}
	rel, err := ExtractRelease(context.Background(), bytes.NewReader(a), dir, want, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if rel.Host.Digest != digest.FromBytes(binaryFixture) || rel.LauncherErr != nil || rel.Launcher == nil {
		t.Fatalf("got %+v", rel)
	}
	if rel.Launcher.Digest != want.Digest || rel.Launcher.Size != want.Size || rel.Launcher.Path != filepath.Join(ldir, LauncherName) {
		t.Fatalf("launcher %+v, want %+v", rel.Launcher, want)
	}
	for path, body := range map[string][]byte{filepath.Join(dir, BinaryName): binaryFixture, rel.Launcher.Path: launcherFixture} {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(b, body) {
			t.Fatalf("%s: %q, %v", path, b, err)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != Mode {
			t.Fatalf("%s: mode %v", path, fi.Mode().Perm())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the host's directory holds %d entries; the launcher goes to its own", len(ents))
	}
}

func TestExtractReadsThroughALauncherItIsNotAskedToWrite(t *testing.T) {
	dir := t.TempDir()
	rel, err := ExtractRelease(context.Background(), bytes.NewReader(packWithLauncher(t)), dir, LauncherWant{}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if rel.Launcher == nil || rel.Launcher.Path != "" || rel.Launcher.Digest != digest.FromBytes(launcherFixture) {
		t.Fatalf("launcher %+v: want it hashed, not written", rel.Launcher)
	}
	if _, err := Extract(context.Background(), bytes.NewReader(packWithLauncher(t)), t.TempDir(), Limits{}); err != nil {
		t.Fatalf("Extract of an archive carrying a launcher: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != BinaryName {
		t.Fatalf("extract wrote %v", ents)
	}
}

func TestExtractReleaseKeepsTheHostWhenTheLauncherIsNotTheOneSigned(t *testing.T) {
	good := LauncherWant{Size: int64(len(launcherFixture)), Digest: digest.FromBytes(launcherFixture)}
	for _, c := range []struct {
		name string
		edit func(*LauncherWant)
		want string
	}{
		{"another digest", func(w *LauncherWant) { w.Digest = digest.FromString("other") }, "manifest signed sha256:"},
		{"another size", func(w *LauncherWant) { w.Size++ }, "bytes, its manifest signed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := good
			w.Dir = t.TempDir()
			c.edit(&w)
			dir := t.TempDir()
			rel, err := ExtractRelease(context.Background(), bytes.NewReader(packWithLauncher(t)), dir, w, Limits{})
			if err != nil {
				t.Fatalf("the archive was refused for its launcher: %v", err)
			}
			if rel.LauncherErr == nil || !strings.Contains(rel.LauncherErr.Error(), c.want) {
				t.Fatalf("launcher error %v, want one saying %q", rel.LauncherErr, c.want)
			}
			if ents, _ := os.ReadDir(w.Dir); len(ents) != 0 {
				t.Fatalf("a launcher that does not match left %v", ents)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, BinaryName)); !bytes.Equal(b, binaryFixture) {
				t.Fatal("the host binary was not extracted whole")
			}
		})
	}
}

func TestPackWithLauncherIsReproducible(t *testing.T) {
	if d0, d1 := digest.FromBytes(packWithLauncher(t)), digest.FromBytes(packWithLauncher(t)); d0 != d1 {
		t.Fatalf("two packs of the same binaries differ: %s, %s", d0, d1)
	}
}

func TestPackThenExtractGivesTheBinaryBack(t *testing.T) {
	var a bytes.Buffer
	if err := Pack(&a, bytes.NewReader(binaryFixture), int64(len(binaryFixture))); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	got, err := Extract(context.Background(), bytes.NewReader(a.Bytes()), dir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != digest.FromBytes(binaryFixture) || got.Size != int64(len(binaryFixture)) {
		t.Fatalf("got %+v, want digest %s", got, digest.FromBytes(binaryFixture))
	}
	b, err := os.ReadFile(filepath.Join(dir, BinaryName))
	if err != nil || !bytes.Equal(b, binaryFixture) {
		t.Fatalf("extracted %q, %v", b, err)
	}
	fi, _ := os.Stat(got.Path)
	if fi.Mode().Perm() != Mode {
		t.Fatalf("mode %v, want %v", fi.Mode().Perm(), os.FileMode(Mode))
	}
}

func TestPackIsReproducible(t *testing.T) {
	big := bytes.Repeat([]byte("mesh-host reproducible "), 1<<16)
	var d [2]digest.Digest
	for i := range d {
		var a bytes.Buffer
		if err := Pack(&a, bytes.NewReader(big), int64(len(big))); err != nil {
			t.Fatal(err)
		}
		d[i] = digest.FromBytes(a.Bytes())
	}
	if d[0] != d[1] {
		t.Fatalf("two packs of the same binary differ: %s, %s", d[0], d[1])
	}
}

func TestPackRefusesABinaryThatChangedSize(t *testing.T) {
	var a bytes.Buffer
	if err := Pack(&a, bytes.NewReader(binaryFixture), int64(len(binaryFixture))+1); err == nil {
		t.Fatal("packed a short binary")
	}
}

func TestExtractAcceptsDotSlashName(t *testing.T) {
	a := meshtest.Archive([]meshtest.Entry{meshtest.File("./mesh-host", binaryFixture)}, nil)
	if _, err := Extract(context.Background(), bytes.NewReader(a), t.TempDir(), Limits{}); err != nil {
		t.Fatal(err)
	}
}

func TestExtractRefuses(t *testing.T) {
	small := Limits{MaxBinary: 1 << 20}
	cases := []struct {
		name string
		arch []byte
		lim  Limits
		want string
	}{
		{"TestExtractRefusesArchiveWithDotDot",
			meshtest.Archive([]meshtest.Entry{meshtest.File("../mesh-host", binaryFixture)}, nil), Limits{}, "escapes"},
		{"TestExtractRefusesArchiveWithNestedDotDot",
			meshtest.Archive([]meshtest.Entry{meshtest.File("a/../../mesh-host", binaryFixture)}, nil), Limits{}, "escapes"},
		{"TestExtractRefusesArchiveWithAbsolutePath",
			meshtest.Archive([]meshtest.Entry{meshtest.File("/usr/bin/mesh-host", binaryFixture)}, nil), Limits{}, "absolute path"},
		{"TestExtractRefusesArchiveWithSymlink",
			meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "mesh-host", Linkname: "/bin/sh", Mode: 0o777}}}, nil), Limits{}, "symlink"},
		{"TestExtractRefusesArchiveWithHardLink",
			meshtest.Archive([]meshtest.Entry{meshtest.File("x", binaryFixture), {Header: tar.Header{Typeflag: tar.TypeLink, Name: "mesh-host", Linkname: "x"}}}, nil), Limits{}, "not named"},
		{"TestExtractRefusesArchiveWithOnlyAHardLink",
			meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeLink, Name: "mesh-host", Linkname: "/etc/shadow"}}}, nil), Limits{}, "hard link"},
		{"TestExtractRefusesArchiveWithCharDevice",
			meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeChar, Name: "mesh-host", Devmajor: 1, Devminor: 3, Mode: 0o666}}}, nil), Limits{}, "device"},
		{"TestExtractRefusesArchiveWithBlockDevice",
			meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeBlock, Name: "mesh-host", Devmajor: 8, Mode: 0o666}}}, nil), Limits{}, "device"},
		{"TestExtractRefusesArchiveWithFIFO",
			meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeFifo, Name: "mesh-host", Mode: 0o666}}}, nil), Limits{}, "FIFO"},
		{"TestExtractRefusesArchiveWithDirectory",
			meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755}}, meshtest.File("./mesh-host", binaryFixture)}, nil), Limits{}, "directory"},
		{"TestExtractRefusesArchiveWithTwoFiles",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), meshtest.File("README", []byte("hi"))}, nil), Limits{}, "more than one entry, and the second"},
		{"TestExtractRefusesArchiveWithAThirdEntry",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), meshtest.File("mesh-launcher", launcherFixture), meshtest.File("README", []byte("hi"))}, nil), Limits{}, "third entry"},
		{"TestExtractRefusesArchiveWithTheLauncherTwice",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), meshtest.File("mesh-launcher", launcherFixture), meshtest.File("mesh-launcher", launcherFixture)}, nil), Limits{}, "third entry"},
		{"TestExtractRefusesArchiveWithTheLauncherFirst",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-launcher", launcherFixture), meshtest.File("mesh-host", binaryFixture)}, nil), Limits{}, "is not named mesh-host"},
		{"TestExtractRefusesArchiveWithTheHostTwice",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), meshtest.File("mesh-host", binaryFixture)}, nil), Limits{}, "more than one entry, and the second"},
		{"TestExtractRefusesALauncherThatIsASymlink",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), {Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "mesh-launcher", Linkname: "/usr/bin/mesh-launcher", Mode: 0o777}}}, nil), Limits{}, "symlink"},
		{"TestExtractRefusesALauncherThatIsADirectory",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), {Header: tar.Header{Typeflag: tar.TypeDir, Name: "mesh-launcher/", Mode: 0o755}}}, nil), Limits{}, "directory"},
		{"TestExtractRefusesASetuidLauncher",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), {Header: tar.Header{Typeflag: tar.TypeReg, Name: "mesh-launcher", Mode: 0o4755, Size: int64(len(launcherFixture))}, Body: launcherFixture}}, nil), Limits{}, "setuid"},
		{"TestExtractRefusesALauncherOverTheLimit",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), meshtest.File("mesh-launcher", make([]byte, 1<<20+1))}, nil), small, "over the"},
		{"TestExtractRefusesALauncherEscapingWithDotDot",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), meshtest.File("../mesh-launcher", launcherFixture)}, nil), Limits{}, "escapes"},
		{"TestExtractRefusesDecompressionBombAfterALauncher",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture), meshtest.File("mesh-launcher", launcherFixture)}, make([]byte, 8<<20)), small, "decompression bomb"},
		{"TestExtractRefusesArchiveWithOtherName",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-launcher", binaryFixture)}, nil), Limits{}, "not named"},
		{"TestExtractRefusesSetuidBinary",
			meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeReg, Name: "mesh-host", Mode: 0o4755, Size: int64(len(binaryFixture))}, Body: binaryFixture}}, nil), Limits{}, "setuid"},
		{"TestExtractRefusesEmptyArchive",
			meshtest.Archive(nil, nil), Limits{}, "empty"},
		{"TestExtractRefusesBinaryOverTheLimit",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", make([]byte, 1<<20+1))}, nil), small, "over the"},
		{"TestExtractRefusesDecompressionBombAfterTarEnd",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture)}, make([]byte, 8<<20)), small, "decompression bomb"},
		{"TestExtractRefusesDataAfterTarEnd",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", binaryFixture)}, []byte("surprise")), Limits{}, "after the end"},
		{"TestExtractRefusesZstdWindowOverTheLimit",
			meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", make([]byte, 4<<20))}, nil, zstd.WithWindowSize(4<<20)), Limits{MaxWindow: 1 << 20}, "more memory"},
		{"TestExtractRefusesNonZstdInput",
			[]byte("this is not an archive at all"), Limits{}, "not a valid tar+zstd"},
		{"TestExtractRefusesZstdOfNonTar",
			func() []byte {
				var b bytes.Buffer
				zw, _ := zstd.NewWriter(&b)
				zw.Write(bytes.Repeat([]byte("x"), 2000))
				zw.Close()
				return b.Bytes()
			}(), Limits{}, "not a valid tar+zstd"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Extract(context.Background(), bytes.NewReader(c.arch), dir, c.lim)
			if !errors.Is(err, ErrUnsafe) {
				t.Fatalf("got %v, want ErrUnsafe", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			// Nothing outside dir was touched: the only thing Extract may leave is dir/mesh-host.
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.Name() != BinaryName {
					t.Fatalf("extract left %q in %s", e.Name(), dir)
				}
			}
		})
	}
}

func TestExtractRefusesCorruptFrameChecksum(t *testing.T) {
	var a bytes.Buffer
	if err := Pack(&a, bytes.NewReader(binaryFixture), int64(len(binaryFixture))); err != nil {
		t.Fatal(err)
	}
	b := a.Bytes()
	b[len(b)-1] ^= 0xff // the last 4 bytes are the frame's xxhash checksum
	_, err := Extract(context.Background(), bytes.NewReader(b), t.TempDir(), Limits{})
	if !errors.Is(err, ErrUnsafe) {
		t.Fatalf("got %v, want ErrUnsafe", err)
	}
}

func TestExtractStopsWhenContextIsDone(t *testing.T) {
	var a bytes.Buffer
	_ = Pack(&a, bytes.NewReader(binaryFixture), int64(len(binaryFixture)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Extract(ctx, bytes.NewReader(a.Bytes()), t.TempDir(), Limits{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func BenchmarkPackExtract20MB(b *testing.B) {
	bin := make([]byte, 20<<20)
	for i := range bin {
		bin[i] = byte(i * 7 % 251)
	}
	var a bytes.Buffer
	_ = Pack(&a, bytes.NewReader(bin), int64(len(bin)))
	_ = sha256.Sum256(a.Bytes())
	b.SetBytes(int64(len(bin)))
	for b.Loop() {
		dir := b.TempDir()
		if _, err := Extract(context.Background(), bytes.NewReader(a.Bytes()), dir, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// fullDisk is a destination that takes room bytes, then fails as a full disk does.
type fullDisk struct {
	path string
	room int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if len(p) > d.room {
		n := d.room
		d.room = 0
		return n, &os.PathError{Op: "write", Path: d.path, Err: syscall.ENOSPC}
	}
	d.room -= len(p)
	return len(p), nil
}
func (d *fullDisk) Chmod(os.FileMode) error { return nil }
func (d *fullDisk) Sync() error             { return nil }
func (d *fullDisk) Close() error            { return nil }

func TestExtractCallsAFullDiskTheMachinesFaultNotTheArchives(t *testing.T) {
	var a bytes.Buffer
	if err := Pack(&a, bytes.NewReader(binaryFixture), int64(len(binaryFixture))); err != nil {
		t.Fatal(err)
	}
	create := func(path string) (dest, error) { return &fullDisk{path: path, room: len(binaryFixture) / 2}, nil }
	_, err := extract(context.Background(), bytes.NewReader(a.Bytes()), t.TempDir(), LauncherWant{}, Limits{}, create)
	if errors.Is(err, ErrUnsafe) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v, want the write's ENOSPC and not ErrUnsafe", err)
	}
	var pe *os.PathError
	if !errors.As(err, &pe) || !strings.HasSuffix(pe.Path, BinaryName) {
		t.Fatalf("%v does not name the file it could not write", err)
	}
}

func TestPeekGivesTheBinarysSizeAndChecksTheEntry(t *testing.T) {
	var a bytes.Buffer
	if err := Pack(&a, bytes.NewReader(binaryFixture), int64(len(binaryFixture))); err != nil {
		t.Fatal(err)
	}
	n, err := Peek(context.Background(), bytes.NewReader(a.Bytes()), Limits{})
	if err != nil || n != int64(len(binaryFixture)) {
		t.Fatalf("Peek: %d, %v; want %d", n, err, len(binaryFixture))
	}
	bad := meshtest.Archive([]meshtest.Entry{meshtest.File("../mesh-host", binaryFixture)}, nil)
	if _, err := Peek(context.Background(), bytes.NewReader(bad), Limits{}); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Peek of an archive with ..: %v, want ErrUnsafe", err)
	}
}
