package trust

import (
	"slices"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/novox/mesh-host/wire"
)

// allows reports whether a permission list lets subject (which may hold wildcards) through
// whole, as nats-server matches subjects.
func allows(list jwt.StringList, subject string) bool {
	return slices.ContainsFunc(list, func(p string) bool { return server.SubjectMatchesFilter(subject, p) })
}

// A leaf's nodes-account user lets through what any node or enrolment token may do, and
// nothing a node may not; its system user may take pushed account JWTs and ask for them, and
// neither push one nor reach the rest of the system account.
func TestLeafUsersAllowWhatNodesAndTheResolverNeedAndNoMore(t *testing.T) {
	names := wire.NamesFor("")
	leaf := LeafNodesPermissions(names)
	node, token := NodePermissions(names, "web-07"), TokenPermissions(names, "UABC")
	for _, s := range slices.Concat(node.Pub.Allow, token.Pub.Allow) {
		if !allows(leaf.Pub.Allow, s) {
			t.Errorf("the leaf may not publish %s, which a node or a token may", s)
		}
	}
	for _, s := range slices.Concat(node.Sub.Allow, token.Sub.Allow) {
		if !allows(leaf.Sub.Allow, s) {
			t.Errorf("the leaf may not subscribe to %s, which a node or a token may", s)
		}
	}
	sys := LeafSystemPermissions()
	for _, tc := range []struct {
		name, subject string
		pub, sub, ok  bool
	}{
		{"a node's heartbeat", names.Heartbeat("web-07"), true, false, true},
		{"a consumer create", wire.NodeJSAPIPrefix + ".CONSUMER.CREATE.KV_" + names.Declarations(), true, false, false},
		{"a key write", "$KV." + names.Declarations() + ".web-07", false, true, true},
		{"a bucket's whole subject space", "$KV." + names.Declarations() + ".>", false, true, false},
		{"the mesh account's API", "$JS.API.STREAM.INFO.KV_" + names.Declarations(), true, false, false},
	} {
		list := leaf.Pub.Allow
		if tc.sub {
			list = leaf.Sub.Allow
		}
		if got := allows(list, tc.subject); got != tc.ok {
			t.Errorf("nodes-account leaf user, %s (%s): allowed %v, want %v", tc.name, tc.subject, got, tc.ok)
		}
	}
	for _, tc := range []struct {
		name, subject string
		sub, ok       bool
	}{
		{"a pushed account JWT", ClaimsUpdateSubject, true, true},
		{"its resolver's sync", "$SYS.REQ.CLAIMS.PACK", false, true},
		{"pushing an account JWT", ClaimsUpdateSubject, false, false},
		{"kicking a connection", "$SYS.REQ.SERVER.NCXX.KICK", false, false},
		{"the hub's connect events", "$SYS.ACCOUNT.ABC.CONNECT", true, false},
	} {
		list := sys.Pub.Allow
		if tc.sub {
			list = sys.Sub.Allow
		}
		if got := allows(list, tc.subject); got != tc.ok {
			t.Errorf("system leaf user, %s (%s): allowed %v, want %v", tc.name, tc.subject, got, tc.ok)
		}
	}
}
