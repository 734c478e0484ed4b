package rollback

import (
	"path/filepath"
)

// The on-disk layout under a root. Everything the launcher and host keep lives below it.
const (
	VersionsDirName = "versions"
	StagingPrefix   = ".staging-"
	BinaryName      = "mesh-host"
	RecordsName     = "records.db"
	StoreName       = "store.db"
	launcherLock    = "launcher.lock"
	hostLock        = "host.lock"
)

// VersionsDir is ROOT/versions.
func VersionsDir(root string) string { return filepath.Join(root, VersionsDirName) }

// VersionDir is ROOT/versions/<v>.
func VersionDir(root, version string) string { return filepath.Join(root, VersionsDirName, version) }

// BinaryPath is ROOT/versions/<v>/mesh-host.
func BinaryPath(root, version string) string {
	return filepath.Join(VersionDir(root, version), BinaryName)
}

// RecordsPath is ROOT/records.db.
func RecordsPath(root string) string { return filepath.Join(root, RecordsName) }
