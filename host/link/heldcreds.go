package link

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// heldCreds are the credentials the link connects with: read from the creds file (or nkey seed
// file) once, at Open, and replaced only by the credentials the link renewed itself
// (takeCredentials). nats.go's own options read the file again at every connect, so a file
// rewritten under a running host — another node enrolled into the same root — became the
// running host's user at its next reconnect, refused on its own node's subjects.
type heldCreds struct {
	mu   sync.Mutex
	jwt  string // "" for an nkey seed file
	seed []byte
}

// readHeldCreds reads a .creds file's user JWT and seed, or an nkey user seed file's seed.
func readHeldCreds(path string, b []byte) (*heldCreds, error) {
	if !bytes.Contains(b, []byte("BEGIN NATS USER JWT")) {
		kp, err := nkeys.ParseDecoratedUserNKey(b)
		if err != nil {
			return nil, fmt.Errorf("link: nkey seed %s: %w", path, err)
		}
		defer kp.Wipe()
		seed, err := kp.Seed()
		if err != nil {
			return nil, fmt.Errorf("link: nkey seed %s: %w", path, err)
		}
		return &heldCreds{seed: bytes.Clone(seed)}, nil // Wipe clears the pair's own
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return nil, fmt.Errorf("link: credentials %s: the user JWT: %w", path, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, fmt.Errorf("link: credentials %s: the user seed: %w", path, err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("link: credentials %s: the user seed: %w", path, err)
	}
	return &heldCreds{jwt: token, seed: bytes.Clone(seed)}, nil // Wipe clears the pair's own
}

// option is the nats.go option that connects with the held credentials.
func (h *heldCreds) option() (nats.Option, error) {
	if h.jwt != "" {
		return nats.UserJWT(h.userJWT, h.sign), nil
	}
	kp, err := nkeys.FromSeed(h.seed)
	if err != nil {
		return nil, err
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	return nats.Nkey(pub, h.sign), nil
}

func (h *heldCreds) userJWT() (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jwt, nil
}

// sign signs the server's nonce with the held seed.
func (h *heldCreds) sign(nonce []byte) ([]byte, error) {
	kp, err := nkeys.FromSeed(h.seed)
	if err != nil {
		return nil, err
	}
	defer kp.Wipe()
	return kp.Sign(nonce)
}

// renewed replaces the held JWT with one the link renewed, and wrote, itself.
func (h *heldCreds) renewed(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jwt = token
}
