package meshtest

import (
	"crypto/ed25519"
	"crypto/sha256"
)

// A KeyPair is an ed25519 release key: hosts trust Public, `mesh-release build` signs with
// Private.
type KeyPair struct {
	Public  ed25519.PublicKey
	Private ed25519.PrivateKey
}

// The test keys. Each comes from a fixed seed, so a signature made with one is the same bytes in
// every run.
var (
	// ReleaseKey signs the releases of tests; the hosts they run trust it.
	ReleaseKey = fixedKey("release")
	// SecondKey is another key a host may trust beside ReleaseKey.
	SecondKey = fixedKey("second")
	// StrangerKey is a key no host in a test trusts.
	StrangerKey = fixedKey("stranger")
)

func fixedKey(name string) KeyPair {
	seed := sha256.Sum256([]byte("mesh-host test key " + name))
	priv := ed25519.NewKeyFromSeed(seed[:])
	return KeyPair{Public: priv.Public().(ed25519.PublicKey), Private: priv}
}
