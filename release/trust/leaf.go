package trust

import (
	"fmt"

	"github.com/nats-io/jwt/v2"

	"github.com/novox/mesh-host/wire"
)

// A site's leaf server (docs/decisions/0025) connects to the hub twice: as a user of the nodes
// account, which carries what its nodes and enrolment tokens send and receive, and as a user of
// the system account, which carries the account JWTs its resolver keeps (revocations). It holds
// no mesh-account user: the streams stay the hub's, and a leaf's machine holds nothing that can
// write them.
const (
	// LeafTag marks a leaf server's users; LeafTagPrefix+site names which site.
	LeafTag       = "mesh-leaf"
	LeafTagPrefix = "leaf:"
)

// LeafNodesPermissions is what a leaf server's nodes-account user may do on the hub, from the
// leaf's side (nats-server reverses them for the hub): whatever any node or enrolment token may
// do, the union of NodePermissions and TokenPermissions for every node and token. The leaf
// checks each node's own user against its own permissions; this user bounds what the site as a
// whole can reach, which is what a node can, for any node: a site's leaf server is trusted with
// its nodes' heartbeats and keys (docs/security.md).
func LeafNodesPermissions(names wire.Names) jwt.Permissions {
	var p jwt.Permissions
	for _, q := range []jwt.Permissions{NodePermissions(names, "*"), TokenPermissions(names, "*")} {
		p.Pub.Allow.Add(q.Pub.Allow...)
		p.Sub.Allow.Add(q.Sub.Allow...)
	}
	return p
}

// The system account's subjects a leaf's full account resolver uses (nats-server's events.go):
// it takes pushed account JWTs, asks the hub's resolvers for newer ones every interval, looks up
// one it lacks, and receives the answers on its server's internal inbox.
const (
	claimsUpdate        = ClaimsUpdateSubject
	accountClaimsUpdate = "$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE"
	claimsPack          = "$SYS.REQ.CLAIMS.PACK"
	claimsLookup        = "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP"
	serverInboxes       = "$SYS._INBOX.>"
)

// LeafSystemPermissions is what a leaf server's system-account user may do on the hub: receive
// the account JWTs pushed to every server and the answers to its own resolver's requests, ask
// for newer JWTs and look one up. Nothing else of the system account: it cannot push a JWT
// (the hub's resolvers take only the operator's signature anyway), kick connections, or read
// the hub's server events.
func LeafSystemPermissions() jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(claimsPack, claimsLookup)
	p.Sub.Allow.Add(claimsUpdate, accountClaimsUpdate, serverInboxes)
	return p
}

// LeafCreds makes the two users site's leaf server connects to the hub as, as .creds texts: one
// of the nodes account (signed by its signing key, so a revocation in the nodes account's JWT
// can remove it) allowed LeafNodesPermissions, and one of the system account allowed
// LeafSystemPermissions; both named "leaf <site>", tagged LeafTag and LeafTagPrefix+site, no
// expiry. Each call makes new key pairs.
func (s *Store) LeafCreds(names wire.Names, site string) (nodes, system []byte, err error) {
	name := "leaf " + site
	tags := []string{LeafTag, LeafTagPrefix + site}
	if nodes, err = newUserCreds(s.nodesSigning, s.nodesPub, name, tags, LeafNodesPermissions(names), 0); err != nil {
		return nil, nil, fmt.Errorf("trust: leaf %s's nodes-account user: %w", site, err)
	}
	if system, err = newUserCreds(s.system, "", name, tags, LeafSystemPermissions(), 0); err != nil {
		return nil, nil, fmt.Errorf("trust: leaf %s's system user: %w", site, err)
	}
	return nodes, system, nil
}
