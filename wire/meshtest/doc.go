// Package meshtest is the test support every side's tests share: a real bus, hostile archives,
// fixed keys, bounded waits.
//
// Each thing a test needs is made in one place:
//
//   - a real bus: StartBus runs an embedded NATS server with JetStream on a free loopback port and
//     creates the mesh's buckets and stream as `mesh-release init` does (wire/buslayout, so that
//     test support imports nothing of the release side); StartServer runs a bare one that
//     refuses clients as a test asks;
//   - hostile archives: Archive writes tar+zstd from hand-made entries, as Pack never would;
//   - release keys: ReleaseKey, SecondKey and StrangerKey, ed25519 from fixed seeds, the same in
//     every run, so examples can print what is signed with them;
//   - what to wait on: ReadReconciles reads a host's store.db without disturbing the host,
//     Eventually polls a condition; tests wait on records, store state and heartbeats, never on
//     log text or a fixed sleep;
//   - what a test may not do without: SkipUnlessCI skips when a tool or prerequisite is missing
//     here, and fails under CI, where .ci/run installs them all; RequireArch does the same for
//     another architecture's binaries (qemu-user under binfmt_misc).
//
// It lives beside the contract it speaks (as net/http/httptest beside net/http), so internal/
// imports nothing of wire/. It is imported only by _test.go files; lab's
// TestTestSupportIsImportedOnlyByTests keeps it so.
package meshtest
