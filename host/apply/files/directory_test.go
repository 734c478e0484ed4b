package files

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire"
)

func TestDirectoryCreatedThenSecondApplyChangesNothing(t *testing.T) {
	e := newEnv(t)
	a := Directory(e.g)
	p := filepath.Join(e.dir, "app")
	r := res(t, "directory", p, &wire.DirectorySpec{}) // path from the id, mode the default
	wantDiffs(t, inspect(t, a, r), "absent")
	if !mustApply(t, a, r) {
		t.Fatal("created = false for a directory that did not exist")
	}
	if m := statT(t, p).Mode & 0o7777; m != 0o755 {
		t.Fatalf("mode %o, want the default 0755", m)
	}
	if created, err := a.Apply(context.Background(), r); err != nil || created {
		t.Fatalf("second Apply: created=%v err=%v", created, err)
	}
}

func TestDirectoryModeAndOwnerChangedAndDriftPutBack(t *testing.T) {
	e := newEnv(t)
	a := Directory(e.g)
	p := filepath.Join(e.dir, "app")
	os.Mkdir(p, 0o755)
	os.WriteFile(filepath.Join(p, "theirs"), []byte("x"), 0o644)
	r := res(t, "directory", "app", &wire.DirectorySpec{Path: p, Mode: "0750"})
	wantDiffs(t, inspect(t, a, r), "mode is 0755, declared 0750")
	if created := mustApply(t, a, r); created {
		t.Fatal("created = true for a directory that existed")
	}
	// Removed behind the host's back: found absent, made again.
	os.RemoveAll(p)
	wantDiffs(t, inspect(t, a, r), "absent")
	mustApply(t, a, r)

	if os.Geteuid() == 0 {
		r2 := res(t, "directory", "app", &wire.DirectorySpec{Path: p, Mode: "0750", Owner: "4321", Group: "4322"})
		wantDiffs(t, inspect(t, a, r2), "owner is 0, declared 4321", "group is 0, declared 4322")
		mustApply(t, a, r2)
		if st := statT(t, p); st.Uid != 4321 || st.Gid != 4322 || st.Mode&0o7777 != 0o750 {
			t.Fatalf("owner %d:%d mode %o", st.Uid, st.Gid, st.Mode&0o7777)
		}
	}
}

func TestDirectorySymlinkAtThePathIsReplacedNotFollowed(t *testing.T) {
	e := newEnv(t)
	a := Directory(e.g)
	victim := filepath.Join(e.dir, "victim")
	os.Mkdir(victim, 0o700)
	p := filepath.Join(e.dir, "app")
	os.Symlink(victim, p)
	r := res(t, "directory", p, &wire.DirectorySpec{Mode: "0755"})
	wantDiffs(t, inspect(t, a, r), "is a symlink, declared a directory")
	mustApply(t, a, r)
	if m := statT(t, victim).Mode & 0o7777; m != 0o700 {
		t.Fatalf("the symlink's target was chmodded to %o", m)
	}
	if fi, _ := os.Lstat(p); !fi.IsDir() {
		t.Fatalf("%s is %v, want a directory", p, fi.Mode())
	}
}

func TestDirectoryRefusals(t *testing.T) {
	e := newEnv(t)
	os.Symlink(e.root, filepath.Join(e.dir, "into-root"))
	os.WriteFile(filepath.Join(e.dir, "afile"), []byte("kept"), 0o644)
	cases := []struct {
		name string
		path string
		want string
	}{
		{"a path through a symlink into the host's root", filepath.Join(e.dir, "into-root", "versions", "v9"), "symlink"},
		{"the host's root itself", e.root, "inside"},
		{"a missing parent, named", filepath.Join(e.dir, "a", "b"), filepath.Join(e.dir, "a") + " does not exist"},
		{"a regular file at the path", filepath.Join(e.dir, "afile"), "is a regular file, declared a directory"},
	}
	before := entries(t, e.dir)
	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) {
			_, err := Directory(e.g).Apply(context.Background(), res(t, "directory", c.path, &wire.DirectorySpec{}))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Apply = %v, want an error saying %q", err, c.want)
			}
			if got := entries(t, e.dir); strings.Join(got, ",") != strings.Join(before, ",") {
				t.Fatalf("entries %q after a refusal, want %q", got, before)
			}
		})
	}
	if ents := entries(t, e.root); len(ents) != 0 {
		t.Fatalf("the host's root was written: %q", ents)
	}
}

func TestDirectoryRemove(t *testing.T) {
	e := newEnv(t)
	a := Directory(e.g)
	p := filepath.Join(e.dir, "app")
	r := res(t, "directory", p, &wire.DirectorySpec{})
	mustApply(t, a, r)
	cases := []struct {
		name    string
		created bool
		setup   func()
		want    string
		remains bool
	}{
		{"not created by the host: forgotten", false, func() {}, "forgotten: it existed before the host managed it", true},
		{"created but holding someone else's file: forgotten", true, func() { os.WriteFile(filepath.Join(p, "x"), nil, 0o644) },
			"forgotten: not empty, holds things the host did not create", true},
		{"created and empty: removed", true, func() { os.Remove(filepath.Join(p, "x")) }, "removed", false},
		{"already gone: removed", true, func() {}, "removed (it was already gone)", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.setup()
			msg, err := a.Remove(context.Background(), owned(r, c.created))
			if err != nil || msg != c.want {
				t.Fatalf("Remove = %q, %v; want %q", msg, err, c.want)
			}
			if _, err := os.Lstat(p); (err == nil) != c.remains {
				t.Fatalf("exists=%v after Remove, want %v", err == nil, c.remains)
			}
		})
	}
	// A symlink where the directory was is not followed: the target and its content stay.
	victim := filepath.Join(e.dir, "victim")
	os.Mkdir(victim, 0o755)
	os.Symlink(victim, p)
	msg, err := a.Remove(context.Background(), owned(r, true))
	if err != nil || !strings.Contains(msg, "forgotten: it is now a symlink") {
		t.Fatalf("Remove over a symlink: %q, %v", msg, err)
	}
	if _, err := os.Lstat(victim); err != nil {
		t.Fatal("the symlink's target was removed")
	}
}
