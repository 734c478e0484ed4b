package wire

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/text"
)

// PlatformBuild is one platform's build in a schema 4 manifest: its host archive (an archive
// holding mesh-host alone, named PlatformObjectName), the deltas of its host binary against
// earlier releases' binaries of the same platform, and the launcher built with it, an object
// of its own that a node fetches only when it lacks it.
type PlatformBuild struct {
	Platform     string         `json:"platform"`
	Object       string         `json:"object"`
	Size         int64          `json:"size"`
	Digest       digest.Digest  `json:"digest"`
	BinaryDigest digest.Digest  `json:"binary_digest"`
	Deltas       []ReleaseDelta `json:"deltas,omitempty"`
	Launcher     LauncherObject `json:"launcher,omitzero"`
}

// LauncherObject is a mesh-launcher as an object of its own: Object (LauncherObjectName) is the
// zstd of the binary, Size bytes of sha256 Digest; the binary is BinarySize bytes of
// BinaryDigest. Deltas rebuild the binary from earlier launchers' binaries (BaseVersion is a
// launcher version; objects named LauncherDeltaObjectName). The same launcher is the same object
// in every release that carries it.
type LauncherObject struct {
	Version      string         `json:"version"`
	Object       string         `json:"object"`
	Size         int64          `json:"size"`
	Digest       digest.Digest  `json:"digest"`
	BinaryDigest digest.Digest  `json:"binary_digest"`
	BinarySize   int64          `json:"binary_size"`
	Deltas       []ReleaseDelta `json:"deltas,omitempty"`
}

// IsZero reports whether no launcher is named.
func (l LauncherObject) IsZero() bool {
	return l.Version == "" && l.Object == "" && l.Size == 0 && l.Digest == "" && l.BinaryDigest == "" && l.BinarySize == 0 && len(l.Deltas) == 0
}

// ErrNoPlatformBuild is what Manifest.For's error is (errors.Is) when a release has no build for
// the node's platform: the node refuses the version without marking it bad, until its manifest
// changes.
var ErrNoPlatformBuild = errors.New("no build for this platform")

// NoPlatformBuildError says which platform a release lacks and which it has:
// "v1.4.0 has no build for linux/arm64 (it has linux/amd64)".
type NoPlatformBuildError struct {
	Version string
	Want    Platform
	Have    []Platform
}

func (e *NoPlatformBuildError) Error() string {
	names := make([]string, len(e.Have))
	for i, h := range e.Have {
		names[i] = h.String()
	}
	return fmt.Sprintf("%s has no build for %s (it has %s)", e.Version, e.Want, strings.Join(names, ", "))
}

// Is makes errors.Is(err, ErrNoPlatformBuild) hold.
func (e *NoPlatformBuildError) Is(target error) bool { return target == ErrNoPlatformBuild }

// Build is one platform's view of a manifest of any schema: what a node of that platform
// fetches, verifies and runs. Launcher is the launcher to stage: in schema 4 an object of its
// own; in schema 2 and 3 the one riding in the archive (LauncherInArchive, Launcher.Object "",
// Launcher.BinaryDigest and BinarySize its digest and size). Zero when the release has none.
type Build struct {
	Version           string
	Schema            int
	Platform          Platform
	Object            string
	Size              int64
	Digest            digest.Digest
	BinaryDigest      digest.Digest
	Deltas            []ReleaseDelta
	Launcher          LauncherObject
	LauncherInArchive bool
}

// PlatformList is the platforms a manifest has builds for: schema 4's list, or the one os/arch
// of schemas 1–3 (arm taken as arm/v7).
func (m Manifest) PlatformList() []Platform {
	if m.Schema != ManifestSchemaPlatforms {
		return []Platform{NodePlatform(m.OS, m.Arch, "")}
	}
	out := make([]Platform, 0, len(m.Platforms))
	for _, b := range m.Platforms {
		if p, err := ParsePlatform(b.Platform); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// For is the build of m a node of platform p takes: the entry for p exactly, else, for 32-bit
// arm, the build of the highest variant not above p's (an arm/v7 machine runs an arm/v6
// build). A manifest without one is an error wrapping ErrNoPlatformBuild that names what the
// release has: "v1.4.0 has no build for linux/arm64 (it has linux/amd64)".
func (m Manifest) For(p Platform) (Build, error) {
	have := m.PlatformList()
	best := -1
	for i, h := range have {
		if h == p {
			best = i
			break
		}
		if h.OS == p.OS && h.Arch == "arm" && p.Arch == "arm" && variantNumber(h.Variant) <= variantNumber(p.Variant) &&
			(best < 0 || variantNumber(h.Variant) > variantNumber(have[best].Variant)) {
			best = i
		}
	}
	if best < 0 {
		return Build{}, &NoPlatformBuildError{Version: m.Version, Want: p, Have: have}
	}
	if m.Schema != ManifestSchemaPlatforms {
		b := Build{Version: m.Version, Schema: m.Schema, Platform: have[0], Object: m.Object, Size: m.Size,
			Digest: m.Digest, BinaryDigest: m.BinaryDigest, Deltas: m.Deltas}
		if m.HasLauncher() {
			b.Launcher = LauncherObject{Version: m.Launcher.Version, BinaryDigest: m.Launcher.Digest, BinarySize: m.Launcher.Size}
			b.LauncherInArchive = true
		}
		return b, nil
	}
	e := m.Platforms[best]
	return Build{Version: m.Version, Schema: m.Schema, Platform: have[best], Object: e.Object, Size: e.Size,
		Digest: e.Digest, BinaryDigest: e.BinaryDigest, Deltas: e.Deltas, Launcher: e.Launcher}, nil
}

// variantNumber orders arm variants: v7 is 7; none or an unreadable one 0.
func variantNumber(v string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
	if err != nil {
		return 0
	}
	return n
}

// Legacy is the manifest of p's build that hosts reading schema 1 to 3 take (decision 0042):
// schema 3 with p's deltas, or schema 1 without any, naming the same archive object, and no
// launcher (a schema 4 archive holds mesh-host alone). It is unsigned: sign it to publish it.
// A platform with a variant has no name those hosts know, and is refused.
func (m Manifest) Legacy(p Platform) (Manifest, error) {
	if m.Schema != ManifestSchemaPlatforms {
		return Manifest{}, fmt.Errorf("%s: the manifest is schema %d already, which hosts reading schema 1 to 3 take as it is", m.Version, m.Schema)
	}
	if p.Variant != "" {
		return Manifest{}, fmt.Errorf("%s: %s has a variant, which a manifest of schema 1 to 3 cannot name (it names os and arch only)", m.Version, p)
	}
	b, err := m.For(p)
	if err != nil {
		return Manifest{}, err
	}
	if b.Platform != p {
		return Manifest{}, fmt.Errorf("%s has no build for %s exactly (its nearest is %s)", m.Version, p, b.Platform)
	}
	l := Manifest{Schema: ManifestSchema, Version: m.Version, OS: p.OS, Arch: p.Arch, Object: b.Object, Size: b.Size,
		Digest: b.Digest, BinaryDigest: b.BinaryDigest, Created: m.Created}
	if len(b.Deltas) > 0 {
		l.Schema, l.Deltas = ManifestSchemaWithDeltas, slices.Clone(b.Deltas)
	}
	return l, l.Validate()
}

// validatePlatforms checks a schema 4 manifest, naming the first field that is wrong.
func (m Manifest) validatePlatforms() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("manifest %s: %s", field, fmt.Sprintf(format, args...))
	}
	single := m.OS != "" || m.Arch != "" || m.Object != "" || m.Size != 0 || m.Digest != "" || m.BinaryDigest != "" ||
		m.HasLauncher() || len(m.Deltas) > 0
	if single {
		return bad("platforms", "a schema %d manifest names its builds in platforms only; os, arch, object, size, digest, binary_digest, launcher and deltas must be absent", ManifestSchemaPlatforms)
	}
	if !ValidVersion(m.Version) {
		return bad("version", "%q is not %s", text.Bound(m.Version), VersionRule)
	}
	if _, err := time.Parse(time.RFC3339, m.Created); err != nil {
		return bad("created", "%q is not an RFC 3339 time like 2026-10-01T12:00:00Z", text.Bound(m.Created))
	}
	if len(m.Platforms) == 0 || len(m.Platforms) > MaxPlatforms {
		return bad("platforms", "lists %d; a schema %d manifest lists 1 to %d", len(m.Platforms), ManifestSchemaPlatforms, MaxPlatforms)
	}
	for i, b := range m.Platforms {
		if err := b.validate(m.Version, i); err != nil {
			return err
		}
		if i > 0 && m.Platforms[i-1].Platform >= b.Platform {
			return bad(fmt.Sprintf("platforms[%d].platform", i), "%s comes after %s; platforms are listed once each, sorted", b.Platform, m.Platforms[i-1].Platform)
		}
	}
	return m.checkSignatures()
}

// validate checks the manifest's i-th platform build.
func (b PlatformBuild) validate(version string, i int) error {
	where := fmt.Sprintf("manifest platforms[%d]", i)
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%s.%s: %s", where, field, fmt.Sprintf(format, args...))
	}
	p, err := ParsePlatform(b.Platform)
	if err != nil {
		return bad("platform", "%v", err)
	}
	if want := PlatformObjectName(version, p); b.Object != want {
		return bad("object", "is %q; for this version and platform it must be %q", text.Bound(b.Object), want)
	}
	if b.Size <= 0 {
		return bad("size", "is %d; an archive has a positive size", b.Size)
	}
	if err := checkSHA256(b.Digest); err != nil {
		return bad("digest", "%v", err)
	}
	if err := checkSHA256(b.BinaryDigest); err != nil {
		return bad("binary_digest", "%v", err)
	}
	if err := validateDeltas(where+".deltas", b.Deltas, version, func(base string) string {
		return PlatformDeltaObjectName(version, base, p)
	}); err != nil {
		return err
	}
	if b.Launcher.IsZero() {
		return nil
	}
	return b.Launcher.validate(where+".launcher", p)
}

// validate checks a launcher object of platform p (where names it in errors).
func (l LauncherObject) validate(where string, p Platform) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%s.%s: %s", where, field, fmt.Sprintf(format, args...))
	}
	if !ValidVersion(l.Version) {
		return bad("version", "%q is not %s", text.Bound(l.Version), VersionRule)
	}
	if want := LauncherObjectName(l.Version, p); l.Object != want {
		return bad("object", "is %q; for this launcher version and platform it must be %q", text.Bound(l.Object), want)
	}
	if l.Size <= 0 || l.Size > MaxLauncherSize {
		return bad("size", "is %d; a launcher object is 1 to %d bytes", l.Size, MaxLauncherSize)
	}
	if l.BinarySize <= 0 || l.BinarySize > MaxLauncherSize {
		return bad("binary_size", "is %d; a launcher is 1 to %d bytes", l.BinarySize, MaxLauncherSize)
	}
	if err := checkSHA256(l.Digest); err != nil {
		return bad("digest", "%v", err)
	}
	if err := checkSHA256(l.BinaryDigest); err != nil {
		return bad("binary_digest", "%v", err)
	}
	return validateDeltas(where+".deltas", l.Deltas, l.Version, func(base string) string {
		return LauncherDeltaObjectName(l.Version, base, p)
	})
}

// checkSHA256 refuses what is not a sha256 digest.
func checkSHA256(d digest.Digest) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%q is not a digest like sha256:<64 hex digits>: %v", text.Bound(string(d)), err)
	}
	if d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%q uses %s; manifests use sha256", text.Bound(string(d)), d.Algorithm())
	}
	return nil
}

// platformsSigningText is the text a schema 4 manifest's signature covers (docs/wire.md):
//
//	mesh-host release 4
//	version=v1.5.0
//	created=2026-12-01T12:00:00Z
//	platform=linux/amd64
//	object=mesh-host-v1.5.0-linux-amd64.tar.zst
//	size=3145728
//	digest=sha256:<hex>
//	binary_digest=sha256:<hex>
//	delta_base_version=v1.4.0         (five lines a host delta, in the manifest's order)
//	delta_base_digest=sha256:<hex>
//	delta_object=mesh-host-v1.5.0-linux-amd64.delta-from-v1.4.0.zst
//	delta_size=524288
//	delta_digest=sha256:<hex>
//	launcher_version=v1.2.0           (six lines when the build names a launcher)
//	launcher_object=mesh-launcher-v1.2.0-linux-amd64.zst
//	launcher_size=3670016
//	launcher_digest=sha256:<hex>
//	launcher_binary_digest=sha256:<hex>
//	launcher_binary_size=8912896
//	launcher_delta_base_version=v1.1.0 (five lines a launcher delta)
//	launcher_delta_base_digest=sha256:<hex>
//	launcher_delta_object=mesh-launcher-v1.2.0-linux-amd64.delta-from-v1.1.0.zst
//	launcher_delta_size=65536
//	launcher_delta_digest=sha256:<hex>
//	platform=linux/arm64              (the next platform's lines, in the manifest's order)
//	...
//
// each line ending in "\n".
func (m Manifest) platformsSigningText() []byte {
	var b bytes.Buffer
	line := func(k, v string) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	deltas := func(prefix string, list []ReleaseDelta) {
		for _, d := range list {
			line(prefix+"delta_base_version", d.BaseVersion)
			line(prefix+"delta_base_digest", string(d.BaseDigest))
			line(prefix+"delta_object", d.Object)
			line(prefix+"delta_size", strconv.FormatInt(d.Size, 10))
			line(prefix+"delta_digest", string(d.Digest))
		}
	}
	b.WriteString(SigningHeaderPlatforms)
	line("version", m.Version)
	line("created", m.Created)
	for _, p := range m.Platforms {
		line("platform", p.Platform)
		line("object", p.Object)
		line("size", strconv.FormatInt(p.Size, 10))
		line("digest", string(p.Digest))
		line("binary_digest", string(p.BinaryDigest))
		deltas("", p.Deltas)
		if l := p.Launcher; !l.IsZero() {
			line("launcher_version", l.Version)
			line("launcher_object", l.Object)
			line("launcher_size", strconv.FormatInt(l.Size, 10))
			line("launcher_digest", string(l.Digest))
			line("launcher_binary_digest", string(l.BinaryDigest))
			line("launcher_binary_size", strconv.FormatInt(l.BinarySize, 10))
			deltas("launcher_", l.Deltas)
		}
	}
	return b.Bytes()
}
