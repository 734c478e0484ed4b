package wire_test

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A release side signs a manifest with its release key; a host verifies it against the keys in
// its trusted_keys before it fetches anything, and refuses one altered after signing.
func ExampleManifest_Verify() {
	// meshtest.ReleaseKey is a fixed test key; `mesh-release keygen` makes a real one.
	release := meshtest.ReleaseKey
	m := wire.Manifest{
		Schema:       1,
		Version:      "v1.4.0",
		OS:           "linux",
		Arch:         "amd64",
		Object:       wire.ObjectName("v1.4.0", "linux", "amd64"),
		Size:         7340032,
		Digest:       digest.FromString("the archive"),
		BinaryDigest: digest.FromString("the binary"),
		Created:      "2026-10-01T12:00:00Z",
	}
	if err := m.Sign(release.Private); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("signed by key_id", m.KeyID)

	trusted := []ed25519.PublicKey{release.Public} // a host's trusted_keys, parsed
	fmt.Println("verify:", m.Verify(wire.LegacyTrust(trusted, nil)))

	m.Size++ // altered after signing
	err := m.Verify(wire.LegacyTrust(trusted, nil))
	fmt.Println("verify:", err)
	fmt.Println("bad signature:", errors.Is(err, wire.ErrBadSignature))

	// A manifest signed by a key the host does not trust is refused too.
	m.Size--
	if err := m.Sign(meshtest.StrangerKey.Private); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("unknown key:", errors.Is(m.Verify(wire.LegacyTrust(trusted, nil)), wire.ErrUnknownKey))

	// Output:
	// signed by key_id 4259bb68525d2293
	// verify: <nil>
	// verify: manifest v1.4.0: a signature does not verify: the document was altered after signing, or the signature is corrupt (key 4259bb68525d2293)
	// bad signature: true
	// unknown key: true
}
