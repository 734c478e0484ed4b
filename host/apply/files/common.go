// Package files holds the appliers of the file-system kinds: directory, file and archive.
// Each reads the machine without following a symlink at the path it manages, changes only what
// differs, writes through a temp file renamed into place (the rename replaces a symlink
// itself, never what it points to), and never creates a missing parent directory: a parent is
// declared as a directory resource of its own, so that what the host owns is what it was told
// to own. Every path is checked with apply.Guard right before it is read or changed.
package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// specOf returns r's spec as T: the parser's r.Parsed, or r.Spec decoded strictly when a
// caller handed the resource over without it.
func specOf[T any](r wire.Resource) (*T, error) {
	if p, ok := r.Parsed.(*T); ok && p != nil {
		return p, nil
	}
	var s T
	if err := wire.DecodeStrict(r.Spec, &s); err != nil {
		return nil, fmt.Errorf("%s %q: spec: %w", r.Type, text.Bound(r.ID), err)
	}
	return &s, nil
}

// target is the path a spec names (its own path, or the resource's id), checked by the guard.
func target(g apply.Guard, specPath, id string) (string, error) {
	p := specPath
	if p == "" {
		p = id
	}
	if err := g.Check(p); err != nil {
		return "", err
	}
	return filepath.Clean(p), nil
}

// parseMode reads an octal mode string ("0644"); def when empty.
func parseMode(s string, def uint32) (uint32, error) {
	if s == "" {
		return def, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %q is not an octal file mode such as \"0644\"", text.Bound(s))
	}
	return uint32(m), nil
}

// fileMode turns a raw mode (0o7777 bits) into what os.Chmod takes.
func fileMode(m uint32) fs.FileMode {
	fm := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		fm |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= fs.ModeSticky
	}
	return fm
}

// ids are the numeric owner and group a spec declares; -1 leaves that side as it is.
type ids struct {
	uid, gid     int
	owner, group string // as declared, for messages
}

// lookupIDs resolves owner and group names on this machine (a number is taken as it is).
func lookupIDs(owner, group string) (ids, error) {
	out := ids{uid: -1, gid: -1, owner: owner, group: group}
	if owner != "" {
		if n, err := strconv.Atoi(owner); err == nil && n >= 0 {
			out.uid = n
		} else {
			u, err := user.Lookup(owner)
			if err != nil {
				return out, fmt.Errorf("owner %q: no such user on this machine: %w", text.Bound(owner), err)
			}
			if out.uid, err = strconv.Atoi(u.Uid); err != nil {
				return out, fmt.Errorf("owner %q: uid %q is not a number", text.Bound(owner), u.Uid)
			}
		}
	}
	if group != "" {
		if n, err := strconv.Atoi(group); err == nil && n >= 0 {
			out.gid = n
		} else {
			g, err := user.LookupGroup(group)
			if err != nil {
				return out, fmt.Errorf("group %q: no such group on this machine: %w", text.Bound(group), err)
			}
			if out.gid, err = strconv.Atoi(g.Gid); err != nil {
				return out, fmt.Errorf("group %q: gid %q is not a number", text.Bound(group), g.Gid)
			}
		}
	}
	return out, nil
}

// stat is what the appliers read of a path, without following a symlink at it.
type stat struct {
	exists bool
	kind   string // "directory", "regular file", "symlink", …
	mode   uint32 // 0o7777 bits
	uid    int
	gid    int
	size   int64
	ino    uint64
}

func lstat(p string) (stat, error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return stat{}, nil
	}
	if errors.Is(err, syscall.ENOTDIR) {
		return stat{}, fmt.Errorf("%s: a parent of it is not a directory", p)
	}
	if err != nil {
		return stat{}, err
	}
	return statOf(fi), nil
}

func statOf(fi fs.FileInfo) stat {
	s := stat{exists: true, kind: kindOf(fi.Mode()), size: fi.Size(), uid: -1, gid: -1}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.mode = st.Mode & 0o7777
		s.uid, s.gid = int(st.Uid), int(st.Gid)
		s.ino = st.Ino
	}
	return s
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// attrDiffs words how s differs in mode, owner and group from what is declared.
func attrDiffs(prefix string, s stat, mode uint32, id ids) []string {
	var out []string
	if s.mode != mode {
		out = append(out, fmt.Sprintf("%smode is %04o, declared %04o", prefix, s.mode, mode))
	}
	if id.uid >= 0 && s.uid != id.uid {
		out = append(out, fmt.Sprintf("%sowner is %d, declared %s", prefix, s.uid, text.Bound(id.owner)))
	}
	if id.gid >= 0 && s.gid != id.gid {
		out = append(out, fmt.Sprintf("%sgroup is %d, declared %s", prefix, s.gid, text.Bound(id.group)))
	}
	return out
}

// openNoFollow opens p for reading (or for its attributes) refusing a symlink at p, and
// without blocking on a FIFO swapped in since it was inspected; want says what it must be.
func openNoFollow(p string, dir bool) (*os.File, error) {
	flags := os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if dir {
		flags |= syscall.O_DIRECTORY
	}
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s became a symlink while it was being read; nothing was followed", p)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if dir != fi.IsDir() || (!dir && !fi.Mode().IsRegular()) {
		f.Close()
		return nil, fmt.Errorf("%s changed kind (now a %s) while it was being read", p, kindOf(fi.Mode()))
	}
	return f, nil
}

// setAttrs sets owner, group and mode on an open file: owner first, since a chown clears
// setuid and setgid bits.
func setAttrs(f *os.File, mode uint32, id ids) error {
	if id.uid >= 0 || id.gid >= 0 {
		if err := f.Chown(id.uid, id.gid); err != nil {
			return fmt.Errorf("chown %s: %w", f.Name(), err)
		}
	}
	if err := f.Chmod(fileMode(mode)); err != nil {
		return fmt.Errorf("chmod %s: %w", f.Name(), err)
	}
	return nil
}

// fixAttrs opens p without following a symlink and sets mode, owner and group on it.
func fixAttrs(p string, dir bool, mode uint32, id ids) error {
	f, err := openNoFollow(p, dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return setAttrs(f, mode, id)
}

// syncDir makes a directory's entries (a rename, a removal) durable.
func syncDir(p string) error {
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", p, err)
	}
	return nil
}

// parentMissing words the failure of writing into a directory that does not exist.
func parentMissing(p string) error {
	return fmt.Errorf("parent directory %s does not exist: declare it as a directory resource before this one (the host never creates one implicitly)", filepath.Dir(p))
}

// checkParent fails unless p's parent exists as a directory.
func checkParent(p string) error {
	fi, err := os.Stat(filepath.Dir(p))
	if errors.Is(err, fs.ErrNotExist) {
		return parentMissing(p)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("parent %s of %s is not a directory", filepath.Dir(p), p)
	}
	return nil
}

// writeAtomic writes p through a temp file in its directory: filled by fill, owned and moded
// as given, synced, renamed over p (replacing a symlink at p, never following it) and the
// directory synced. On error the temp file is removed and p is as it was.
func writeAtomic(p string, mode uint32, id ids, fill func(io.Writer) error) error {
	if err := checkParent(p); err != nil {
		return err
	}
	clearLeftovers(p, "tmp")
	dir, base := filepath.Split(p)
	f, err := os.CreateTemp(dir, "."+base+".mesh-tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := fill(f); err != nil {
		return fail(err)
	}
	if err := setAttrs(f, mode, id); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("sync %s: %w", tmp, err))
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return syncDir(dir)
}

// sameContent says whether the open file f holds exactly want, reading it in pieces.
func sameContent(f io.Reader, want string) (bool, error) {
	buf := make([]byte, min(len(want)+1, 32<<10))
	for {
		n, err := io.ReadFull(f, buf)
		if n > len(want) || string(buf[:n]) != want[:n] {
			return false, nil
		}
		want = want[n:]
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return len(want) == 0, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// clearLeftovers removes what an earlier write or extraction of p left beside it when the host
// stopped mid-way (a crash, a power cut): the temp files and staging directories it names
// ".<name>.mesh-<what>-*", and nothing else. RemoveAll follows no symlink.
func clearLeftovers(p, what string) {
	dir, base := filepath.Split(p)
	if strings.ContainsAny(base, `*?[\`) {
		return // a name Glob would read as a pattern: leave the leftovers rather than guess
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "."+base+".mesh-"+what+"-*"))
	for _, m := range matches {
		os.RemoveAll(m)
	}
}

// removeCreated is Remove of a path the host made, as kind ("directory", "regular file"):
// forgotten when the host did not create it or it is now something else, already removed when
// gone, else rm, then the parent synced.
func removeCreated(ctx context.Context, g apply.Guard, o apply.Owned, specPath, kind string, rm func(path string) (string, error)) (string, error) {
	if !o.Created {
		return "forgotten: it existed before the host managed it", nil
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	p, err := target(g, specPath, o.ID)
	if err != nil {
		return "", err
	}
	s, err := lstat(p)
	switch {
	case err != nil:
		return "", err
	case !s.exists:
		return "removed (it was already gone)", nil
	case s.kind != kind:
		return fmt.Sprintf("forgotten: it is now a %s, not the %s the host created", s.kind, strings.TrimPrefix(kind, "regular ")), nil
	}
	did, err := rm(p)
	if err != nil || did != "removed" {
		return did, err
	}
	return did, syncDir(filepath.Dir(p))
}
