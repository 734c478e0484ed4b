package wire

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/layout"
	"github.com/novox/mesh-host/internal/text"
)

// The manifest schemas this code reads and writes. Schema 1 announces the host binary alone;
// schema 2 also names the mesh-launcher the archive carries (Launcher), in the signed text.
// Hosts older than schema 2 refuse a schema 2 manifest ("schema is 2; this host reads schema 1
// only"), so `mesh-release build --no-launcher` still writes schema 1 for a fleet of them
// (decision 0014).
//
// Schema 3 also lists deltas of the host binary against earlier releases' binaries (Deltas), in
// the signed text, with or without a launcher; hosts older than schema 3 refuse it the same way,
// so `mesh-release publish --no-deltas` keeps a release at schema 1 or 2 (decision 0028).
//
// Schema 4 lists one build a platform (Platforms), each with its host archive (mesh-host alone),
// its deltas and its launcher as an object of its own; the single-platform fields are empty.
// Hosts older than schema 4 refuse it, so a release can still be published for them as schema
// 1 or 3 (Legacy, `mesh-release publish --manifest-schema 3`; decision 0042).
const (
	ManifestSchema             = 1
	ManifestSchemaWithLauncher = 2
	ManifestSchemaWithDeltas   = 3
	ManifestSchemaPlatforms    = 4
)

// SigningHeader is the first line of the text a schema 1 manifest's signature covers;
// SigningHeaderWithLauncher that of a schema 2 manifest, SigningHeaderWithDeltas of schema 3.
const (
	SigningHeader             = "mesh-host release 1\n"
	SigningHeaderWithLauncher = "mesh-host release 2\n"
	SigningHeaderWithDeltas   = "mesh-host release 3\n"
	SigningHeaderPlatforms    = "mesh-host release 4\n"
)

// MaxDeltas is the most deltas a manifest lists; MaxDeltaSize the largest delta it may name.
const (
	MaxDeltas    = 8
	MaxDeltaSize = 256 << 20
)

// ReleaseDelta is one delta a schema 3 manifest lists: the host binary of this release made
// from the binary of an earlier one (BaseVersion, whose binary has BaseDigest) with
// wire/delta. It is an object in the archives store, named DeltaObjectName, of Size bytes and
// sha256 Digest. A node whose versions/<base_version>/mesh-host has exactly BaseDigest may
// fetch it instead of the archive; what it rebuilds must have the manifest's binary_digest.
type ReleaseDelta struct {
	BaseVersion string        `json:"base_version"`
	BaseDigest  digest.Digest `json:"base_digest"`
	Object      string        `json:"object"`
	Size        int64         `json:"size"`
	Digest      digest.Digest `json:"digest"`
}

// DeltaObjectName is a delta's name in the object store and in a build directory:
// mesh-host-<version>-<os>-<arch>.delta-from-<base>.zst.
func DeltaObjectName(version, base, goos, goarch string) string {
	return "mesh-host-" + version + "-" + goos + "-" + goarch + ".delta-from-" + base + ".zst"
}

// MaxLauncherSize is the largest mesh-launcher a manifest may name (the cap on a binary in a
// host archive, archive.DefaultMaxBinary).
const MaxLauncherSize = 256 << 20

// ReleaseLauncher is the mesh-launcher a host release carries beside mesh-host in its archive:
// its own version (not the host's), the digest of the binary and its size. A node stages it
// under ROOT/launchers/<version> when it has no launcher of that digest.
type ReleaseLauncher struct {
	Version string        `json:"version"`
	Digest  digest.Digest `json:"digest"`
	Size    int64         `json:"size"`
}

// Manifest is the announcement of one host release: the value under KV mesh_host_releases,
// key = version, and the manifest.json `mesh-release build` writes. The signature covers
// SigningText, a documented text any tool can reproduce (schema 1):
//
//	mesh-host release 1
//	version=v1.4.0
//	os=linux
//	arch=amd64
//	object=mesh-host-v1.4.0-linux-amd64.tar.zst
//	size=7340032
//	digest=sha256:<hex of the archive>
//	binary_digest=sha256:<hex of the mesh-host binary inside it>
//	created=2026-10-01T12:00:00Z
//
// each line ending in "\n". Schema 2 (a release carrying mesh-launcher) starts with
// "mesh-host release 2" and adds, after created:
//
//	launcher_version=v0.3.0
//	launcher_digest=sha256:<hex of the mesh-launcher binary in the archive>
//	launcher_size=9437184
//
// Signature is the standard base64 of the ed25519 signature over those bytes; KeyID is KeyID
// of the public key that verifies it. A manifest signed by more keys (the releases role's
// threshold) lists them as signatures instead (SignatureList).
type Manifest struct {
	Schema       int           `json:"schema"`
	Version      string        `json:"version"`
	OS           string        `json:"os"`
	Arch         string        `json:"arch"`
	Object       string        `json:"object"`
	Size         int64         `json:"size"`
	Digest       digest.Digest `json:"digest"`
	BinaryDigest digest.Digest `json:"binary_digest"`
	Created      string        `json:"created"`
	// Launcher is the mesh-launcher the archive carries: set in every schema 2 manifest, and
	// in a schema 3 one whose archive carries it.
	Launcher ReleaseLauncher `json:"launcher,omitzero"`
	// Deltas are the deltas of the host binary against earlier releases: schema 3 only, 1 to
	// MaxDeltas of them.
	Deltas []ReleaseDelta `json:"deltas,omitempty"`
	// Platforms are the builds of a schema 4 manifest, sorted by platform, one a platform.
	Platforms []PlatformBuild `json:"platforms,omitempty"`
	// SignatureList holds the signatures, last in the JSON: one as key_id and signature (byte
	// for byte what hosts before roots read), two or more as signatures (decision 0045).
	SignatureList
}

// Errors Verify returns (wrapped, with the details); test them with errors.Is.
var (
	ErrUnsigned     = errors.New("manifest is not signed")
	ErrUnknownKey   = errors.New("manifest is signed by a key this node does not trust")
	ErrBadSignature = errors.New("manifest signature does not verify: a field was altered after signing, or the signature is corrupt")
)

var platformName = regexp.MustCompile(`^[a-z0-9]+$`)

// ObjectName is the archive's name in the object store and on disk:
// mesh-host-<version>-<os>-<arch>.tar.zst.
func ObjectName(version, goos, goarch string) string {
	return "mesh-host-" + version + "-" + goos + "-" + goarch + ".tar.zst"
}

// ValidVersion reports whether v can name a release: a semantic version like v1.4.0 or
// v1.5.0-rc.1 in canonical form, without +build metadata (it is a KV key, where '+' is not
// allowed), and at most MaxVersionBytes long. It is the one version rule: manifests, targets,
// builds, deliveries and the version directories on a node all use it. It is defined in
// internal/layout, which the node's side shares without importing the bus contract.
func ValidVersion(v string) bool { return layout.ValidVersion(v) }

// MaxVersionBytes is the longest version ValidVersion accepts.
const MaxVersionBytes = layout.MaxVersionBytes

// VersionRule says ValidVersion's rule in an error message.
const VersionRule = layout.VersionRule

// ParseManifest decodes a manifest strictly (unknown fields and trailing data are refused)
// and validates every field. It does not check the signature: that is Verify.
func ParseManifest(b []byte) (Manifest, error) { return parseSigned[Manifest](KindManifest, b) }

// Validate checks every field except the signature, naming the first one that is wrong.
func (m Manifest) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("manifest %s: %s", field, fmt.Sprintf(format, args...))
	}
	if m.Schema == ManifestSchemaPlatforms {
		return m.validatePlatforms()
	}
	if len(m.Platforms) > 0 {
		return bad("platforms", "are listed in a schema %d manifest; a manifest listing platforms is schema %d", m.Schema, ManifestSchemaPlatforms)
	}
	switch m.Schema {
	case ManifestSchema:
		if m.HasLauncher() {
			return bad("launcher", "is set in a schema %d manifest; a manifest naming a launcher is schema %d", ManifestSchema, ManifestSchemaWithLauncher)
		}
	case ManifestSchemaWithLauncher:
		if err := m.Launcher.validate(); err != nil {
			return err
		}
	case ManifestSchemaWithDeltas:
		if m.HasLauncher() {
			if err := m.Launcher.validate(); err != nil {
				return err
			}
		}
		if len(m.Deltas) == 0 || len(m.Deltas) > MaxDeltas {
			return bad("deltas", "lists %d; a schema %d manifest lists 1 to %d", len(m.Deltas), ManifestSchemaWithDeltas, MaxDeltas)
		}
	default:
		return bad("schema", "is %d; this host reads schema %d to %d", m.Schema, ManifestSchema, ManifestSchemaPlatforms)
	}
	if m.Schema != ManifestSchemaWithDeltas && len(m.Deltas) > 0 {
		return bad("deltas", "are listed in a schema %d manifest; a manifest listing deltas is schema %d", m.Schema, ManifestSchemaWithDeltas)
	}
	if !ValidVersion(m.Version) {
		return bad("version", "%q is not %s", m.Version, VersionRule)
	}
	if !platformName.MatchString(m.OS) {
		return bad("os", "%q is not an operating system name like linux", m.OS)
	}
	if !platformName.MatchString(m.Arch) {
		return bad("arch", "%q is not an architecture name like amd64", m.Arch)
	}
	if want := ObjectName(m.Version, m.OS, m.Arch); m.Object != want {
		return bad("object", "is %q; for this version and platform it must be %q", m.Object, want)
	}
	if m.Size <= 0 {
		return bad("size", "is %d; an archive has a positive size", m.Size)
	}
	for _, d := range []struct {
		field string
		v     digest.Digest
	}{{"digest", m.Digest}, {"binary_digest", m.BinaryDigest}} {
		if err := d.v.Validate(); err != nil {
			return bad(d.field, "%q is not a digest like sha256:<64 hex digits>: %v", string(d.v), err)
		}
		if d.v.Algorithm() != digest.SHA256 {
			return bad(d.field, "%q uses %s; manifests use sha256", string(d.v), d.v.Algorithm())
		}
	}
	if _, err := time.Parse(time.RFC3339, m.Created); err != nil {
		return bad("created", "%q is not an RFC 3339 time like 2026-10-01T12:00:00Z", m.Created)
	}
	if err := validateDeltas("manifest deltas", m.Deltas, m.Version, func(base string) string {
		return DeltaObjectName(m.Version, base, m.OS, m.Arch)
	}); err != nil {
		return err
	}
	return m.checkSignatures()
}

// checkSignatures checks the signatures' form, a single key_id's as manifest fields are named.
func (m Manifest) checkSignatures() error {
	if m.KeyID != "" && !validKeyID(m.KeyID) {
		return fmt.Errorf("manifest key_id: %q is not 16 hex digits", text.Bound(m.KeyID))
	}
	return m.SignatureList.Check("manifest")
}

// HasLauncher reports whether the manifest names a launcher (any of its fields set).
func (m Manifest) HasLauncher() bool { return m.Launcher != ReleaseLauncher{} }

// validate checks a schema 2 manifest's launcher object, naming the first field that is wrong.
func (l ReleaseLauncher) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("manifest launcher.%s: %s", field, fmt.Sprintf(format, args...))
	}
	if !ValidVersion(l.Version) {
		return bad("version", "%q is not %s", text.Bound(l.Version), VersionRule)
	}
	if err := l.Digest.Validate(); err != nil {
		return bad("digest", "%q is not a digest like sha256:<64 hex digits>: %v", text.Bound(string(l.Digest)), err)
	}
	if l.Digest.Algorithm() != digest.SHA256 {
		return bad("digest", "%q uses %s; manifests use sha256", text.Bound(string(l.Digest)), l.Digest.Algorithm())
	}
	if l.Size <= 0 || l.Size > MaxLauncherSize {
		return bad("size", "is %d; a launcher is 1 to %d bytes", l.Size, MaxLauncherSize)
	}
	return nil
}

// validateDeltas checks a list of deltas of the binary of version own (at most MaxDeltas, one a
// base), each named object(base); where names the list in errors ("manifest deltas").
func validateDeltas(where string, list []ReleaseDelta, own string, object func(base string) string) error {
	if len(list) > MaxDeltas {
		return fmt.Errorf("%s: lists %d; at most %d", where, len(list), MaxDeltas)
	}
	seen := make(map[string]bool, len(list))
	for i, d := range list {
		if err := d.validate(fmt.Sprintf("%s[%d]", where, i), own, object); err != nil {
			return err
		}
		if seen[d.BaseVersion] {
			return fmt.Errorf("%s[%d].base_version: %s is listed twice; a manifest lists one delta a base", where, i, d.BaseVersion)
		}
		seen[d.BaseVersion] = true
	}
	return nil
}

// validate checks one delta (where names it: "manifest deltas[0]"), naming the first field that
// is wrong.
func (d ReleaseDelta) validate(where, own string, object func(base string) string) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%s.%s: %s", where, field, fmt.Sprintf(format, args...))
	}
	if !ValidVersion(d.BaseVersion) {
		return bad("base_version", "%q is not %s", text.Bound(d.BaseVersion), VersionRule)
	}
	if d.BaseVersion == own {
		return bad("base_version", "is the release's own version, %s", own)
	}
	if want := object(d.BaseVersion); d.Object != want {
		return bad("object", "is %q; for this version, base and platform it must be %q", text.Bound(d.Object), want)
	}
	if d.Size <= 0 || d.Size > MaxDeltaSize {
		return bad("size", "is %d; a delta is 1 to %d bytes", d.Size, MaxDeltaSize)
	}
	for _, f := range []struct {
		field string
		v     digest.Digest
	}{{"base_digest", d.BaseDigest}, {"digest", d.Digest}} {
		if err := f.v.Validate(); err != nil {
			return bad(f.field, "%q is not a digest like sha256:<64 hex digits>: %v", text.Bound(string(f.v)), err)
		}
		if f.v.Algorithm() != digest.SHA256 {
			return bad(f.field, "%q uses %s; manifests use sha256", text.Bound(string(f.v)), f.v.Algorithm())
		}
	}
	return nil
}

// SigningText returns the exact bytes the signature covers (see Manifest): the schema's header,
// then one line a field, the launcher's after created, then the deltas' in schema 3.
func (m Manifest) SigningText() []byte {
	if m.Schema == ManifestSchemaPlatforms {
		return m.platformsSigningText()
	}
	var b bytes.Buffer
	header := SigningHeader
	switch m.Schema {
	case ManifestSchemaWithLauncher:
		header = SigningHeaderWithLauncher
	case ManifestSchemaWithDeltas:
		header = SigningHeaderWithDeltas
	}
	b.WriteString(header)
	lines := [][2]string{
		{"version", m.Version},
		{"os", m.OS},
		{"arch", m.Arch},
		{"object", m.Object},
		{"size", strconv.FormatInt(m.Size, 10)},
		{"digest", string(m.Digest)},
		{"binary_digest", string(m.BinaryDigest)},
		{"created", m.Created},
	}
	if m.Schema == ManifestSchemaWithLauncher || (m.Schema == ManifestSchemaWithDeltas && m.HasLauncher()) {
		lines = append(lines,
			[2]string{"launcher_version", m.Launcher.Version},
			[2]string{"launcher_digest", string(m.Launcher.Digest)},
			[2]string{"launcher_size", strconv.FormatInt(m.Launcher.Size, 10)})
	}
	if m.Schema == ManifestSchemaWithDeltas {
		for _, d := range m.Deltas {
			lines = append(lines,
				[2]string{"delta_base_version", d.BaseVersion},
				[2]string{"delta_base_digest", string(d.BaseDigest)},
				[2]string{"delta_object", d.Object},
				[2]string{"delta_size", strconv.FormatInt(d.Size, 10)},
				[2]string{"delta_digest", string(d.Digest)})
		}
	}
	for _, kv := range lines {
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(kv[1])
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Sign validates the manifest and signs it with priv: the first signature, replacing any it had.
// AddSignature adds another.
func (m *Manifest) Sign(priv ed25519.PrivateKey) error {
	m.SignatureList = SignatureList{}
	return m.AddSignature(priv)
}

// AddSignature validates the manifest and adds priv's signature to those it has (the releases
// role's threshold). A key that has signed is refused.
func (m *Manifest) AddSignature(priv ed25519.PrivateKey) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("sign manifest: %w", err)
	}
	if err := m.SignatureList.Add(m.SigningText(), priv); err != nil {
		return fmt.Errorf("sign manifest %s: %w", m.Version, err)
	}
	return nil
}

// Envelope is the manifest as the verifier sees it: signed by the releases role, never expiring
// (a version's build does not go stale; the target naming it does).
func (m Manifest) Envelope() Envelope {
	return Envelope{Kind: KindManifest, Name: m.Version, Role: RoleReleases, Text: m.SigningText(), Signatures: m.List()}
}

// Verify validates the manifest and checks its signatures against trust (Trust.Verify: a
// threshold of the releases role's keys, or one of host.json's trusted_keys before any root).
// An unsigned manifest, a key that is not trusted (or too few of them) and a signature that
// does not verify are distinct errors, each naming the version: ErrUnsigned, ErrUnknownKey
// and ErrBadSignature, which are also Trust.Verify's ErrNotSigned, ErrKeyNotTrusted (or
// ErrBelowThreshold) and ErrSignatureInvalid.
func (m Manifest) Verify(trust Trust) error {
	if err := m.Validate(); err != nil {
		return err
	}
	return verifyDocument(trust, m.Envelope(), time.Time{}, ErrUnsigned, ErrUnknownKey, ErrBadSignature)
}

// Marshal returns the manifest as indented JSON with a final newline, as manifest.json holds it.
func (m Manifest) Marshal() []byte {
	b, _ := json.MarshalIndent(m, "", "  ")
	return append(b, '\n')
}

// validKeyID reports whether s has KeyID's form: 16 hex digits.
func validKeyID(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 8
}

// checkSeq checks a signed value's sequence number: positive, at most MaxSeq.
func checkSeq(what string, seq uint64) error {
	if seq == 0 {
		return fmt.Errorf("%s: seq is 0; a signed value has a positive sequence number", what)
	}
	if seq > MaxSeq {
		return fmt.Errorf("%s: seq %d is above the largest allowed, %d", what, seq, uint64(MaxSeq))
	}
	return nil
}

// KeyID names a public key: the hex of the first 8 bytes of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// ParseTrustedKey decodes one trusted_keys entry: the standard base64 of a 32-byte ed25519
// public key, as release.pub holds it.
func ParseTrustedKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("trusted key %q is not standard base64: %w", s, err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("trusted key %q is %d bytes; an ed25519 public key is %d (use the content of release.pub)", s, len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// ParseTrustedKeys decodes every trusted_keys entry, refusing the list if any is malformed.
func ParseTrustedKeys(list []string) ([]ed25519.PublicKey, error) {
	keys := make([]ed25519.PublicKey, 0, len(list))
	for _, s := range list {
		k, err := ParseTrustedKey(s)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// ObjectStoreDigest writes a sha256 digest the way a NATS object store reports an object's
// digest in its info: "SHA-256=" and the URL-safe base64 of the 32 bytes.
func ObjectStoreDigest(d digest.Digest) (string, error) {
	if err := d.Validate(); err != nil || d.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("%q is not a sha256 digest", string(d))
	}
	b, _ := hex.DecodeString(d.Encoded())
	return "SHA-256=" + base64.URLEncoding.EncodeToString(b), nil
}
