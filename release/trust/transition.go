package trust

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/internal/atomicfile"
)

// The transition of decision 0024. Node users signed before decision 0022 may create consumers
// and may not get their keys directly. Cutting them off at once would cut off every node enrolled
// before an upgrade, so a store signed before 0022 is signed again for a transition instead:
//
//   - the nodes account gets a second signing key, derived from the first (every copy of
//     DATA/trust derives the same one), with which every user is signed from then on; the first
//     stays, so the nodes' old users keep working;
//   - the sharing is today's plus what old users need (consumer create, flow control), which
//     their permissions alone can reach: a user signed with the new key may do neither;
//   - the enrolment service signs a node's user again with today's permissions when the node
//     asks (wire.RenewCredentialsHeader on its heartbeat), and records which key signed it;
//   - CutOver, once every node has renewed, drops the first signing key (the server then refuses
//     every user it signed and closes their connections) and the extra sharing.
const (
	// NodesLegacySigningSeedFile holds the nodes account's first signing key during the
	// transition; it is removed by CutOver.
	NodesLegacySigningSeedFile = "nodes-signing-legacy.nk"
	// nodesNextSigningSeedFile holds the second signing key while the transition is being
	// written: a crash leaves it, and the next load finishes the transition with it.
	nodesNextSigningSeedFile = "nodes-signing.next.nk"
)

// transitionShared is shared plus what users signed before decision 0022 need.
var transitionShared = func() []sharing {
	out := append([]sharing{}, shared...)
	for _, s := range legacyShared {
		if !containsSharing(shared, s.subject) {
			out = append(out, s)
		}
	}
	return out
}()

func containsSharing(list []sharing, subject string) bool {
	for _, s := range list {
		if s.subject == subject {
			return true
		}
	}
	return false
}

// ErrNotInTransition is CutOver's answer for a store that has nothing to cut over.
var ErrNotInTransition = errors.New("the nodes' users are not in transition: every user is signed with today's permissions")

// InTransition reports whether the nodes account still accepts users signed before decision 0022.
func (s *Store) InTransition() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.legacySigningPub != ""
}

// LegacySigningPublicKey is the nodes account's first signing key during the transition; "" after.
func (s *Store) LegacySigningPublicKey() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.legacySigningPub
}

// nextSigningKey derives the transition's signing key from the first one: two copies of the
// trust directory (two enrolment services) that each start the transition sign with the same key.
func nextSigningKey(first nkeys.KeyPair) (nkeys.KeyPair, error) {
	seed, err := first.Seed()
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, seed)
	mac.Write([]byte("mesh-host decision 0024: the nodes account's second signing key"))
	return nkeys.FromRawSeed(nkeys.PrefixByteAccount, mac.Sum(nil))
}

// beginTransition signs the mesh and nodes accounts again for the transition and makes the second
// signing key the one users are signed with. Each step can be redone: a crash part way leaves
// nodesNextSigningSeedFile, and the next load calls it again.
func (s *Store) beginTransition() error {
	unlock, err := s.lockAccount()
	if err != nil {
		return err
	}
	defer unlock()
	first, firstPub, err := readSeed(s.dir, NodesSigningSeedFile, nkeys.PrefixByteAccount)
	if errors.Is(err, fs.ErrNotExist) {
		// Only the last rename was left to do.
		return s.finishRenames()
	}
	if err != nil {
		return err
	}
	next, err := nextSigningKey(first)
	if err != nil {
		return fmt.Errorf("derive the nodes account's second signing key: %w", err)
	}
	nextPub, _ := next.PublicKey()
	nextSeed, _ := next.Seed()
	if err := atomicfile.WriteFile(filepath.Join(s.dir, nodesNextSigningSeedFile), append(nextSeed, '\n'), 0o600); err != nil {
		return fmt.Errorf("store the nodes account's second signing key: %w", err)
	}
	ac, nc, err := s.readAccounts()
	if err != nil {
		return err
	}
	nc.SigningKeys.Add(firstPub, nextPub)
	if err := s.signSharing(ac, nc, transitionShared); err != nil {
		return err
	}
	if err := atomicfile.Rename(filepath.Join(s.dir, NodesSigningSeedFile), filepath.Join(s.dir, NodesLegacySigningSeedFile)); err != nil {
		return fmt.Errorf("keep the nodes account's first signing key: %w", err)
	}
	return s.finishRenames()
}

// finishRenames makes the second signing key the current one.
func (s *Store) finishRenames() error {
	if err := atomicfile.Rename(filepath.Join(s.dir, nodesNextSigningSeedFile), filepath.Join(s.dir, NodesSigningSeedFile)); err != nil {
		return fmt.Errorf("make the second signing key the nodes account's: %w", err)
	}
	return nil
}

// readAccounts reads the mesh and the nodes account's claims.
func (s *Store) readAccounts() (ac, nc *jwt.AccountClaims, err error) {
	if nc, err = s.readNodes(); err != nil {
		return nil, nil, err
	}
	text, err := readJWT(s.dir, AccountJWTFile)
	if err != nil {
		return nil, nil, err
	}
	if ac, err = jwt.DecodeAccountClaims(text); err != nil {
		return nil, nil, broken(s.dir, AccountJWTFile, err)
	}
	return ac, nc, nil
}

// signSharing signs the mesh account with list's exports and the nodes account with its imports
// (everything else of each kept: the revocations, the signing keys given) and stores them.
func (s *Store) signSharing(ac, nc *jwt.AccountClaims, list []sharing) error {
	ac.Exports = exportsOf(list)
	var err error
	if nc.Imports, err = importsOf(list, s.account, s.nodesPub); err != nil {
		return fmt.Errorf("the nodes account's imports: %w", err)
	}
	if err := checkSharing(list, ac, nc); err != nil {
		return err
	}
	accountJWT, err := encodeAccount(ac, s.operator)
	if err != nil {
		return fmt.Errorf("re-sign the mesh account: %w", err)
	}
	nodesJWT, err := encodeAccount(nc, s.operator)
	if err != nil {
		return fmt.Errorf("re-sign the nodes account: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, AccountJWTFile), []byte(accountJWT+"\n"), 0o600); err != nil {
		return fmt.Errorf("store the mesh account: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, NodesJWTFile), []byte(nodesJWT+"\n"), 0o600); err != nil {
		return fmt.Errorf("store the nodes account: %w", err)
	}
	s.accountJWT = accountJWT
	return nil
}

// CutOver ends the transition: the nodes account drops its first signing key, so the servers
// refuse every user it signed (and close their connections), and the mesh account and the nodes
// account share what they share today, no more. The accounts are stored, then pushed on sys (a
// system user's connection); the first signing key is deleted once the servers have them. Run
// again after a failed push, it pushes again.
func (s *Store) CutOver(ctx context.Context, sys *nats.Conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.legacySigningPub == "" {
		return ErrNotInTransition
	}
	if err := s.cutOverLocked(ctx); err != nil {
		return fmt.Errorf("trust: cut over: %w", err)
	}
	nodesJWT, err := s.readNodesJWT()
	if err != nil {
		return err
	}
	if err := push(ctx, sys, s.accountJWT); err != nil {
		return fmt.Errorf("trust: cut over: the accounts are stored but the servers have not taken them (run it again): push the mesh account: %w", err)
	}
	if err := push(ctx, sys, nodesJWT); err != nil {
		return fmt.Errorf("trust: cut over: the accounts are stored but the servers have not taken them (run it again): push the nodes account: %w", err)
	}
	if err := os.Remove(filepath.Join(s.dir, NodesLegacySigningSeedFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("trust: cut over: delete %s: %w", NodesLegacySigningSeedFile, err)
	}
	s.legacySigningPub = ""
	return nil
}

// cutOverLocked stores the accounts without the transition; s.mu is held.
func (s *Store) cutOverLocked(ctx context.Context) error {
	unlock, err := s.lockAccount()
	if err != nil {
		return err
	}
	defer unlock()
	ac, nc, err := s.readAccounts()
	if err != nil {
		return err
	}
	if !nc.SigningKeys.Contains(s.legacySigningPub) && checkSharing(shared, ac, nc) == nil {
		return nil // stored by an earlier run whose push failed
	}
	nc.SigningKeys.Remove(s.legacySigningPub)
	// A server ignores a JWT with the id of the one it holds, and the id hashes the issue time
	// in seconds, not the signing keys (see storeRevocation).
	if err := waitPastSecond(ctx, max(ac.IssuedAt, nc.IssuedAt)); err != nil {
		return err
	}
	return s.signSharing(ac, nc, shared)
}

// recoverTransition finishes a transition a crash interrupted (nodesNextSigningSeedFile is
// left), before the signing key is read.
func (s *Store) recoverTransition() error {
	if _, err := os.Stat(filepath.Join(s.dir, nodesNextSigningSeedFile)); err != nil {
		return nil
	}
	return s.beginTransition()
}

// loadTransition reads the store's transition state once its accounts are read: it starts a
// transition for a store signed before decision 0022, and reads the first signing key of one
// under way.
func (s *Store) loadTransition(ac, nc *jwt.AccountClaims) error {
	switch {
	case checkShared(ac, nc) == nil:
		// Today's sharing. A first signing key left by a cut-over that stored the accounts and
		// stopped before deleting it is not used again: the account no longer names it.
		return nil
	case checkSharing(transitionShared, ac, nc) == nil:
		_, pub, err := readSeed(s.dir, NodesLegacySigningSeedFile, nkeys.PrefixByteAccount)
		if err != nil {
			return err
		}
		if !nc.SigningKeys.Contains(pub) {
			return broken(s.dir, NodesLegacySigningSeedFile, errors.New("the nodes account does not name it as a signing key"))
		}
		s.legacySigningPub = pub
		return nil
	case checkSharing(legacyShared, ac, nc) == nil:
		// A store signed before decision 0022, exactly as that version signed it.
		if err := s.beginTransition(); err != nil {
			return err
		}
		return s.reload()
	default:
		return broken(s.dir, NodesJWTFile, checkShared(ac, nc))
	}
}

// reload reads the signing key and the transition state again after beginTransition.
func (s *Store) reload() error {
	var err error
	if s.nodesSigning, s.nodesSigningPub, err = readSeed(s.dir, NodesSigningSeedFile, nkeys.PrefixByteAccount); err != nil {
		return err
	}
	ac, nc, err := s.readAccounts()
	if err != nil {
		return err
	}
	if !nc.SigningKeys.Contains(s.nodesSigningPub) {
		return broken(s.dir, NodesJWTFile, fmt.Errorf("the key in %s is not one of its signing keys", NodesSigningSeedFile))
	}
	text, err := readJWT(s.dir, AccountJWTFile)
	if err != nil {
		return err
	}
	s.accountJWT = text
	return s.loadTransition(ac, nc)
}

// waitPastSecond returns once the second of a JWT issued at iat (Unix seconds) is over.
func waitPastSecond(ctx context.Context, iat int64) error {
	wait := time.Until(time.Unix(iat+1, 0))
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// adoptCutOver ends the transition in this copy of DATA/trust when the servers' nodes account
// (onBus) shows another copy cut over: without it this copy's next revocation would push the
// first signing key back. s.mu and the account lock are held; nc is changed in place.
func (s *Store) adoptCutOver(nc, onBus *jwt.AccountClaims) error {
	if onBus == nil || s.legacySigningPub == "" || onBus.SigningKeys.Contains(s.legacySigningPub) ||
		!onBus.SigningKeys.Contains(s.nodesSigningPub) || len(onBus.Imports) != len(shared) {
		return nil
	}
	text, err := readJWT(s.dir, AccountJWTFile)
	if err != nil {
		return err
	}
	ac, err := jwt.DecodeAccountClaims(text)
	if err != nil {
		return broken(s.dir, AccountJWTFile, err)
	}
	nc.SigningKeys.Remove(s.legacySigningPub)
	if err := s.signSharing(ac, nc, shared); err != nil {
		return fmt.Errorf("trust: take the cut-over another copy of %s made: %w", Dir, err)
	}
	if err := os.Remove(filepath.Join(s.dir, NodesLegacySigningSeedFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	s.legacySigningPub = ""
	return nil
}

// PushIfNewer pushes the accounts on sys (a system user's connection) when the servers hold an
// older nodes account than DATA/trust (signed again for the transition by this process, or by
// another copy while the servers were away); it says whether it pushed. With no answer from the
// servers it does nothing: a server started from DATA/trust loads it.
func (s *Store) PushIfNewer(ctx context.Context, sys *nats.Conn) (bool, error) {
	onBus := s.nodesOnBus(ctx, sys)
	if onBus == nil {
		return false, nil
	}
	s.mu.Lock()
	text, err := s.readNodesJWT()
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	local, err := jwt.DecodeAccountClaims(text)
	if err != nil || local.IssuedAt <= onBus.IssuedAt {
		return false, err
	}
	return true, s.Push(ctx, sys)
}
