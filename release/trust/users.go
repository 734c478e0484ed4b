package trust

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/wire"
)

// NodeUser signs a user JWT for node's public key userPub (made on the node, which keeps its
// seed), a user of the nodes account: signed by its signing key, no expiry (a laptop must not fail for being a
// laptop), named node, tagged NodeTag and NodeTagPrefix+node (the JWT library lowercases tags;
// the name keeps the id as it is), allowed exactly NodePermissions(names, node).
func (s *Store) NodeUser(names wire.Names, node, userPub string) (string, error) {
	if err := wire.ValidNode(node); err != nil {
		return "", fmt.Errorf("trust: node user: %w", err)
	}
	if !nkeys.IsValidPublicUserKey(userPub) {
		return "", fmt.Errorf("trust: node %s: %q is not an nkey user public key (U…)", node, userPub)
	}
	text, err := signUser(s.nodesSigning, s.nodesPub, userPub, node, []string{NodeTag, NodeTagPrefix + node, wire.NodeUserTagPrefix + strconv.Itoa(wire.NodeUserVersion)}, NodePermissions(names, node), 0)
	if err != nil {
		return "", fmt.Errorf("trust: sign node %s's user: %w", node, err)
	}
	return text, nil
}

// TokenUser makes a fresh user (a new nkey pair) of the nodes account for an enrolment token,
// signed by its signing key: its JWT expires at
// expires and allows only TokenPermissions, tagged with the token's ttl and tags (the root it
// pins, wire.TokenRootTag). It returns the user as a .creds text, and its public key (what
// TokenInboxPrefix and Revoke take).
func (s *Store) TokenUser(names wire.Names, expires time.Time, ttl time.Duration, tags ...string) (creds, userPub string, err error) {
	if !expires.After(time.Now()) {
		return "", "", fmt.Errorf("trust: an enrolment token's user must expire in the future, not at %s", expires.UTC().Format(time.RFC3339))
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		return "", "", fmt.Errorf("trust: token user key: %w", err)
	}
	userPub, _ = user.PublicKey()
	text, err := signUser(s.nodesSigning, s.nodesPub, userPub, "enrolment token", append([]string{TokenTag, wire.TokenTTLTag + ttl.String()}, tags...), TokenPermissions(names, userPub), expires.Unix())
	if err != nil {
		return "", "", fmt.Errorf("trust: sign a token user: %w", err)
	}
	seed, _ := user.Seed()
	b, err := formatCreds(text, seed)
	if err != nil {
		return "", "", err
	}
	return string(b), userPub, nil
}
