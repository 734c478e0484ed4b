package deliver

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"
)

// Kind names what was wrong with a delivery. The host puts it, with the error's text, in its
// log and heartbeat.
type Kind string

// Refusals of the release itself. They are permanent for the manifest they were found in:
// Deliver remembers them and returns them again without fetching while the manifest under that
// version holds the same bytes, and tries again once it holds others (another digest or
// signature) or the host restarts.
const (
	KindInvalidVersion  Kind = "invalid-version"  // the target is not a version like v1.4.0
	KindMarkedBad       Kind = "marked-bad"       // this node's records mark the version bad
	KindWithdrawn       Kind = "withdrawn"        // the fleet's signed withdrawal list names the version
	KindBadManifest     Kind = "bad-manifest"     // the manifest does not parse or names another version
	KindSignature       Kind = "signature"        // unsigned, unknown key or altered (wraps wire.Err*)
	KindWrongPlatform   Kind = "wrong-platform"   // built for another os or architecture
	KindNoPlatform      Kind = "no-platform"      // the version has no build for this node's platform (never marked bad)
	KindTooLarge        Kind = "too-large"        // the archive is over the size this host accepts
	KindBadArchive      Kind = "bad-archive"      // the strict extractor refused it (wraps archive.ErrUnsafe)
	KindBinaryDigest    Kind = "binary-digest"    // the extracted binary is not the one the manifest signed
	KindPreflight       Kind = "preflight"        // the staged binary's preflight failed or hung
	KindVersionMismatch Kind = "version-mismatch" // the binary reports another version than its manifest
)

// Failures that may pass: Deliver retries them, no sooner than its backoff allows.
const (
	KindNotPublished   Kind = "not-published"   // no manifest under the version yet
	KindObjectMissing  Kind = "object-missing"  // the archive is not in the object store
	KindSizeMismatch   Kind = "size-mismatch"   // the object is larger than the manifest says
	KindTruncated      Kind = "truncated"       // the object is shorter than the manifest says
	KindDigestMismatch Kind = "digest-mismatch" // the object's bytes are not the ones the manifest signed
	KindNoSpace        Kind = "no-space"        // too little free space under versions/, or the disk filled up while writing
	KindBus            Kind = "bus"             // the bus could not be read, or the fetch stalled or was too slow
	KindLocal          Kind = "local"           // a local file, records or process operation failed
)

// Permanent reports whether retrying cannot help while the manifest stays the same.
func (k Kind) Permanent() bool {
	switch k {
	case KindNotPublished, KindObjectMissing, KindSizeMismatch, KindTruncated, KindDigestMismatch,
		KindNoSpace, KindBus, KindLocal:
		return false
	}
	return true
}

// Error is every refusal and failure Deliver returns: the version, what kind of thing was
// wrong, and the wrapped cause naming the detail and, where there is one, the fix.
type Error struct {
	Version string
	Kind    Kind
	Err     error
	// RetryAt is when Deliver will try again after a failure that may pass; zero for a
	// permanent refusal.
	RetryAt time.Time
}

func (e *Error) Error() string {
	if e.Kind.Permanent() {
		return fmt.Sprintf("host %s refused (%s): %v", e.Version, e.Kind, e.Err)
	}
	return fmt.Sprintf("host %s not delivered (%s): %v", e.Version, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func refuse(version string, kind Kind, format string, args ...any) *Error {
	return &Error{Version: version, Kind: kind, Err: fmt.Errorf(format, args...)}
}

// writeErr words a failure to write a local file while doing something. A full disk or quota
// is KindNoSpace, naming the file system to free space on; anything else (an I/O error) is
// KindLocal. Both are the machine's, not the release's: retried, never a refusal.
func writeErr(version, doing string, err error) *Error {
	where := "the disk"
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		where = "the file system mounted at " + mountPoint(filepath.Dir(pe.Path))
	}
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return &Error{Version: version, Kind: KindNoSpace, Err: fmt.Errorf("no space left on %s while %s; free some space there (%w)", where, doing, err)}
	case errors.Is(err, syscall.EDQUOT):
		return &Error{Version: version, Kind: KindNoSpace, Err: fmt.Errorf("disk quota exceeded on %s while %s; free some space there or raise the quota (%w)", where, doing, err)}
	}
	return &Error{Version: version, Kind: KindLocal, Err: fmt.Errorf("%s: %w", doing, err)}
}
