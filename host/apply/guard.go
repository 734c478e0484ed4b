package apply

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Guard is the applier's second look at a path the parser already checked by its words
// (wire.CheckManagedPath): on the machine, a symlink can make a harmless-looking path lead
// into the host's root or onto the launcher (/srv/x → /var/lib/mesh-host makes
// /srv/x/versions/v9/mesh-host the next host binary). Root is the host's configured root.
type Guard struct {
	Root string
	// roots, when set by NewGuard, are the roots as they resolved then: every Check of one
	// reconcile (one per resource, the drift check's hot path) reuses them. Nil: resolved at
	// each Check.
	roots []string
}

// NewGuard is a Guard of root that resolves the roots' symlinks once, now. The host makes one
// per reconcile.
func NewGuard(root string) Guard {
	g := Guard{Root: root}
	g.roots = g.resolveRoots()
	return g
}

// maxLinks bounds how many symlinks one path may pass through (Linux's own limit is 40).
const maxLinks = 40

// Check refuses path unless it passes wire.CheckManagedPath both as written (cleaned) and as
// it resolves on this machine: every existing component, the last one included, with its
// symlinks followed. A component that does not exist (yet) ends the resolution; the rest is
// taken as written, since nothing beyond it can be a symlink. It reads the machine at the
// moment of the call: appliers call it just before they change anything, and never follow a
// symlink at the final component when they write.
func (g Guard) Check(path string) error {
	if err := wire.CheckManagedPath(path, g.Root); err != nil {
		return err
	}
	clean := filepath.Clean(path)
	resolved, err := resolve(clean)
	if err != nil {
		return fmt.Errorf("path %q: resolving its symlinks: %w", text.Bound(path), err)
	}
	roots := g.roots
	if roots == nil {
		roots = g.resolveRoots()
	}
	if resolved == clean && len(roots) == 1 {
		return nil // no symlink on the way, none at the root: the lexical check said it all
	}
	for _, root := range roots {
		if err := wire.CheckManagedPath(resolved, root); err != nil {
			return fmt.Errorf("path %q leads through a symlink to %q, which is refused: %w",
				text.Bound(path), text.Bound(resolved), err)
		}
	}
	return nil
}

// resolveRoots is what resolved paths are checked against: the configured root as written and as it
// resolves, and the default root as it resolves (a packaged /var/lib/mesh-host may itself be
// a symlink to a bigger disk).
func (g Guard) resolveRoots() []string {
	out := []string{g.Root}
	for _, r := range []string{g.Root, wire.DefaultRoot} {
		if r == "" {
			continue
		}
		if res, err := resolve(filepath.Clean(r)); err == nil && res != filepath.Clean(r) {
			out = append(out, res)
		}
	}
	return out
}

// resolve follows the symlinks of an absolute, clean path component by component, as the
// kernel would, stopping at the first component that does not exist and appending the rest as
// written. Unlike filepath.EvalSymlinks it does not fail on a dangling link: where a dangling
// link points matters as much as where a live one does.
func resolve(p string) (string, error) {
	queue := splitPath(p)
	resolved := "/"
	links := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			// Nothing exists from here on, so nothing further can redirect the path.
			return filepath.Join(append([]string{next}, queue...)...), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		links++
		if links > maxLinks {
			return "", fmt.Errorf("more than %d symlinks at %q (a loop?)", maxLinks, next)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		queue = append(splitPath(target), queue...)
	}
	return resolved, nil
}

func splitPath(p string) []string { return strings.Split(p, "/") }
