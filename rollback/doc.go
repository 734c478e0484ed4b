// Package rollback is the one library the launcher and the host share: the kept versions and their
// rules.
//
// It holds the versions kept side by side under ROOT/versions, the records about them in
// ROOT/records.db, and the rules both processes follow — Choose, Confirm (which retires what is no
// longer needed), MarkBad and the failure policy. Both processes call the same Choose; that single
// function is what keeps them from looping against each other.
//
// The launcher owns the records' schema and is the only one that migrates it (OpenForLauncher,
// and OpenForInstall for `mesh-launcher install`);
// the host and `mesh-launcher status` open what the launcher made (OpenForHost), and the host only
// adds rows, so an older launcher and a newer host can share the file.
//
// The locks are the tree's one file lock (internal/filelock: flock, on Linux and the BSDs); the
// boot clock is Linux's (clock_linux.go). Off Linux the package builds, so the release side that
// shares its text rules does too, and a binary is hashed each time it is checked
// (fileid_other.go).
//
// A version reaches versions/<v> one way, whoever brings it (delivery in the host, install in
// the launcher): a Staging, committed by recording its digest and provenance, then one rename.
package rollback
