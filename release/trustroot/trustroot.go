// Package trustroot is the offline root ceremony: making root keys and roots, signing, rotating
// and publishing them.
//
// A root (wire.Root, decision 0045) names the keys of each role. Its root keys are meant to live
// apart, offline, one a person: a new root travels as a file (root.<v>.json) from one holder to
// the next, each adding one signature (Sign), and is published on the bus (Publish) once a
// threshold of the previous root's root keys and of its own have signed it.
package trustroot

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/novox/mesh-host/internal/atomicfile"
	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Defaults of a new root.
const (
	DefaultExpires       = 365 * 24 * time.Hour // a root is renewed at least yearly
	DefaultTargetsMaxTTL = 30 * 24 * time.Hour  // the longest an online-signed document may last
)

// KeyFile and PubFile name root key n of a ceremony: root-1.key (the seed, mode 0600) and
// root-1.pub (its public key), as `mesh-release keygen` writes release.key and release.pub.
func KeyFile(n int) string { return "root-" + strconv.Itoa(n) + ".key" }

// PubFile: see KeyFile.
func PubFile(n int) string { return "root-" + strconv.Itoa(n) + ".pub" }

// FileName is the file a root version is written to and read from: root.4.json.
func FileName(version uint64) string { return wire.RootKey(version) + ".json" }

// KeyPair is one root key a ceremony wrote.
type KeyPair struct {
	Priv             ed25519.PrivateKey
	KeyPath, PubPath string
}

// ID is the key's wire.KeyID.
func (k KeyPair) ID() string { return wire.KeyID(k.Priv.Public().(ed25519.PublicKey)) }

// WriteKeys makes n root key pairs in dir (created 0700): root-1.key … root-n.key (0600) with
// their .pub. An existing file is refused unless force; nothing is written then.
func WriteKeys(dir string, n int, force bool) ([]KeyPair, error) {
	if n < 1 || n > wire.MaxRootKeys {
		return nil, fmt.Errorf("%d root keys: make 1 to %d", n, wire.MaxRootKeys)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("root keys: %w", err)
	}
	if !force {
		for i := 1; i <= n; i++ {
			for _, name := range []string{KeyFile(i), PubFile(i)} {
				if err := absent(filepath.Join(dir, name)); err != nil {
					return nil, err
				}
			}
		}
	}
	keys := make([]KeyPair, n)
	for i := range keys {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("root keys: %w", err)
		}
		k := KeyPair{Priv: priv, KeyPath: filepath.Join(dir, KeyFile(i+1)), PubPath: filepath.Join(dir, PubFile(i+1))}
		if err := atomicfile.WriteFile(k.KeyPath, []byte(base64.StdEncoding.EncodeToString(priv.Seed())+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("root keys: %w", err)
		}
		if err := atomicfile.WriteFile(k.PubPath, []byte(base64.StdEncoding.EncodeToString(pub)+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("root keys: %w", err)
		}
		keys[i] = k
	}
	return keys, nil
}

// absent refuses an existing path, naming it and how to go on.
func absent(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s already exists; move it aside, or give --force to replace it", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Spec is what a first root holds: its root keys and threshold, the releases and targets keys
// (each role's threshold 1 unless given), its lifetime and the targets role's max_ttl.
type Spec struct {
	RootKeys          []ed25519.PublicKey
	Threshold         int
	Releases, Targets []ed25519.PublicKey
	ReleasesThreshold int // 0: 1
	TargetsThreshold  int // 0: 1
	Expires           time.Duration
	TargetsMaxTTL     time.Duration // 0: none stated
}

// New makes root version 1 of s, unsigned, expiring s.Expires after now.
func New(s Spec, now time.Time) (wire.Root, error) {
	if s.Threshold < 1 || s.Threshold > len(s.RootKeys) {
		return wire.Root{}, fmt.Errorf("a threshold of %d root keys out of %d: it must be between 1 and the number of root keys", s.Threshold, len(s.RootKeys))
	}
	if s.Expires <= 0 {
		return wire.Root{}, fmt.Errorf("expires %s: a root must last a positive time", s.Expires)
	}
	r := wire.Root{Schema: wire.RootSchema, Version: 1, Expires: expiry(now, s.Expires),
		Keys: map[string]string{}, Roles: map[wire.Role]wire.RoleKeys{}}
	for _, role := range []struct {
		role      wire.Role
		keys      []ed25519.PublicKey
		threshold int
	}{{wire.RoleRoot, s.RootKeys, s.Threshold}, {wire.RoleReleases, s.Releases, max(s.ReleasesThreshold, 1)}, {wire.RoleTargets, s.Targets, max(s.TargetsThreshold, 1)}} {
		var ids []string
		for _, k := range role.keys {
			id := wire.KeyID(k)
			r.Keys[id] = base64.StdEncoding.EncodeToString(k)
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		r.Roles[role.role] = wire.RoleKeys{Keys: ids, Threshold: role.threshold}
	}
	if s.TargetsMaxTTL > 0 {
		rk := r.Roles[wire.RoleTargets]
		rk.MaxTTL = s.TargetsMaxTTL.String()
		r.Roles[wire.RoleTargets] = rk
	}
	if err := r.Validate(); err != nil {
		return wire.Root{}, err
	}
	return r, nil
}

// expiry is now plus d, to the second, as a root writes it.
func expiry(now time.Time, d time.Duration) string {
	return now.UTC().Add(d).Truncate(time.Second).Format(time.RFC3339)
}

// Change is what Rotate changes: in each of Roles, the same keys added and removed and the
// same threshold (a stolen key that was both the releases and the targets key leaves both in
// one new root).
type Change struct {
	Roles     []wire.Role
	Add       []ed25519.PublicKey
	Remove    []string // key ids, or their first 8 or more hex digits
	Threshold int      // 0: keep each role's threshold
	Expires   time.Duration
	MaxTTL    *time.Duration // the targets role's, when Roles holds it; nil keeps it, 0 drops it
}

// Rotate makes version N+1 of cur, unsigned: c's roles changed and the expiry renewed from now.
// It refuses an unknown role or key id, a key added twice, removing every key of a role and a
// threshold above the keys left.
func Rotate(cur wire.Root, c Change, now time.Time) (wire.Root, error) {
	if c.Expires <= 0 {
		return wire.Root{}, fmt.Errorf("expires %s: a root must last a positive time", c.Expires)
	}
	next := wire.Root{Schema: wire.RootSchema, Version: cur.Version + 1, Expires: expiry(now, c.Expires),
		Keys: map[string]string{}, Roles: map[wire.Role]wire.RoleKeys{}}
	for id, k := range cur.Keys {
		next.Keys[id] = k
	}
	for role, rk := range cur.Roles {
		rk.Keys = slices.Clone(rk.Keys)
		next.Roles[role] = rk
	}
	for _, role := range c.Roles {
		if !slices.Contains(wire.Roles, role) {
			return wire.Root{}, fmt.Errorf("role %q: want root, releases or targets", txt.Bound(string(role)))
		}
		rk, err := change(next, cur, role, c)
		if err != nil {
			return wire.Root{}, err
		}
		next.Roles[role] = rk
	}
	// A key in no role any more leaves the root: a root lists only the keys it uses.
	for id := range next.Keys {
		used := false
		for _, r := range next.Roles {
			used = used || slices.Contains(r.Keys, id)
		}
		if !used {
			delete(next.Keys, id)
		}
	}
	if err := next.Validate(); err != nil {
		return wire.Root{}, err
	}
	return next, nil
}

// change applies c to role of next (cur is the root it follows, named in refusals), adding the
// keys c adds to next.Keys.
func change(next, cur wire.Root, role wire.Role, c Change) (wire.RoleKeys, error) {
	rk := next.Roles[role]
	for _, spec := range c.Remove {
		id, err := findKey(rk.Keys, spec)
		if err != nil {
			return rk, fmt.Errorf("--remove %s: %w of %s in root v%d (keys %s)", txt.Bound(spec), err, role, cur.Version, strings.Join(rk.Keys, ", "))
		}
		rk.Keys = slices.DeleteFunc(rk.Keys, func(k string) bool { return k == id })
	}
	for _, k := range c.Add {
		id := wire.KeyID(k)
		if slices.Contains(rk.Keys, id) {
			return rk, fmt.Errorf("--add: key %s is in %s already", id, role)
		}
		rk.Keys = append(rk.Keys, id)
		next.Keys[id] = base64.StdEncoding.EncodeToString(k)
	}
	slices.Sort(rk.Keys)
	if len(rk.Keys) == 0 {
		return rk, fmt.Errorf("that removes the last key of %s; add its new key in the same rotation (--add)", role)
	}
	if c.Threshold != 0 {
		rk.Threshold = c.Threshold
	}
	if rk.Threshold < 1 || rk.Threshold > len(rk.Keys) {
		return rk, fmt.Errorf("a threshold of %d for %s, which would hold %d %s: give --threshold between 1 and %d", rk.Threshold, role, len(rk.Keys), txt.Plural(len(rk.Keys), "key", "keys"), len(rk.Keys))
	}
	if c.MaxTTL != nil && role == wire.RoleTargets {
		rk.MaxTTL = ""
		if *c.MaxTTL > 0 {
			rk.MaxTTL = c.MaxTTL.String()
		}
	}
	return rk, nil
}

// findKey is the one of ids that spec names: the whole id, or its first 8 or more hex digits
// ("82912897…" as messages show it).
func findKey(ids []string, spec string) (string, error) {
	spec = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(spec)), "…")
	if len(spec) < 8 {
		return "", errors.New("is not a key id (16 hex digits, or at least its first 8)")
	}
	var found []string
	for _, id := range ids {
		if strings.HasPrefix(id, spec) {
			found = append(found, id)
		}
	}
	switch len(found) {
	case 0:
		return "", errors.New("is no key")
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("names %d keys; give more of the id", len(found))
}

// ReadFile reads a root file, refusing one that is not a valid root.
func ReadFile(path string) (wire.Root, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return wire.Root{}, err
	}
	r, err := wire.ParseRoot(b)
	if err != nil {
		return wire.Root{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// WriteFile writes r to path (temp file, fsync, rename): a root file is what the root key
// holders pass on, and a half-written one would lose the signatures already in it.
func WriteFile(path string, r wire.Root) error {
	if err := atomicfile.WriteFile(path, r.Marshal(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
