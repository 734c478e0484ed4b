package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	relbuild "github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/wire"
)

// Release drives the real mesh-release binary against the lab's bus, as an operator would.
type Release struct {
	Bin    string // mesh-release
	KeyDir string // where keygen wrote release.key and release.pub
	Out    string // where builds go, one directory per version
	NATS   string
	// Launcher is the mesh-launcher each release carries (the one the lab's nodes run); ""
	// builds releases without one (--no-launcher, schema 1), as for hosts older than schema 2.
	Launcher string
	// Env is more environment (KEY=VALUE) for every command: the bus's credentials and CA
	// (MESH_NATS_CREDS, MESH_NATS_CA) when it is a cluster of stock servers.
	Env []string
}

// Run runs one mesh-release command and returns its output.
func (r *Release) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, r.Bin, args...)
	cmd.Env = append(os.Environ(), r.Env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("mesh-release %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// Keygen makes the release key pair and returns the public key, as hosts are told to trust it.
func (r *Release) Keygen(ctx context.Context) (string, error) {
	if _, err := r.Run(ctx, "keygen", "--out", r.KeyDir); err != nil {
		return "", err
	}
	pub, err := os.ReadFile(filepath.Join(r.KeyDir, "release.pub"))
	return strings.TrimSpace(string(pub)), err
}

// Ship builds (packs and signs) binary as version and publishes it on the bus.
func (r *Release) Ship(ctx context.Context, version, binary string) error {
	dir, err := r.Build(ctx, version, binary)
	if err != nil {
		return err
	}
	return r.Publish(ctx, dir)
}

// KeyPath is the release key's file: it signs releases, and targets and withdrawals too (the
// lab's hosts trust it as their target key, trusted_target_keys being empty).
func (r *Release) KeyPath() string { return filepath.Join(r.KeyDir, "release.key") }

// Build packs and signs binary as version, with Launcher beside it, into Out/<version> and
// returns that directory, ready for `mesh-release publish`.
func (r *Release) Build(ctx context.Context, version, binary string) (string, error) {
	dir := filepath.Join(r.Out, version)
	args := []string{"build", "--version", version, "--binary", binary, "--key", r.KeyPath(), "-o", dir}
	if r.Launcher != "" {
		args = append(args, "--launcher", r.Launcher)
	} else {
		args = append(args, "--no-launcher")
	}
	_, err := r.Run(ctx, args...)
	return dir, err
}

// BuildTree builds pkg as version for linux/<each of arches> from the source tree src, each with
// the launcher built from the same tree, and signs it: one release for every platform, in
// Out/<version>, whose directory it returns. The host is built by `mesh-release build
// --platforms`, as an operator builds a release; a fixture standing in for the host (a release
// broken on one platform) by the same code, release/build with Options.HostPackage, as the
// command builds only the host's package.
func (r *Release) BuildTree(ctx context.Context, src, version, pkg string, arches []string) (string, error) {
	dir := filepath.Join(r.Out, version)
	var ps []wire.Platform
	for _, a := range arches {
		ps = append(ps, wire.Platform{OS: "linux", Arch: a})
	}
	if pkg == PkgHost {
		var names []string
		for _, p := range ps {
			names = append(names, p.String())
		}
		cmd := exec.CommandContext(ctx, r.Bin, "build", "--version", version, "--platforms", strings.Join(names, ","), "--key", r.KeyPath(), "-o", dir)
		cmd.Dir, cmd.Env = src, append(os.Environ(), r.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return dir, fmt.Errorf("mesh-release build %s --platforms %s: %w\n%s", version, strings.Join(names, ","), err, out)
		}
		return dir, nil
	}
	key, err := relbuild.LoadKey(r.KeyPath())
	if err != nil {
		return dir, err
	}
	if _, err := relbuild.Build(ctx, relbuild.Options{Version: version, Key: key, OutDir: dir, Platforms: ps, SourceDir: src, HostPackage: pkg}); err != nil {
		return dir, fmt.Errorf("build %s of %s for %d platforms: %w", version, pkg, len(ps), err)
	}
	return dir, nil
}

// Publish publishes a release directory Build made.
func (r *Release) Publish(ctx context.Context, dir string) error {
	_, err := r.Run(ctx, "publish", dir, "--nats", r.NATS)
	return err
}

// Target sets the target of nodes (or, with none, the fleet) to version, signed with the
// release key.
func (r *Release) Target(ctx context.Context, version string, nodes ...string) error {
	args := append([]string{"target"}, nodes...)
	if len(nodes) == 0 {
		args = append(args, "--fleet")
	}
	_, err := r.Run(ctx, append(args, version, "--key", r.KeyPath(), "--nats", r.NATS)...)
	return err
}

// Withdraw withdraws version for reason (`mesh-release withdraw`), signed with the release key,
// and returns what it printed.
func (r *Release) Withdraw(ctx context.Context, version, reason string) (string, error) {
	return r.Run(ctx, "withdraw", version, "--reason", reason, "--key", r.KeyPath(), "--nats", r.NATS)
}
