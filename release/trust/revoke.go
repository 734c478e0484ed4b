package trust

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/internal/atomicfile"
)

// ClaimsUpdateSubject is where a system user pushes an account JWT to every server of the bus
// that uses a directory account resolver.
const ClaimsUpdateSubject = "$SYS.REQ.CLAIMS.UPDATE"

// ErrNotPushed wraps a Revoke whose revocation was stored but not taken by the server: it takes
// effect when the server next starts (serve loads nodes.jwt), or when Revoke is called again.
var ErrNotPushed = errors.New("the revocation is stored but the server has not taken it")

// Revoke revokes every JWT issued to userPub at or before at: it adds the key to the nodes
// account's revocations (node and token users are its users), together with those the servers on
// nc already hold (pushed from another copy of DATA/trust: a second enrolment service elsewhere),
// re-signs the account JWT with the operator key, stores it as DATA/trust/nodes.jwt, and pushes it on nc, a connection as the
// system user (SystemCreds), through ClaimsUpdateSubject. The server then disconnects the user and refuses it from then
// on. A revocation is never moved later than one already stored for the key.
func (s *Store) Revoke(ctx context.Context, nc *nats.Conn, userPub string, at time.Time) error {
	if !nkeys.IsValidPublicUserKey(userPub) {
		return fmt.Errorf("trust: revoke: %q is not an nkey user public key (U…)", userPub)
	}
	if at.IsZero() {
		at = time.Now()
	}
	text, err := s.storeRevocation(ctx, userPub, at, s.nodesOnBus(ctx, nc))
	if err != nil {
		return err
	}
	if err := push(ctx, nc, text); err != nil {
		return fmt.Errorf("trust: revoke %s: %w: %w", userPub, ErrNotPushed, err)
	}
	return nil
}

// accountLookupSubject is where a server with a directory resolver answers, to the system
// account, with the account JWT it holds ("" when it has none).
const accountLookupSubject = "$SYS.REQ.ACCOUNT.%s.CLAIMS.LOOKUP"

// nodesOnBus is the nodes account as the servers on nc hold it, when one answers with a JWT the
// operator signed for it; nil otherwise (no connection, no directory resolver). Another process
// with a copy of DATA/trust (a second enrolment service) may have pushed revocations this
// nodes.jwt lacks: a revocation made from nodes.jwt alone would drop them from the servers.
func (s *Store) nodesOnBus(ctx context.Context, nc *nats.Conn) *jwt.AccountClaims {
	if nc == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, fmt.Sprintf(accountLookupSubject, s.nodesPub), nil)
	if err != nil || len(msg.Data) == 0 {
		return nil
	}
	if s.checkAccount(NodesJWTFile, string(msg.Data), s.nodesPub) != nil {
		return nil
	}
	ac, err := jwt.DecodeAccountClaims(string(msg.Data))
	if err != nil {
		return nil
	}
	return ac
}

// storeRevocation adds the revocation, and every revocation onBus holds, to nodes.jwt, re-signed,
// and returns the new JWT.
func (s *Store) storeRevocation(ctx context.Context, userPub string, at time.Time, onBus *jwt.AccountClaims) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := s.lockAccount()
	if err != nil {
		return "", err
	}
	defer unlock()
	nc, err := s.readNodes()
	if err != nil {
		return "", err
	}
	if err := s.adoptCutOver(nc, onBus); err != nil {
		return "", err
	}
	nc.RevokeAt(userPub, at)
	issuedAt := nc.IssuedAt
	if onBus != nil {
		for pub, ts := range onBus.Revocations {
			nc.RevokeAt(pub, time.Unix(ts, 0)) // the later of the two times: it revokes more
		}
		issuedAt = max(issuedAt, onBus.IssuedAt)
	}
	// A JWT's id is a hash of its standard claims alone (issuer, subject, issued at, …), not of
	// its revocations, and a server's resolver ignores a JWT with the id of the one it holds: a
	// JWT re-signed within the second of the one it replaces would be dropped as the same. So
	// the new one is signed once the second of the old one is over.
	if wait := time.Until(time.Unix(issuedAt+1, 0)); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("trust: revoke %s: %w", userPub, ctx.Err())
		}
	}
	text, err := nc.Encode(s.operator)
	if err != nil {
		return "", fmt.Errorf("trust: re-sign the nodes account: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, NodesJWTFile), []byte(text+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("trust: store the revocation of %s: %w", userPub, err)
	}
	return text, nil
}

// Push sends the mesh and nodes accounts' current JWTs to the servers on nc (a system user's
// connection), as Revoke does after a change: for an operator whose server missed an update.
func (s *Store) Push(ctx context.Context, nc *nats.Conn) error {
	jwts, err := s.AccountJWTs()
	if err != nil {
		return err
	}
	if err := push(ctx, nc, jwts[s.accountPub]); err != nil {
		return fmt.Errorf("trust: push the mesh account: %w", err)
	}
	if err := push(ctx, nc, jwts[s.nodesPub]); err != nil {
		return fmt.Errorf("trust: push the nodes account: %w", err)
	}
	return nil
}

// claimUpdateResponse is the server's answer on ClaimsUpdateSubject.
type claimUpdateResponse struct {
	Data *struct {
		Account string `json:"account"`
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"data"`
	Error *struct {
		Account     string `json:"account"`
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

func push(ctx context.Context, nc *nats.Conn, accountJWT string) error {
	if nc == nil {
		return errors.New("no connection to the bus as the system user")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, ClaimsUpdateSubject, []byte(accountJWT))
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("no server answered on %s: is the connection the system user's (%s), and does the server use a directory account resolver? %w", ClaimsUpdateSubject, SystemCredsFile, err)
		}
		return fmt.Errorf("push the account JWT on %s: %w", ClaimsUpdateSubject, err)
	}
	var r claimUpdateResponse
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return fmt.Errorf("the server's answer on %s is not JSON: %w", ClaimsUpdateSubject, err)
	}
	if r.Error != nil {
		return fmt.Errorf("the server refused the account JWT: %s (code %d)", r.Error.Description, r.Error.Code)
	}
	if r.Data == nil || r.Data.Code != 200 {
		return fmt.Errorf("the server's answer on %s says neither updated nor refused: %q", ClaimsUpdateSubject, msg.Data)
	}
	return nil
}
