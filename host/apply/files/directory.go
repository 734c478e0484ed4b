package files

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire"
)

// Directory is the applier of "directory" resources (wire.DirectorySpec): a directory at path
// (default: the id) with mode (default 0755) and, when declared, owner and group. A symlink
// found at path is replaced by the directory (the link, not where it leads); anything else
// found there is refused, never removed.
func Directory(g apply.Guard) apply.Applier { return directory{g: g} }

type directory struct{ g apply.Guard }

type dirWant struct {
	path string
	mode uint32
	id   ids
}

func (d directory) want(r wire.Resource) (dirWant, error) {
	spec, err := specOf[wire.DirectorySpec](r)
	if err != nil {
		return dirWant{}, err
	}
	p, err := target(d.g, spec.Path, r.ID)
	if err != nil {
		return dirWant{}, err
	}
	mode, err := parseMode(spec.Mode, 0o755)
	if err != nil {
		return dirWant{}, err
	}
	id, err := lookupIDs(spec.Owner, spec.Group)
	if err != nil {
		return dirWant{}, err
	}
	return dirWant{path: p, mode: mode, id: id}, nil
}

func (d directory) Inspect(ctx context.Context, r wire.Resource) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w, err := d.want(r)
	if err != nil {
		return nil, err
	}
	s, err := lstat(w.path)
	if err != nil {
		return nil, err
	}
	switch {
	case !s.exists:
		return []string{"absent"}, nil
	case s.kind != "directory":
		return []string{fmt.Sprintf("is a %s, declared a directory", s.kind)}, nil
	}
	return attrDiffs("", s, w.mode, w.id), nil
}

func (d directory) Apply(ctx context.Context, r wire.Resource) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	w, err := d.want(r)
	if err != nil {
		return false, err
	}
	s, err := lstat(w.path)
	if err != nil {
		return false, err
	}
	switch {
	case s.exists && s.kind == "directory":
		if len(attrDiffs("", s, w.mode, w.id)) == 0 {
			return false, nil
		}
		return false, fixAttrs(w.path, true, w.mode, w.id)
	case s.kind == "symlink":
		// The link is replaced, not followed: what it points to is left as it is.
		if err := syscall.Unlink(w.path); err != nil {
			return false, fmt.Errorf("replacing the symlink at %s: %w", w.path, err)
		}
	case s.exists:
		return false, fmt.Errorf("%s is a %s, declared a directory: the host does not replace what it did not create; remove it first", w.path, s.kind)
	}
	if err := checkParent(w.path); err != nil {
		return false, err
	}
	// Made private first, so it is never reachable with a wider mode or the wrong owner.
	if err := os.Mkdir(w.path, 0o700); err != nil {
		return false, fmt.Errorf("creating %s: %w", w.path, err)
	}
	if err := fixAttrs(w.path, true, w.mode, w.id); err != nil {
		return true, err
	}
	return !s.exists, syncDir(filepath.Dir(w.path))
}

func (d directory) Remove(ctx context.Context, o apply.Owned) (string, error) {
	spec, err := specOf[wire.DirectorySpec](o.Resource())
	if err != nil {
		return "", err
	}
	return removeCreated(ctx, d.g, o, spec.Path, "directory", func(p string) (string, error) {
		// rmdir never follows a symlink and never removes content.
		if err := syscall.Rmdir(p); err != nil {
			if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
				return "forgotten: not empty, holds things the host did not create", nil
			}
			return "", fmt.Errorf("removing %s: %w", p, err)
		}
		return "removed", nil
	})
}
