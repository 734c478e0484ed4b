package launcher

// Version is this launcher's own version, apart from the host's: it changes only when the code
// mesh-launcher links changes, so an unchanged launcher builds to the same bytes in every host
// release (`mesh-launcher --version` and `mesh-launcher version` print it). A var, not a
// const, so a test can build a "newer launcher" with
// -ldflags "-X github.com/novox/mesh-host/launcher.Version=v9.0.0".
//
// When the launcher's code changes, bump it here, add it to CHANGELOG.md's "Launcher versions"
// and run `go test ./launcher -run TestLauncherBoundary -update` (launcher/boundary_test.go).
var Version = "v1.3.0"
