package wire

import (
	"fmt"
	"github.com/novox/mesh-host/internal/text"
	"path"
	"strings"
)

// What a declaration may never touch (seed 000: "the installation owns the host; the host owns
// everything else"): the launcher's unit, its drop-ins and its binary, the packaged host, and the
// host's root (versions, records, store, host.json, credentials). The package that installs them
// may be declared (InstallationPackage); no other resource may write them. The parser refuses them
// lexically, after cleaning; the host checks again against symlinks when it applies
// (apply.Guard). A directory *above* a protected path (/var/lib) may be declared: the appliers
// never remove a directory that is not empty, so declaring it cannot take the root with it.

// DefaultRoot is the host's root as packaged; a host also refuses its configured root.
const DefaultRoot = "/var/lib/mesh-host"

// LauncherUnit is the launcher's systemd unit.
const LauncherUnit = "mesh-launcher.service"

// launcherUnitStem is the launcher's unit name without its suffix: a socket, timer or path unit
// of that name would start the launcher's service, and a drop-in directory of it would change it.
const launcherUnitStem = "mesh-launcher"

// InstallationPackage is the Debian package that installs the launcher and the host. A package
// resource may name it (seed 000: the host may replace its own binary, never stop its own unit):
// its postinst reloads systemd and leaves the unit running when the running launcher takes a
// new binary by exec (`mesh-launcher supports takeover`), so applying it never stops the host.
// What it installs stays refused to every other resource: the launcher's binary and unit above.
const InstallationPackage = "mesh-host"

// protectedPaths are refused themselves and everything under them.
var protectedPaths = []string{
	DefaultRoot,
	"/usr/bin/mesh-launcher",
	"/bin/mesh-launcher", // the same file on a merged-/usr system
	"/usr/share/mesh-host",
}

// systemdDirs hold unit files, drop-ins and the .wants/.requires links that enable units. In
// them, any path element naming the launcher's unit (mesh-launcher.service, its .d drop-in
// directory, a mesh-launcher.timer that would start it, its link in multi-user.target.wants) is
// refused.
var systemdDirs = []string{
	"/etc/systemd",
	"/run/systemd",
	"/lib/systemd",
	"/usr/lib/systemd",
	"/usr/local/lib/systemd",
}

// CheckManagedPath refuses p unless it is absolute and, once cleaned, neither is nor lies under
// a protected path, nor under root (the host's configured root; "" for DefaultRoot only), nor
// names the launcher's unit inside a systemd directory, and is not the filesystem root. It
// checks the words only; symlinks are the applier's to resolve.
func CheckManagedPath(p, root string) error {
	clean, err := cleanManaged(p)
	if err != nil {
		return err
	}
	for _, prot := range protectedList(root) {
		if within(clean, prot) {
			return fmt.Errorf("path %q is inside %s, which the installation owns, not the host", text.Bound(p), prot)
		}
	}
	if unit := launcherUnitIn(clean); unit != "" {
		return fmt.Errorf("path %q names %s, the launcher's own unit: the package owns it, never a declaration", text.Bound(p), unit)
	}
	return nil
}

// CheckManagedTree is CheckManagedPath for a path whose contents a declaration fills or exposes
// (an archive extracted into it, a container volume's host side): it also refuses a path above
// a protected one or the root, since what lands beneath it could reach inside (an archive at
// /var/lib holding mesh-host/versions/…, /var/lib mounted into a container). Systemd's
// directories are not refused whole (an archive of units into /etc/systemd/system is fair):
// the extractor checks each entry's own path with CheckManagedPath.
func CheckManagedTree(p, root string) error {
	if err := CheckManagedPath(p, root); err != nil {
		return err
	}
	clean := path.Clean(p)
	for _, prot := range protectedList(root) {
		if within(prot, clean) {
			return fmt.Errorf("path %q holds %s, which the installation owns: what is put under it could reach inside", text.Bound(p), prot)
		}
	}
	return nil
}

// cleanManaged returns p cleaned, refusing a relative path, a NUL byte and the filesystem root.
func cleanManaged(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", text.Bound(p))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte", text.Bound(p))
	}
	clean := path.Clean(p)
	if clean == "/" {
		return "", fmt.Errorf("path %q is the filesystem root", text.Bound(p))
	}
	return clean, nil
}

// protectedList is protectedPaths plus root, cleaned.
func protectedList(root string) []string {
	list := protectedPaths
	if root != "" && path.IsAbs(root) {
		if r := path.Clean(root); r != "/" {
			list = append(list[:len(list):len(list)], r)
		}
	}
	return list
}

// within reports whether clean is dir or lies under it (both cleaned).
func within(clean, dir string) bool {
	return clean == dir || strings.HasPrefix(clean, dir+"/")
}

// launcherUnitIn returns the element of clean that names the launcher's unit when clean lies in
// a systemd directory, or "".
func launcherUnitIn(clean string) string {
	for _, dir := range systemdDirs {
		if !strings.HasPrefix(clean, dir+"/") {
			continue
		}
		for _, el := range strings.Split(clean[len(dir)+1:], "/") {
			if isLauncherUnit(el) {
				return el
			}
		}
	}
	return ""
}

// isLauncherUnit reports whether name is the launcher's unit by a name systemd reads as it or
// as something that starts or changes it: mesh-launcher, mesh-launcher.service, its
// mesh-launcher.service.d drop-ins and .wants/.requires, or mesh-launcher.socket/.timer/.path
// (which activate the service of the same name by default) — any unit type of that name.
// mesh-launcher.conf, a drop-in of another unit, is not.
func isLauncherUnit(name string) bool {
	if name == launcherUnitStem {
		return true
	}
	for _, extra := range []string{".d", ".wants", ".requires"} {
		name = strings.TrimSuffix(name, extra)
	}
	typ, ok := strings.CutPrefix(name, launcherUnitStem+".")
	if !ok {
		return false
	}
	switch typ {
	case "service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope":
		return true
	}
	return false
}

// CheckManagedUnit refuses a unit name a declaration may not manage: empty, holding '/' or NUL,
// or the launcher's own unit by any spelling systemd reads as it (mesh-launcher,
// mesh-launcher.service, its .d drop-in directory) or a unit that would start it
// (mesh-launcher.socket, .timer, .path).
func CheckManagedUnit(name string) error {
	if name == "" {
		return fmt.Errorf("unit name is empty")
	}
	if strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("unit %q: a unit name holds no '/' or NUL", text.Bound(name))
	}
	if isLauncherUnit(name) {
		if n := strings.TrimSuffix(name, ".d"); n == LauncherUnit || n == launcherUnitStem {
			return fmt.Errorf("unit %q is the launcher's own unit: the package owns it, never a declaration", text.Bound(name))
		}
		return fmt.Errorf("unit %q would start or change the launcher's own unit (%s): the package owns it, never a declaration", text.Bound(name), LauncherUnit)
	}
	return nil
}
