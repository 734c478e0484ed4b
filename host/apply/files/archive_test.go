package files

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/meshtest"
)

func tdir(name string, mode int64) meshtest.Entry {
	return meshtest.Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}}
}

func tfile(name string, mode int64, body string) meshtest.Entry {
	return meshtest.Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, Body: []byte(body)}
}

var appV1 = []meshtest.Entry{
	tdir("./", 0o755),
	tdir("bin/", 0o755),
	tfile("bin/app", 0o755, "#!/bin/sh\necho v1\n"),
	tdir("etc/", 0o750),
	tfile("etc/app.conf", 0o640, "level=info\n"),
	tfile("share/doc/README", 0o644, "read me\n"), // parents not listed
}

// tree lists every path below dir with its kind, for before/after comparisons.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel+":"+d.Type().String())
		return nil
	})
	return out
}

type archiveEnv struct {
	env
	b *fakeBlobs
	a apply.Applier
}

func newArchiveEnv(t *testing.T) archiveEnv {
	e := newEnv(t)
	b := newBlobs()
	return archiveEnv{env: e, b: b, a: Archive(e.g, b, e.root)}
}

func (e archiveEnv) res(t *testing.T, path string, entries []meshtest.Entry) wire.Resource {
	src := e.b.put(meshtest.Archive(entries, nil))
	return res(t, "archive", "app", &wire.ArchiveSpec{Path: path, Source: src})
}

func TestArchiveExtractedThenSecondApplyChangesNothing(t *testing.T) {
	e := newArchiveEnv(t)
	p := filepath.Join(e.dir, "app")
	r := e.res(t, p, appV1)
	wantDiffs(t, inspect(t, e.a, r), "absent")
	if !mustApply(t, e.a, r) {
		t.Fatal("created = false for a directory that did not exist")
	}
	want := []string{".:d---------", "bin:d---------", "bin/app:----------", "etc:d---------", "etc/app.conf:----------",
		"share:d---------", "share/doc:d---------", "share/doc/README:----------"}
	if got := tree(t, p); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("tree %q, want %q", got, want)
	}
	if b, _ := os.ReadFile(filepath.Join(p, "etc/app.conf")); string(b) != "level=info\n" {
		t.Fatalf("etc/app.conf holds %q", b)
	}
	if m := statT(t, filepath.Join(p, "etc")).Mode & 0o7777; m != 0o750 {
		t.Fatalf("etc mode %o, want 0750 from the archive", m)
	}
	opens := e.b.opens
	if created, err := e.a.Apply(context.Background(), r); err != nil || created {
		// Inspect said nothing differs; Apply is not called then, but if it is it changes nothing.
		t.Logf("second Apply: created=%v err=%v", created, err)
	}
	e.b.opens = opens
	if d := inspect(t, e.a, r); len(d) != 0 || e.b.opens != opens {
		t.Fatalf("Inspect of an extracted archive: %q, blob opened %d times", d, e.b.opens-opens)
	}
	if ents := entries(t, e.dir); len(ents) != 1 {
		t.Fatalf("staging left behind: %q", ents)
	}
}

func TestArchiveDriftIsFoundFromTheRecordAndPutBack(t *testing.T) {
	e := newArchiveEnv(t)
	p := filepath.Join(e.dir, "app")
	r := e.res(t, p, appV1)
	mustApply(t, e.a, r)
	opens := e.b.opens

	os.WriteFile(filepath.Join(p, "etc/app.conf"), []byte("level=warn\n"), 0o640) // same size
	os.WriteFile(filepath.Join(p, "bin/app"), []byte("#!/bin/sh\n"), 0o755)       // another size
	os.Remove(filepath.Join(p, "share/doc/README"))
	os.Chmod(filepath.Join(p, "etc"), 0o755)
	os.WriteFile(filepath.Join(p, "theirs"), []byte("not the host's"), 0o644)
	wantDiffs(t, inspect(t, e.a, r),
		"changed: bin/app (10 bytes on disk, 18 declared)",
		"etc: mode is 0755, declared 0750",
		"changed: etc/app.conf (sha256:",
		"missing: share/doc/README")
	if e.b.opens != opens {
		t.Fatal("Inspect fetched the archive although its record was there")
	}
	ino := statT(t, filepath.Join(p, "etc")).Ino
	mustApply(t, e.a, r)
	if statT(t, filepath.Join(p, "etc")).Ino != ino {
		t.Fatal("an existing directory was replaced, not fixed")
	}
	if b, _ := os.ReadFile(filepath.Join(p, "theirs")); string(b) != "not the host's" {
		t.Fatal("a file the archive does not hold was touched")
	}
	if ents := entries(t, e.dir); len(ents) != 1 {
		t.Fatalf("staging left behind: %q", ents)
	}
}

func TestArchiveWithoutItsRecordIsComparedWithTheArchive(t *testing.T) {
	e := newArchiveEnv(t)
	p := filepath.Join(e.dir, "app")
	r := e.res(t, p, appV1)
	mustApply(t, e.a, r)
	os.RemoveAll(filepath.Join(e.root, "applied"))
	os.WriteFile(filepath.Join(p, "etc/app.conf"), []byte("level=dbg\n"), 0o640)
	opens := e.b.opens
	wantDiffs(t, inspect(t, e.a, r), "changed: etc/app.conf")
	if e.b.opens == opens {
		t.Fatal("without a record, Inspect did not read the archive")
	}
	mustApply(t, e.a, r)
	// Again without the record, but in place: the missing record itself is the difference.
	os.RemoveAll(filepath.Join(e.root, "applied"))
	wantDiffs(t, inspect(t, e.a, r), "record of it is missing")
	mustApply(t, e.a, r)
}

func TestArchiveIntoAnExistingDirectoryPlacesOnlyWhatDiffers(t *testing.T) {
	e := newArchiveEnv(t)
	p := filepath.Join(e.dir, "app")
	os.MkdirAll(filepath.Join(p, "etc"), 0o750)
	os.WriteFile(filepath.Join(p, "etc/app.conf"), []byte("level=info\n"), 0o640) // already right
	os.WriteFile(filepath.Join(p, "keep"), []byte("theirs"), 0o644)
	victim := filepath.Join(e.dir, "victim")
	os.WriteFile(victim, []byte("precious"), 0o644)
	os.MkdirAll(filepath.Join(p, "bin"), 0o755)
	os.Symlink(victim, filepath.Join(p, "bin/app")) // a symlink where the archive has a file
	ino := statT(t, filepath.Join(p, "etc/app.conf")).Ino
	r := e.res(t, p, appV1)
	if created := mustApply(t, e.a, r); !created {
		t.Fatal("created = false though the host put files where none were")
	}
	if statT(t, filepath.Join(p, "etc/app.conf")).Ino != ino {
		t.Fatal("a file that already matched was replaced")
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatal("a symlink in the tree was followed")
	}
	// Removal takes only what the host put where nothing was: not bin/app, where a symlink
	// was, nor etc/app.conf, which was there already.
	msg, err := e.a.Remove(context.Background(), owned(r, false))
	if err != nil || msg != "removed what it extracted; forgotten: "+p+" existed before the host managed it" {
		t.Fatalf("Remove = %q, %v", msg, err)
	}
	want := []string{".:d---------", "bin:d---------", "bin/app:----------", "etc:d---------", "etc/app.conf:----------", "keep:----------"}
	if got := tree(t, p); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after Remove: %q, want %q", got, want)
	}
}

func TestArchiveRefusals(t *testing.T) {
	big := strings.Repeat("x", 2000)
	cases := []struct {
		name    string
		entries []meshtest.Entry
		want    string
	}{
		{"an absolute name", []meshtest.Entry{tfile("ok", 0o644, "x"), tfile("/etc/passwd", 0o644, "x")}, "absolute"},
		{"a name with ..", []meshtest.Entry{tfile("ok", 0o644, "x"), tfile("../escape", 0o644, "x")}, "escapes"},
		{"a symlink", []meshtest.Entry{tfile("ok", 0o644, "x"), {Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/"}}}, "symlink"},
		{"a hard link", []meshtest.Entry{tfile("ok", 0o644, "x"), {Header: tar.Header{Typeflag: tar.TypeLink, Name: "h", Linkname: "ok"}}}, "hard link"},
		{"a device", []meshtest.Entry{tfile("ok", 0o644, "x"), {Header: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}}, "device"},
		{"a FIFO", []meshtest.Entry{tfile("ok", 0o644, "x"), {Header: tar.Header{Typeflag: tar.TypeFifo, Name: "p"}}}, "FIFO"},
		{"a PAX global header", []meshtest.Entry{tfile("ok", 0o644, "x"), {Header: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "g", PAXRecords: map[string]string{"comment": "x"}}}}, "PAX global"},
		{"a setuid file", []meshtest.Entry{tfile("ok", 0o644, "x"), tfile("su", 0o4755, "x")}, "setuid"},
		{"more bytes than the limit", []meshtest.Entry{tfile("ok", 0o644, "x"), tfile("big", 0o644, big)}, "limit"},
		{"more entries than the limit", []meshtest.Entry{tfile("a", 0o644, "x"), tfile("b", 0o644, "x"), tfile("c", 0o644, "x"), tfile("d", 0o644, "x"), tfile("e", 0o644, "x")}, "entries"},
	}
	for _, c := range cases {
		for _, existing := range []bool{false, true} {
			name := "refuses " + c.name + " into a new directory"
			if existing {
				name = "refuses " + c.name + " into an existing directory"
			}
			t.Run(name, func(t *testing.T) {
				e := newArchiveEnv(t)
				e.a = archiveApplier{g: e.g, b: e.b, root: e.root, lim: archive.TreeLimits{MaxBytes: 1000, MaxEntries: 4}}
				p := filepath.Join(e.dir, "app")
				if existing {
					os.Mkdir(p, 0o755)
					os.WriteFile(filepath.Join(p, "theirs"), []byte("t"), 0o644)
				}
				before := tree(t, e.dir)
				_, err := e.a.Apply(context.Background(), e.res(t, p, c.entries))
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("Apply = %v, want an error saying %q", err, c.want)
				}
				if got := tree(t, e.dir); strings.Join(got, " ") != strings.Join(before, " ") {
					t.Fatalf("left behind: %q, before: %q", got, before)
				}
				if ents := entries(t, e.root); len(ents) != 0 {
					t.Fatalf("a record was written for a refused archive: %q", ents)
				}
			})
		}
	}
}

func TestArchiveOtherRefusals(t *testing.T) {
	e := newArchiveEnv(t)
	os.Symlink(e.root, filepath.Join(e.dir, "into-root"))
	os.WriteFile(filepath.Join(e.dir, "afile"), []byte("kept"), 0o644)
	good := e.b.put(meshtest.Archive(appV1, nil))
	lie := "sha256:" + strings.Repeat("ab", 32)
	e.b.m[lie] = meshtest.Archive(appV1, nil)
	// An entry whose place leads through a symlink already in the directory into the root.
	holder := filepath.Join(e.dir, "holder")
	os.Mkdir(holder, 0o755)
	os.Symlink(e.root, filepath.Join(holder, "link"))
	intoRoot := e.b.put(meshtest.Archive([]meshtest.Entry{tfile("link/versions/v9.9.9/mesh-host", 0o755, "#!/bin/sh\n")}, nil))
	conflict := filepath.Join(e.dir, "conflict")
	os.MkdirAll(filepath.Join(conflict, "etc", "app.conf"), 0o755) // a directory where the archive holds a file
	cases := []struct {
		name string
		spec *wire.ArchiveSpec
		want string
	}{
		{"a path through a symlink into the host's root", &wire.ArchiveSpec{Path: filepath.Join(e.dir, "into-root", "versions", "v9"), Source: good}, "symlink"},
		{"a missing parent, named", &wire.ArchiveSpec{Path: filepath.Join(e.dir, "no", "app"), Source: good}, filepath.Join(e.dir, "no") + " does not exist"},
		{"a blob that does not match its digest", &wire.ArchiveSpec{Path: filepath.Join(e.dir, "app"), Source: lie}, "refused, nothing placed"},
		{"an entry placed through a symlink into the host's root", &wire.ArchiveSpec{Path: holder, Source: intoRoot}, `archive entry "link": path`},
		{"a file at the path", &wire.ArchiveSpec{Path: filepath.Join(e.dir, "afile"), Source: good}, "is a regular file, declared a directory"},
		{"a directory where the archive holds a file", &wire.ArchiveSpec{Path: conflict, Source: good}, "is a directory where the archive holds a file"},
	}
	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) {
			before := tree(t, e.dir)
			_, err := e.a.Apply(context.Background(), res(t, "archive", "app", c.spec))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Apply = %v, want an error saying %q", err, c.want)
			}
			if got := tree(t, e.dir); strings.Join(got, " ") != strings.Join(before, " ") {
				t.Fatalf("left behind: %q, before: %q", got, before)
			}
		})
	}
	if ents := entries(t, e.root); len(ents) != 0 {
		t.Fatalf("the host's root was written: %q", ents)
	}
}

func TestArchiveRemoveTakesExactlyWhatItCreated(t *testing.T) {
	e := newArchiveEnv(t)
	p := filepath.Join(e.dir, "app")
	r := e.res(t, p, appV1)
	mustApply(t, e.a, r)
	msg, err := e.a.Remove(context.Background(), owned(r, true))
	if err != nil || msg != "removed" {
		t.Fatalf("Remove = %q, %v", msg, err)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("%s is still there", p)
	}
	if _, err := os.Lstat(e.a.(archiveApplier).manifestPath("app")); !os.IsNotExist(err) {
		t.Fatal("the record is still there")
	}

	// Someone else's file inside: it stays, and so do the directories holding it.
	mustApply(t, e.a, r)
	os.WriteFile(filepath.Join(p, "etc", "local.conf"), []byte("theirs"), 0o644)
	victim := filepath.Join(e.dir, "victim")
	os.MkdirAll(filepath.Join(victim, "doc"), 0o755)
	os.WriteFile(filepath.Join(victim, "doc", "README"), []byte("precious"), 0o644)
	os.RemoveAll(filepath.Join(p, "share"))
	os.Symlink(victim, filepath.Join(p, "share")) // a symlink where a directory was: not followed
	msg, err = e.a.Remove(context.Background(), owned(r, true))
	if err != nil || !strings.Contains(msg, "forgotten") {
		t.Fatalf("Remove = %q, %v", msg, err)
	}
	want := []string{".:d---------", "etc:d---------", "etc/local.conf:----------", "share:L---------"}
	if got := tree(t, p); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after Remove: %q, want %q", got, want)
	}
	if b, _ := os.ReadFile(filepath.Join(victim, "doc", "README")); string(b) != "precious" {
		t.Fatal("Remove followed a symlink")
	}
}

func TestArchiveRemoveWithoutItsRecordReadsTheArchive(t *testing.T) {
	e := newArchiveEnv(t)
	p := filepath.Join(e.dir, "app")
	r := e.res(t, p, appV1)
	mustApply(t, e.a, r)
	os.RemoveAll(filepath.Join(e.root, "applied"))
	msg, err := e.a.Remove(context.Background(), owned(r, true))
	if err != nil || msg != "removed" {
		t.Fatalf("Remove = %q, %v", msg, err)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("%s is still there", p)
	}
}

func TestArchiveNewSourceRemovesWhatTheOldOneCreatedAndTheNewOneLacks(t *testing.T) {
	e := newArchiveEnv(t)
	p := filepath.Join(e.dir, "app")
	mustApply(t, e.a, e.res(t, p, appV1))
	v2 := []meshtest.Entry{tdir("bin/", 0o755), tfile("bin/app", 0o755, "#!/bin/sh\necho v2\n")}
	r2 := e.res(t, p, v2)
	wantDiffs(t, inspect(t, e.a, r2), "extracted from sha256:")
	mustApply(t, e.a, r2)
	want := []string{".:d---------", "bin:d---------", "bin/app:----------"}
	if got := tree(t, p); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after the new archive: %q, want %q", got, want)
	}
}

func TestArchiveOwnerIsSetOnEveryEntry(t *testing.T) {
	requireRoot(t)
	e := newArchiveEnv(t)
	p := filepath.Join(e.dir, "app")
	r := res(t, "archive", "app", &wire.ArchiveSpec{Path: p, Source: e.b.put(meshtest.Archive(appV1, nil)), Owner: "4321", Group: "4322"})
	mustApply(t, e.a, r)
	for _, n := range []string{".", "bin", "bin/app", "share/doc/README"} {
		if st := statT(t, filepath.Join(p, n)); st.Uid != 4321 || st.Gid != 4322 {
			t.Fatalf("%s owned by %d:%d", n, st.Uid, st.Gid)
		}
	}
	os.Lchown(filepath.Join(p, "bin/app"), 0, 0)
	wantDiffs(t, inspect(t, e.a, r), "bin/app: owner is 0, declared 4321", "bin/app: group is 0, declared 4322")
	mustApply(t, e.a, r)
}

func TestArchiveExtractionClearsTheStagingACrashLeft(t *testing.T) {
	e := newArchiveEnv(t)
	p := filepath.Join(e.dir, "app")
	left := filepath.Join(e.dir, ".app.mesh-staging-42")
	os.MkdirAll(filepath.Join(left, "bin"), 0o700)
	os.WriteFile(filepath.Join(left, "bin", "app"), []byte("half"), 0o600)
	mustApply(t, e.a, e.res(t, p, appV1))
	if ents := entries(t, e.dir); strings.Join(ents, ",") != "app" {
		t.Fatalf("entries %q, want the leftover staging gone", ents)
	}
}

func TestArchiveSymlinkAtThePathIsReplacedNotFollowed(t *testing.T) {
	e := newArchiveEnv(t)
	victim := filepath.Join(e.dir, "victim")
	os.Mkdir(victim, 0o755)
	p := filepath.Join(e.dir, "app")
	os.Symlink(victim, p)
	r := e.res(t, p, appV1)
	wantDiffs(t, inspect(t, e.a, r), "is a symlink, declared a directory")
	mustApply(t, e.a, r)
	if ents := entries(t, victim); len(ents) != 0 {
		t.Fatalf("extracted through the symlink into its target: %q", ents)
	}
	if fi, _ := os.Lstat(p); !fi.IsDir() {
		t.Fatalf("%s is %v, want a directory", p, fi.Mode())
	}
	// The directory itself replaced something: Remove takes the tree, not the directory.
	msg, err := e.a.Remove(context.Background(), owned(r, true))
	if err != nil || !strings.Contains(msg, "existed before") {
		t.Fatalf("Remove = %q, %v", msg, err)
	}
}
