// Package debian applies "package" resources: a Debian package present, or present at a version.
//
// It is installed with dpkg from a .deb blob or with apt-get from the machine's own repositories.
// It never uninstalls: a package no longer declared is forgotten, since the host cannot know what
// else on the machine needs it.
package debian

import (
	"bytes"
	"context"
	_ "crypto/sha256" // go-digest verifies sha256 only once it is linked in
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Packages is the package applier. Its fields name the programs it runs (PATH is searched), so
// a test can point them elsewhere; Package gives the real ones.
type Packages struct {
	Blobs     apply.Blobs
	DpkgQuery string // dpkg-query
	Dpkg      string // dpkg
	DpkgDeb   string // dpkg-deb
	AptGet    string // apt-get
	// TempDir holds a .deb while it is checked and installed; "" is the system's.
	TempDir string
}

// Package is the applier of "package" resources on this machine's dpkg.
func Package(b apply.Blobs) apply.Applier {
	return &Packages{Blobs: b, DpkgQuery: "dpkg-query", Dpkg: "dpkg", DpkgDeb: "dpkg-deb", AptGet: "apt-get"}
}

// Forgotten is what Remove says: it never uninstalls.
const Forgotten = "forgotten: packages are never uninstalled; the host cannot know what else needs it"

// outputTail bounds the command output an error carries: its last KiB, where dpkg and apt say
// what went wrong.
const outputTail = 1024

// Debian policy's names (with an optional ":arch") and versions; checked before either reaches a command line, so neither
// can be read as an option.
var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$`)
	versionRE = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~:-]*$`)
	digestRE  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// pkg is a resource resolved: its package name and spec.
type pkg struct {
	name string
	spec *wire.PackageSpec
}

func resolve(r wire.Resource) (pkg, error) {
	spec, ok := r.Parsed.(*wire.PackageSpec)
	if !ok || spec == nil {
		return pkg{}, fmt.Errorf("package %s: spec is %T, not a package spec", text.Bound(r.ID), r.Parsed)
	}
	name := spec.Name
	if name == "" {
		name = r.ID
	}
	if !nameRE.MatchString(name) {
		return pkg{}, fmt.Errorf("package %q: not a Debian package name (lower-case letters, digits, + - .; two or more; optionally :arch)", text.Bound(name))
	}
	if spec.Version != "" && !versionRE.MatchString(spec.Version) {
		return pkg{}, fmt.Errorf("package %s: version %q is not a Debian version", name, text.Bound(spec.Version))
	}
	if spec.Source != "" && !digestRE.MatchString(spec.Source) {
		return pkg{}, fmt.Errorf("package %s: source %q is not a digest (sha256:<64 hex>)", name, text.Bound(spec.Source))
	}
	return pkg{name: name, spec: spec}, nil
}

// status is what dpkg says of a package: its state ("installed", "config-files", … ; "" when
// dpkg has never heard of it) and its version.
type status struct {
	state, version string
}

// installed: configured; pending triggers leave it in use as it is.
func (s status) installed() bool {
	return s.state == "installed" || s.state == "triggers-pending" || s.state == "triggers-awaiting"
}

// parseStatus reads `dpkg-query -W -f '${db:Status-Status} ${Version}'`.
func parseStatus(out []byte) (status, error) {
	line := strings.TrimSpace(string(out))
	if strings.ContainsRune(line, '\n') {
		return status{}, fmt.Errorf("dpkg-query answered more than one package: %q", text.Bound(line))
	}
	state, version, _ := strings.Cut(line, " ")
	if state == "" {
		return status{}, fmt.Errorf("dpkg-query answered no status: %q", text.Bound(line))
	}
	return status{state: state, version: version}, nil
}

func (p *Packages) query(ctx context.Context, name string) (status, error) {
	out, both, err := p.run(ctx, p.DpkgQuery, "-W", "-f", "${db:Status-Status} ${Version}", name)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 && bytes.Contains(both, []byte("no packages found")) {
		return status{}, nil // dpkg has never heard of it
	}
	if err != nil {
		return status{}, fmt.Errorf("package %s: dpkg-query: %w%s", name, err, tail(both))
	}
	return parseStatus(out)
}

// differences are how s differs from p's spec.
func differences(p pkg, s status) []string {
	switch {
	case s.state == "" || s.state == "not-installed":
		return []string{fmt.Sprintf("package %s is absent", p.name)}
	case !s.installed():
		return []string{fmt.Sprintf("package %s is %s, declared installed", p.name, s.state)}
	case p.spec.Version != "" && s.version != p.spec.Version:
		return []string{fmt.Sprintf("package %s is installed at %s, declared %s", p.name, s.version, p.spec.Version)}
	}
	return nil
}

// Inspect asks dpkg whether the package is installed, at the declared version if one is.
func (p *Packages) Inspect(ctx context.Context, r wire.Resource) ([]string, error) {
	pk, err := resolve(r)
	if err != nil {
		return nil, err
	}
	s, err := p.query(ctx, pk.name)
	if err != nil {
		return nil, err
	}
	return differences(pk, s), nil
}

// Apply installs the package when it is absent or at another version than declared: the .deb
// named by Source with dpkg, else NAME[=VERSION] with apt-get. created says it was absent.
func (p *Packages) Apply(ctx context.Context, r wire.Resource) (bool, error) {
	pk, err := resolve(r)
	if err != nil {
		return false, err
	}
	s, err := p.query(ctx, pk.name)
	if err != nil {
		return false, err
	}
	if differences(pk, s) == nil {
		return false, nil
	}
	created := !s.installed()
	if pk.spec.Source != "" {
		return created, p.installDeb(ctx, pk)
	}
	target := pk.name
	if pk.spec.Version != "" {
		target += "=" + pk.spec.Version
	}
	// The machine's configuration files stay as they are: dpkg asks nobody.
	// --allow-downgrades: the declared version is the one wanted, older or not (dpkg -i
	// downgrades too).
	out, err := p.combined(ctx, p.AptGet, "install", "-y", "--no-install-recommends", "--allow-downgrades",
		"-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold", target)
	if err != nil {
		return created, fmt.Errorf("package %s: apt-get install %s: %w%s", pk.name, target, err, tail(out))
	}
	return created, nil
}

// installDeb fetches the .deb, checks it is the package and version declared, and installs it.
func (p *Packages) installDeb(ctx context.Context, pk pkg) error {
	deb, err := p.fetch(ctx, pk)
	if err != nil {
		return err
	}
	defer os.Remove(deb)
	fields, out, err := p.run(ctx, p.DpkgDeb, "-f", deb, "Package", "Version", "Architecture")
	if err != nil {
		return fmt.Errorf("package %s: %s is not a .deb dpkg-deb can read: %w%s", pk.name, pk.spec.Source, err, tail(out))
	}
	name, version, arch := control(fields)
	base, wantArch, qualified := strings.Cut(pk.name, ":")
	if name != base {
		return fmt.Errorf("package %s: %s is the package %q, not %s: refused", pk.name, pk.spec.Source, text.Bound(name), base)
	}
	if qualified && arch != wantArch && arch != "all" {
		return fmt.Errorf("package %s: %s is for architecture %q, not %s: refused", pk.name, pk.spec.Source, text.Bound(arch), wantArch)
	}
	if pk.spec.Version != "" && version != pk.spec.Version {
		return fmt.Errorf("package %s: %s is version %q, declared %s: refused", pk.name, pk.spec.Source, text.Bound(version), pk.spec.Version)
	}
	if out, err := p.combined(ctx, p.Dpkg, "--force-confdef", "--force-confold", "-i", deb); err != nil {
		return fmt.Errorf("package %s: dpkg -i %s (%s): %w%s", pk.name, pk.spec.Source, version, err, tail(out))
	}
	return nil
}

// fetch copies the blob to a temp file, checking its digest on the way (the store verified it
// too: this is the check of what is on disk now, the file dpkg reads).
func (p *Packages) fetch(ctx context.Context, pk pkg) (string, error) {
	if p.Blobs == nil {
		return "", fmt.Errorf("package %s: source %s: no blob store here", pk.name, pk.spec.Source)
	}
	rc, err := p.Blobs.Open(ctx, pk.spec.Source)
	if err != nil {
		return "", fmt.Errorf("package %s: fetching %s: %w", pk.name, pk.spec.Source, err)
	}
	defer rc.Close()
	f, err := os.CreateTemp(p.TempDir, "mesh-host-package-*.deb")
	if err != nil {
		return "", fmt.Errorf("package %s: %w", pk.name, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	v := digest.Digest(pk.spec.Source).Verifier() // a sha256 digest: the spec was checked
	if _, err := io.Copy(io.MultiWriter(f, v), rc); err != nil {
		return "", fmt.Errorf("package %s: fetching %s: %w", pk.name, pk.spec.Source, err)
	}
	if !v.Verified() {
		return "", fmt.Errorf("package %s: the blob read does not match %s: refused", pk.name, pk.spec.Source)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("package %s: %w", pk.name, err)
	}
	ok = true
	return f.Name(), nil
}

// control reads `dpkg-deb -f DEB Package Version Architecture`: "Field: value" lines.
func control(out []byte) (name, version, arch string) {
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Package":
			name = strings.TrimSpace(v)
		case "Version":
			version = strings.TrimSpace(v)
		case "Architecture":
			arch = strings.TrimSpace(v)
		}
	}
	return name, version, arch
}

// Remove never uninstalls.
func (p *Packages) Remove(ctx context.Context, o apply.Owned) (string, error) {
	return Forgotten, nil
}

// run runs a program non-interactively and returns its standard output, and its standard
// output and error together (for errors: dpkg and apt say what failed in either).
func (p *Packages) run(ctx context.Context, prog string, args ...string) (stdout, combined []byte, err error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	var out bytes.Buffer
	both := &lockedBuffer{}
	cmd.Stdout = io.MultiWriter(&out, both)
	cmd.Stderr = both
	err = cmd.Run()
	return out.Bytes(), both.b.Bytes(), err
}

// combined runs a program non-interactively and returns its output and errors as one stream, in
// the order it wrote them (one pipe for both), so the tail of it ends with what went wrong.
func (p *Packages) combined(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	var both bytes.Buffer
	cmd.Stdout, cmd.Stderr = &both, &both
	err := cmd.Run()
	return both.Bytes(), err
}

// lockedBuffer takes standard output and error, which exec copies on goroutines of their own.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// tail is the last KiB of out, on a line of its own, or nothing when there is none.
func tail(out []byte) string {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return ""
	}
	if len(out) > outputTail {
		cut := len(out) - outputTail
		for cut < len(out) && !utf8.RuneStart(out[cut]) {
			cut++
		}
		out = append([]byte("…"), out[cut:]...)
	}
	return "\n" + string(out)
}
