package build

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/wire"
)

// Key file names Keygen writes.
const (
	// KeyFile holds the private key: the standard base64 of the 32-byte ed25519 seed (RFC 8032's
	// private key) and a newline, mode 0600.
	KeyFile = "release.key"
	// PubFile holds the public key: the standard base64 of the 32-byte ed25519 public key and a
	// newline, the form a host's trusted_keys takes.
	PubFile = "release.pub"
)

// Keygen makes a new ed25519 release key pair in dir (created if missing) as KeyFile and
// PubFile, each written atomically. It refuses to overwrite an existing key: a lost release key
// means every host must be told to trust a new one.
func Keygen(dir string) (ed25519.PublicKey, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the release key: %w", err)
	}
	for _, name := range []string{KeyFile, PubFile} {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("%s already exists; move it aside first if you really mean to replace the release key (hosts trust it by its public key)", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("make the release key: %w", err)
		}
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the release key: %w", err)
	}
	seed := base64.StdEncoding.EncodeToString(priv.Seed()) + "\n"
	if err := atomicfile.WriteFile(filepath.Join(dir, KeyFile), []byte(seed), 0o600); err != nil {
		return nil, fmt.Errorf("make the release key: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, PubFile), []byte(base64.StdEncoding.EncodeToString(pub)+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("make the release key: %w", err)
	}
	return pub, nil
}

// LoadKey reads a release key file: the standard base64 of a 32-byte seed (what Keygen
// writes) or of a 64-byte ed25519 private key (seed and public key, as Go holds it).
func LoadKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("release key: %w", err)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("release key %s is not standard base64 (make one with `mesh-release keygen`): %w", path, err)
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		k := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
		if !k.Equal(ed25519.PrivateKey(raw)) {
			return nil, fmt.Errorf("release key %s: its public half does not match its seed; the file is corrupt", path)
		}
		return k, nil
	}
	bytes := "bytes"
	if len(raw) == 1 {
		bytes = "byte"
	}
	return nil, fmt.Errorf("release key %s holds %d %s; an ed25519 key is a %d-byte seed (or %d bytes with its public key)",
		path, len(raw), bytes, ed25519.SeedSize, ed25519.PrivateKeySize)
}

// PublicKeyString is the trusted_keys form of a key: standard base64 of its 32 bytes.
func PublicKeyString(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }

// KeyID re-exports wire.KeyID for the command's output.
func KeyID(pub ed25519.PublicKey) string { return wire.KeyID(pub) }
