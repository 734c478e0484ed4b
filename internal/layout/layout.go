// Package layout is how a host version is named wherever it appears, and its one binary's name.
//
// It appears as a directory under ROOT/versions on a node, a key in the releases and targets
// buckets, an archive on the bus — the version's spelling, and the name of the one binary a version
// holds. The node's side (rollback) and the bus contract (wire) both import it, and neither may
// import the other, so the rule lives here once. It imports nothing of this module.
package layout

import "golang.org/x/mod/semver"

// BinaryName is the host binary's name: the one file in versions/<v>/ and in a host archive.
const BinaryName = "mesh-host"

// MaxVersionBytes is the longest version ValidVersion accepts.
const MaxVersionBytes = 128

// VersionRule says ValidVersion's rule in an error message.
const VersionRule = "a canonical semantic version like v1.4.0 or v1.5.0-rc.1 (no +build metadata, at most 128 characters)"

// ValidVersion reports whether v can name a host version: a semantic version like v1.4.0 or
// v1.5.0-rc.1 in canonical form, so one version has exactly one directory and one key; with no
// build metadata after a '+' (a KV key may not hold one, and canonical form drops it); and at
// most MaxVersionBytes long (semver bounds no part, and a version read from the bus ends up in
// logs, heartbeats and directory names).
func ValidVersion(v string) bool {
	return len(v) <= MaxVersionBytes && semver.IsValid(v) && semver.Canonical(v) == v
}
