package files

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire"
)

func TestFileCreatedThenSecondApplyChangesNothing(t *testing.T) {
	e := newEnv(t)
	b := newBlobs()
	src := b.put([]byte("from a blob\n"))
	for _, spec := range []*wire.FileSpec{
		{Path: filepath.Join(e.dir, "inline.conf"), Content: str("inline\n"), Mode: "0600"},
		{Path: filepath.Join(e.dir, "blob.conf"), Source: src},
		{Path: filepath.Join(e.dir, "empty"), Content: str("")},
	} {
		t.Run(filepath.Base(spec.Path), func(t *testing.T) {
			a := File(e.g, b)
			r := res(t, "file", spec.Path, spec)
			wantDiffs(t, inspect(t, a, r), "absent")
			if !mustApply(t, a, r) {
				t.Fatal("created = false for a file that did not exist")
			}
			ino := statT(t, spec.Path).Ino
			created, err := a.Apply(context.Background(), r)
			if err != nil || created {
				t.Fatalf("second Apply: created=%v err=%v", created, err)
			}
			if statT(t, spec.Path).Ino != ino {
				t.Fatal("second Apply rewrote a file that already matched")
			}
		})
	}
	if got, _ := os.ReadFile(filepath.Join(e.dir, "blob.conf")); string(got) != "from a blob\n" {
		t.Fatalf("blob.conf holds %q", got)
	}
	if m := statT(t, filepath.Join(e.dir, "inline.conf")).Mode & 0o7777; m != 0o600 {
		t.Fatalf("inline.conf mode %o, want 0600", m)
	}
	if m := statT(t, filepath.Join(e.dir, "blob.conf")).Mode & 0o7777; m != 0o644 {
		t.Fatalf("blob.conf mode %o, want the default 0644", m)
	}
}

func TestFileChangesOnlyWhatDiffers(t *testing.T) {
	e := newEnv(t)
	a := File(e.g, newBlobs())
	p := filepath.Join(e.dir, "app.conf")
	r := res(t, "file", p, &wire.FileSpec{Content: str("v1\n"), Mode: "0640"})
	mustApply(t, a, r)
	ino := statT(t, p).Ino

	// A mode change only: the content (the same inode) stays.
	os.Chmod(p, 0o644)
	wantDiffs(t, inspect(t, a, r), "mode is 0644, declared 0640")
	if created := mustApply(t, a, r); created {
		t.Fatal("created = true for a file that existed")
	}
	if statT(t, p).Ino != ino {
		t.Fatal("a mode change rewrote the file")
	}

	// A content change of the same size: found by comparing the bytes, replaced atomically.
	os.WriteFile(p, []byte("v2\n"), 0o640)
	wantDiffs(t, inspect(t, a, r), "content differs (sha256:")
	mustApply(t, a, r)
	// Of another size: found without reading it.
	os.WriteFile(p, []byte("much longer\n"), 0o640)
	wantDiffs(t, inspect(t, a, r), "content differs (12 bytes on disk, 3 declared)")
	mustApply(t, a, r)
	if got, _ := os.ReadFile(p); string(got) != "v1\n" {
		t.Fatalf("content %q after drift was put back", got)
	}
	// A new declaration: new content and mode at once.
	r2 := res(t, "file", p, &wire.FileSpec{Content: str("v3\n"), Mode: "0600"})
	wantDiffs(t, inspect(t, a, r2), "content differs", "mode is 0640, declared 0600")
	mustApply(t, a, r2)
	if ents := entries(t, e.dir); len(ents) != 1 {
		t.Fatalf("temp files left behind: %q", ents)
	}
}

func TestFileSourceDriftIsFoundByDigestWithoutFetchingTheBlob(t *testing.T) {
	e := newEnv(t)
	b := newBlobs()
	src := b.put([]byte("payload"))
	a := File(e.g, b)
	p := filepath.Join(e.dir, "payload")
	r := res(t, "file", p, &wire.FileSpec{Source: src})
	mustApply(t, a, r)
	opens := b.opens
	os.WriteFile(p, []byte("PAYLOAD"), 0o644)
	wantDiffs(t, inspect(t, a, r), "content differs (sha256:")
	if b.opens != opens {
		t.Fatal("Inspect fetched the blob to compare")
	}
	mustApply(t, a, r)
}

func TestFileOwnerAndGroupAreSetAndDriftPutBack(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	a := File(e.g, newBlobs())
	p := filepath.Join(e.dir, "owned")
	r := res(t, "file", p, &wire.FileSpec{Content: str("x"), Owner: "4321", Group: "4322"})
	mustApply(t, a, r)
	if st := statT(t, p); st.Uid != 4321 || st.Gid != 4322 {
		t.Fatalf("owner %d:%d, want 4321:4322", st.Uid, st.Gid)
	}
	os.Lchown(p, 0, 0)
	wantDiffs(t, inspect(t, a, r), "owner is 0, declared 4321", "group is 0, declared 4322")
	mustApply(t, a, r)

	// Undeclared owner: a replaced file keeps the owner the old one had.
	os.WriteFile(p, []byte("changed"), 0o644)
	os.Lchown(p, 1111, 1112)
	r2 := res(t, "file", p, &wire.FileSpec{Content: str("x")})
	mustApply(t, a, r2)
	if st := statT(t, p); st.Uid != 1111 || st.Gid != 1112 {
		t.Fatalf("owner %d:%d after a rewrite with no owner declared, want 1111:1112 kept", st.Uid, st.Gid)
	}
}

func TestFileSymlinkAtThePathIsReplacedNotFollowed(t *testing.T) {
	e := newEnv(t)
	a := File(e.g, newBlobs())
	victim := filepath.Join(e.dir, "victim")
	os.WriteFile(victim, []byte("precious"), 0o600)
	p := filepath.Join(e.dir, "link")
	os.Symlink(victim, p)
	r := res(t, "file", p, &wire.FileSpec{Content: str("declared")})
	wantDiffs(t, inspect(t, a, r), "is a symlink, declared a regular file")
	if created := mustApply(t, a, r); created {
		t.Fatal("created = true where a symlink was")
	}
	if got, _ := os.ReadFile(victim); string(got) != "precious" {
		t.Fatalf("the symlink's target was written: %q", got)
	}
	if m := statT(t, victim).Mode & 0o777; m != 0o600 {
		t.Fatalf("the symlink's target was chmodded to %o", m)
	}
	if fi, _ := os.Lstat(p); !fi.Mode().IsRegular() {
		t.Fatalf("%s is %v, want a regular file", p, fi.Mode())
	}
}

func TestFileRefusals(t *testing.T) {
	e := newEnv(t)
	b := newBlobs()
	good := b.put([]byte("good"))
	lie := "sha256:" + strings.Repeat("ab", 32)
	b.m[lie] = []byte("not what the digest says")
	os.Symlink(e.root, filepath.Join(e.dir, "into-root"))
	os.Mkdir(filepath.Join(e.dir, "adir"), 0o755)
	existing := filepath.Join(e.dir, "existing")
	os.WriteFile(existing, []byte("kept"), 0o644)

	cases := []struct {
		name string
		spec *wire.FileSpec
		want string
	}{
		{"a path through a symlink into the host's root",
			&wire.FileSpec{Path: filepath.Join(e.dir, "into-root", "versions", "v9", "mesh-host"), Content: str("#!/bin/sh")}, "symlink"},
		{"a path in the host's root by its words", &wire.FileSpec{Path: filepath.Join(e.root, "host.json"), Content: str("{}")}, "inside"},
		{"a missing parent directory, named", &wire.FileSpec{Path: filepath.Join(e.dir, "nodir", "f"), Content: str("x")}, filepath.Join(e.dir, "nodir") + " does not exist"},
		{"a blob that does not match its digest", &wire.FileSpec{Path: existing, Source: lie}, "refused, nothing written"},
		{"a blob the source does not have", &wire.FileSpec{Path: filepath.Join(e.dir, "new"), Source: "sha256:" + strings.Repeat("cd", 32)}, "not found"},
		{"a directory at the path", &wire.FileSpec{Path: filepath.Join(e.dir, "adir"), Source: good}, "is a directory, declared a regular file"},
		{"a mode that is not octal", &wire.FileSpec{Path: filepath.Join(e.dir, "m"), Content: str("x"), Mode: "rw-r--r--"}, "not an octal"},
		{"an owner that does not exist", &wire.FileSpec{Path: filepath.Join(e.dir, "o"), Content: str("x"), Owner: "no-such-user-here"}, "no such user"},
	}
	before := entries(t, e.dir)
	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) {
			a := File(e.g, b)
			r := res(t, "file", "id", c.spec)
			_, err := a.Apply(context.Background(), r)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Apply = %v, want an error saying %q", err, c.want)
			}
			if got := entries(t, e.dir); strings.Join(got, ",") != strings.Join(before, ",") {
				t.Fatalf("entries %q after a refusal, want %q", got, before)
			}
			if got, _ := os.ReadFile(existing); string(got) != "kept" {
				t.Fatalf("existing file now holds %q", got)
			}
		})
	}
	if ents := entries(t, e.root); len(ents) != 0 {
		t.Fatalf("the host's root was written: %q", ents)
	}
}

func TestFileRemove(t *testing.T) {
	e := newEnv(t)
	a := File(e.g, newBlobs())
	p := filepath.Join(e.dir, "f")
	r := res(t, "file", p, &wire.FileSpec{Content: str("x")})
	mustApply(t, a, r)

	msg, err := a.Remove(context.Background(), owned(r, false))
	if err != nil || msg != "forgotten: it existed before the host managed it" {
		t.Fatalf("Remove of a file the host did not create: %q, %v", msg, err)
	}
	if _, err := os.Lstat(p); err != nil {
		t.Fatal("a file the host did not create was removed")
	}
	msg, err = a.Remove(context.Background(), owned(r, true))
	if err != nil || msg != "removed" {
		t.Fatalf("Remove: %q, %v", msg, err)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatal("the file is still there")
	}
	// A symlink found where the host's file was is neither followed nor removed.
	victim := filepath.Join(e.dir, "victim")
	os.WriteFile(victim, []byte("v"), 0o644)
	os.Symlink(victim, p)
	msg, err = a.Remove(context.Background(), owned(r, true))
	if err != nil || !strings.Contains(msg, "forgotten: it is now a symlink") {
		t.Fatalf("Remove over a symlink: %q, %v", msg, err)
	}
	if _, err := os.Lstat(victim); err != nil {
		t.Fatal("the symlink's target was removed")
	}
}

func TestFileWriteClearsTheTempFilesACrashLeft(t *testing.T) {
	e := newEnv(t)
	p := filepath.Join(e.dir, "app.conf")
	left := filepath.Join(e.dir, ".app.conf.mesh-tmp-123")
	other := filepath.Join(e.dir, ".other.mesh-tmp-123")
	os.WriteFile(left, []byte("half"), 0o600)
	os.WriteFile(other, []byte("not this one's"), 0o600)
	mustApply(t, File(e.g, newBlobs()), res(t, "file", p, &wire.FileSpec{Content: str("x")}))
	if _, err := os.Lstat(left); !os.IsNotExist(err) {
		t.Fatal("the leftover temp file is still there")
	}
	if _, err := os.Lstat(other); err != nil {
		t.Fatal("another file's leftover was removed")
	}
}

func TestSpecWithoutParsedIsDecodedStrictly(t *testing.T) {
	e := newEnv(t)
	a := File(e.g, newBlobs())
	p := filepath.Join(e.dir, "f")
	r := wire.Resource{Type: "file", ID: p, Spec: []byte(`{"content":"x","mode":"0600"}`)}
	mustApply(t, a, r)
	bad := wire.Resource{Type: "file", ID: p, Spec: []byte(`{"content":"x","mdoe":"0600"}`)}
	if _, err := a.Inspect(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "mdoe") {
		t.Fatalf("Inspect of a spec with an unknown key: %v", err)
	}
}

func TestCancelledContextChangesNothing(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := filepath.Join(e.dir, "f")
	if _, err := File(e.g, newBlobs()).Apply(ctx, res(t, "file", p, &wire.FileSpec{Content: str("x")})); err == nil {
		t.Fatal("Apply with a cancelled context succeeded")
	}
	if _, err := Directory(e.g).Apply(ctx, res(t, "directory", p, &wire.DirectorySpec{})); err == nil {
		t.Fatal("Apply with a cancelled context succeeded")
	}
	if ents := entries(t, e.dir); len(ents) != 0 {
		t.Fatalf("written: %q", ents)
	}
}
