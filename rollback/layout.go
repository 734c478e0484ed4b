package rollback

import (
	"path/filepath"

	"github.com/novox/mesh-host/internal/layout"
)

// DefaultRoot is where the launcher and the host keep everything unless --root or
// MESH_HOST_ROOT moves it.
const DefaultRoot = "/var/lib/mesh-host"

// The on-disk layout under a root. Everything the launcher and host keep lives below it.
const (
	BinaryName    = layout.BinaryName // versions/<v>/mesh-host
	StagingPrefix = ".staging-"       // versions/.staging-*: a version being staged
	versionsDir   = "versions"
	recordsName   = "records.db"
	launcherLock  = "launcher.lock"
	hostLock      = "host.lock"
)

// VersionsDir is ROOT/versions.
func VersionsDir(root string) string { return filepath.Join(root, versionsDir) }

// VersionDir is ROOT/versions/<v>.
func VersionDir(root, version string) string { return filepath.Join(root, versionsDir, version) }

// BinaryPath is ROOT/versions/<v>/mesh-host.
func BinaryPath(root, version string) string {
	return filepath.Join(VersionDir(root, version), BinaryName)
}

// RecordsPath is ROOT/records.db.
func RecordsPath(root string) string { return filepath.Join(root, recordsName) }
