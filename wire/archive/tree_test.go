package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire/meshtest"
)

func dirEntry(name string, mode int64) meshtest.Entry {
	return meshtest.Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}}
}

func fileEntry(name string, mode int64, body string) meshtest.Entry {
	return meshtest.Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, Body: []byte(body)}
}

func TestExtractTreeWritesFilesAndDirectoriesWithTheirModes(t *testing.T) {
	arch := meshtest.Archive([]meshtest.Entry{
		dirEntry("./", 0o755),
		dirEntry("etc/", 0o750),
		fileEntry("etc/app.conf", 0o640, "key=value\n"),
		fileEntry("./bin/app", 0o755, "#!/bin/sh\n"), // bin/ not listed: made a 0755 directory
		dirEntry("ro/", 0o555),                       // read-only: its mode is set after its content
		fileEntry("ro/x", 0o444, "x"),
	}, nil)
	dir := t.TempDir()
	got, err := ExtractTree(context.Background(), bytes.NewReader(arch), dir, TreeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	want := []Entry{
		{Name: "etc", Dir: true, Mode: 0o750},
		{Name: "etc/app.conf", Mode: 0o640, Size: 10, Digest: digest.FromString("key=value\n")},
		{Name: "bin", Dir: true, Mode: 0o755},
		{Name: "bin/app", Mode: 0o755, Size: 10, Digest: digest.FromString("#!/bin/sh\n")},
		{Name: "ro", Dir: true, Mode: 0o555},
		{Name: "ro/x", Mode: 0o444, Size: 1, Digest: digest.FromString("x")},
	}
	if len(got) != len(want) {
		t.Fatalf("entries %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
		fi, err := os.Lstat(filepath.Join(dir, want[i].Name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.IsDir() != want[i].Dir || fi.Mode().Perm() != want[i].Mode {
			t.Errorf("%s on disk: %v, want dir=%v mode %v", want[i].Name, fi.Mode(), want[i].Dir, want[i].Mode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "etc/app.conf")); string(b) != "key=value\n" {
		t.Errorf("etc/app.conf holds %q", b)
	}
}

func TestReadTreeRefuses(t *testing.T) {
	body := "content"
	cases := []struct {
		name    string
		entries []meshtest.Entry
		trailer []byte
		lim     TreeLimits
		opts    []zstd.EOption
		want    string
	}{
		{"an absolute name", []meshtest.Entry{fileEntry("/etc/passwd", 0o644, body)}, nil, TreeLimits{}, nil, "absolute path"},
		{"a name escaping with ..", []meshtest.Entry{fileEntry("a/../../x", 0o644, body)}, nil, TreeLimits{}, nil, "escapes"},
		{"a symlink", []meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/var/lib/mesh-host"}}}, nil, TreeLimits{}, nil, "symlink"},
		{"a hard link", []meshtest.Entry{fileEntry("x", 0o644, body), {Header: tar.Header{Typeflag: tar.TypeLink, Name: "y", Linkname: "x"}}}, nil, TreeLimits{}, nil, "hard link"},
		{"a character device", []meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}}, nil, TreeLimits{}, nil, "device"},
		{"a block device", []meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8}}}, nil, TreeLimits{}, nil, "device"},
		{"a FIFO", []meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeFifo, Name: "p"}}}, nil, TreeLimits{}, nil, "FIFO"},
		{"a PAX global header", []meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "g", PAXRecords: map[string]string{"comment": "x"}}}, fileEntry("x", 0o644, body)}, nil, TreeLimits{}, nil, "PAX global"},
		{"a setuid file", []meshtest.Entry{fileEntry("su", 0o4755, body)}, nil, TreeLimits{}, nil, "setuid"},
		{"a setgid directory", []meshtest.Entry{dirEntry("d/", 0o2755)}, nil, TreeLimits{}, nil, "setgid"},
		{"a sticky directory", []meshtest.Entry{dirEntry("d/", 0o1777)}, nil, TreeLimits{}, nil, "sticky"},
		{"the same name twice", []meshtest.Entry{fileEntry("x", 0o644, body), fileEntry("./x", 0o644, body)}, nil, TreeLimits{}, nil, "twice"},
		{"a file under a file", []meshtest.Entry{fileEntry("x", 0o644, body), fileEntry("x/y", 0o644, body)}, nil, TreeLimits{}, nil, "as a file"},
		{"an empty archive", nil, nil, TreeLimits{}, nil, "empty"},
		{"more entries than the limit", []meshtest.Entry{fileEntry("a", 0o644, body), fileEntry("b", 0o644, body), fileEntry("c", 0o644, body)}, nil, TreeLimits{MaxEntries: 2}, nil, "more than 2 entries"},
		{"implicit parents counted against the entry limit", []meshtest.Entry{fileEntry("a/b/c", 0o644, body)}, nil, TreeLimits{MaxEntries: 2}, nil, "more than 2 entries"},
		{"files over the total size limit", []meshtest.Entry{fileEntry("a", 0o644, strings.Repeat("x", 600)), fileEntry("b", 0o644, strings.Repeat("x", 600))}, nil, TreeLimits{MaxBytes: 1000}, nil, "over what is left"},
		{"a decompression bomb after the tar end", []meshtest.Entry{fileEntry("a", 0o644, body)}, make([]byte, 8<<20), TreeLimits{MaxBytes: 1 << 10, MaxEntries: 10}, nil, "decompression bomb"},
		{"data after the tar end", []meshtest.Entry{fileEntry("a", 0o644, body)}, []byte("surprise"), TreeLimits{}, nil, "after the end"},
		{"a zstd window over the limit", []meshtest.Entry{fileEntry("a", 0o644, strings.Repeat("y", 4<<20))}, nil, TreeLimits{MaxWindow: 1 << 20}, []zstd.EOption{zstd.WithWindowSize(4 << 20)}, "more memory"},
	}
	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) {
			arch := meshtest.Archive(c.entries, c.trailer, c.opts...)
			dir := t.TempDir()
			_, err := ExtractTree(context.Background(), bytes.NewReader(arch), dir, c.lim)
			if !errors.Is(err, ErrUnsafe) {
				t.Fatalf("got %v, want ErrUnsafe", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			// Only the staging directory was written to: nothing of a refused entry exists in it.
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if d != nil && d.Type()&(fs.ModeSymlink|fs.ModeDevice|fs.ModeNamedPipe) != 0 {
					t.Errorf("extract left %s (%v)", p, d.Type())
				}
				return nil
			})
		})
	}
}

func TestReadTreeRefusesNotAnArchive(t *testing.T) {
	_, err := ReadTree(context.Background(), strings.NewReader("not an archive"), TreeLimits{}, nil)
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "not a valid tar+zstd") {
		t.Fatalf("got %v", err)
	}
}

func TestReadTreeDigestsContentTheCallerDidNotRead(t *testing.T) {
	arch := meshtest.Archive([]meshtest.Entry{fileEntry("a", 0o644, "hello")}, nil)
	got, err := ReadTree(context.Background(), bytes.NewReader(arch), TreeLimits{}, func(e Entry, r io.Reader) error {
		if r != nil {
			buf := make([]byte, 2)
			r.Read(buf) // reads part only
		}
		return nil
	})
	if err != nil || len(got) != 1 || got[0].Digest != digest.FromString("hello") {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestReadTreeStopsWhenContextIsDone(t *testing.T) {
	arch := meshtest.Archive([]meshtest.Entry{fileEntry("a", 0o644, "hello")}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadTree(ctx, bytes.NewReader(arch), TreeLimits{}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
