package wire

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/novox/mesh-host/internal/text"
)

// Platform is what a build runs on, written as Docker and OCI write it: os/arch, and for 32-bit
// arm a variant (linux/amd64, linux/arm64, linux/arm/v7). A manifest of schema 4 lists one build
// a platform; a node takes the build of its own (Manifest.For).
type Platform struct {
	OS      string
	Arch    string
	Variant string // "" but for arm: v5, v6 or v7
}

// DefaultPlatforms are the platforms `mesh-release build` builds when not told.
const DefaultPlatforms = "linux/amd64,linux/arm64"

// MaxPlatforms bounds the platforms a manifest lists and a build is asked for.
const MaxPlatforms = 16

// maxPlatformBytes bounds a platform's text (os, arch and variant are short words).
const maxPlatformBytes = 64

var (
	platformWord    = regexp.MustCompile(`^[a-z0-9]{1,20}$`)
	platformVariant = regexp.MustCompile(`^v[0-9]{1,2}$`)
)

// ParsePlatform reads os/arch or os/arch/variant, refusing what no build could be named by: a
// variant on an architecture without one, and arm without one (arm/v6 and arm/v7 builds differ).
func ParsePlatform(s string) (Platform, error) {
	if len(s) > maxPlatformBytes {
		return Platform{}, fmt.Errorf("platform %q is longer than %d bytes", text.Bound(s), maxPlatformBytes)
	}
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return Platform{}, fmt.Errorf("platform %q is not os/arch or os/arch/variant like linux/arm64 or linux/arm/v7", s)
	}
	p := Platform{OS: parts[0], Arch: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	if !platformWord.MatchString(p.OS) {
		return Platform{}, fmt.Errorf("platform %q: the os %q is not a word like linux", s, p.OS)
	}
	if !platformWord.MatchString(p.Arch) {
		return Platform{}, fmt.Errorf("platform %q: the architecture %q is not a word like amd64", s, p.Arch)
	}
	switch {
	case p.Arch == "arm" && p.Variant == "":
		return Platform{}, fmt.Errorf("platform %q names no arm variant; say linux/arm/v7 or linux/arm/v6", s)
	case p.Arch != "arm" && p.Variant != "":
		return Platform{}, fmt.Errorf("platform %q has a variant, which only arm builds have (linux/arm/v7)", s)
	case p.Variant != "" && !platformVariant.MatchString(p.Variant):
		return Platform{}, fmt.Errorf("platform %q: the variant %q is not like v7", s, p.Variant)
	}
	return p, nil
}

// ParsePlatforms reads a comma-separated list of platforms, refusing an empty list, a bad
// platform and a platform named twice. The list keeps the order given.
func ParsePlatforms(list string) ([]Platform, error) {
	var out []Platform
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := ParsePlatform(s)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("platform %s is named twice", p)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no platform named; name them like %s", DefaultPlatforms)
	}
	if len(out) > MaxPlatforms {
		return nil, fmt.Errorf("%d platforms named; at most %d", len(out), MaxPlatforms)
	}
	return out, nil
}

// String is os/arch or os/arch/variant.
func (p Platform) String() string {
	if p.Variant != "" {
		return p.OS + "/" + p.Arch + "/" + p.Variant
	}
	return p.OS + "/" + p.Arch
}

// Slug is the platform in a file or object name: os-arch or os-arch-variant (linux-arm-v7).
// Without a variant it is the os-arch of schema 1–3 object names, so the archive of a platform
// has one name in every schema.
func (p Platform) Slug() string { return strings.ReplaceAll(p.String(), "/", "-") }

// IsZero reports whether p names nothing.
func (p Platform) IsZero() bool { return p == Platform{} }

// NodePlatform is the platform of a machine running a host built for goos/goarch whose kernel
// names its machine kernelMachine (uname -m). Go's own names decide, but for 32-bit arm, whose
// variant only the kernel knows: armv6l is v6, armv5 v5, any other (armv7l, armv8l, aarch64
// running a 32-bit host) v7.
func NodePlatform(goos, goarch, kernelMachine string) Platform {
	p := Platform{OS: goos, Arch: goarch}
	if goarch == "arm" {
		p.Variant = armVariant(kernelMachine)
	}
	return p
}

// armVariant is the arm variant a kernel's machine word implies: v7 unless it says v5 or v6.
func armVariant(machine string) string {
	switch {
	case strings.HasPrefix(machine, "armv5"):
		return "v5"
	case strings.HasPrefix(machine, "armv6"):
		return "v6"
	}
	return "v7"
}

// ProfilePlatform is a node's platform as its heartbeat says it: the profile's platform when the
// host sent one (hosts since manifest schema 4), else its os and arch, arm taken as arm/v7 — what
// Go builds for arm by default and what hosts that did not say were running. A profile naming no
// os or arch gives the zero Platform.
func ProfilePlatform(pr Profile) Platform {
	if pr.Platform != "" {
		if p, err := ParsePlatform(pr.Platform); err == nil {
			return p
		}
	}
	if pr.OS == "" || pr.Arch == "" {
		return Platform{}
	}
	return NodePlatform(pr.OS, pr.Arch, "")
}

// PlatformObjectName is a schema 4 host archive's name in the object store and on disk:
// mesh-host-<version>-<slug>.tar.zst (ObjectName for a platform without a variant).
func PlatformObjectName(version string, p Platform) string {
	return "mesh-host-" + version + "-" + p.Slug() + ".tar.zst"
}

// PlatformDeltaObjectName is a schema 4 host delta's name:
// mesh-host-<version>-<slug>.delta-from-<base>.zst (DeltaObjectName without a variant).
func PlatformDeltaObjectName(version, base string, p Platform) string {
	return "mesh-host-" + version + "-" + p.Slug() + ".delta-from-" + base + ".zst"
}

// LauncherObjectName is a launcher's own object: mesh-launcher-<launcher version>-<slug>.zst,
// the zstd of the binary. Every release carrying that launcher names the same object.
func LauncherObjectName(launcherVersion string, p Platform) string {
	return "mesh-launcher-" + launcherVersion + "-" + p.Slug() + ".zst"
}

// LauncherDeltaObjectName is a delta of a launcher binary from an earlier launcher's:
// mesh-launcher-<launcher version>-<slug>.delta-from-<base launcher version>.zst.
func LauncherDeltaObjectName(launcherVersion, base string, p Platform) string {
	return "mesh-launcher-" + launcherVersion + "-" + p.Slug() + ".delta-from-" + base + ".zst"
}
