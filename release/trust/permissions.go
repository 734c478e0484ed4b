package trust

import (
	"fmt"
	"strings"

	"github.com/nats-io/jwt/v2"

	"github.com/novox/mesh-host/wire"
)

// The JetStream API a node uses, as subjects in the nodes account (docs/decisions/0011, "A
// node's user"): the mesh account's API imported under wire.NodeJSAPIPrefix (accounts.go). Each
// was found by watching what nats.go v1.55's jetstream package sends for the calls the host
// makes; permissions_test.go proves each against a real server.
const (
	jsStreamInfo   = wire.NodeJSAPIPrefix + ".STREAM.INFO." // + stream: js.KeyValue, js.ObjectStore
	jsDirectGet    = wire.NodeJSAPIPrefix + ".DIRECT.GET."  // + stream.subject: a key's last value, obs.GetInfo; + stream: an object's chunks
	kvStreamPrefix = "KV_"
	objStreamPrefx = "OBJ_"
)

// kvStream and kvSubject are a KV bucket's stream and the subject of one of its keys.
func kvStream(bucket string) string       { return kvStreamPrefix + bucket }
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// objStream is an object store's stream.
func objStream(bucket string) string { return objStreamPrefx + bucket }

// getKey is the permission to get key's last value in bucket directly, and nothing else of the
// bucket: the subject names the key, and the server refuses a body with this form.
func getKey(bucket, key string) string {
	return jsDirectGet + kvStream(bucket) + "." + kvSubject(bucket, key)
}

// NodePermissions is everything node's user, in the nodes account, may do on the bus under
// names, and nothing else (the host's connection uses the inbox prefix
// wire.NodeInboxPrefix(node) and the JetStream API prefix wire.NodeJSAPIPrefix):
//
//   - publish its heartbeat, names.Heartbeat(node), and ask for its user signed again with
//     today's permissions, names.RenewSubject(node) (decision 0024);
//   - stream info of the streams of the buckets it reads (declarations, targets, releases,
//     withdrawals, rollouts) and of the archive and blob stores: what js.KeyValue, js.ObjectStore and
//     js.Stream ask;
//   - follow exactly its own keys: subscribe to each key's subject (the mesh account's writes,
//     imported) and get its last value directly — its declaration, its target
//     (wire.NodeTargetKey), the fleet target (wire.FleetTargetKey), the withdrawals list
//     (wire.WithdrawalsKey), its maintenance window and the fleet's (wire.NodeWindowKey,
//     wire.FleetWindowKey, in the targets bucket: decision 0029), and the rollout plan
//     (wire.PlanKey in the rollouts bucket: decision 0047, wire.NodeUserVersion 5);
//   - subscribe to the notices of the roots and of the bus configuration, the releases
//     bucket's keys root.<n> and wire.BusKey (decisions 0045, 0046; wire.NodeUserVersion 4);
//   - direct gets of a release manifest (kv.Get on releases), of an archive's or a blob's
//     metadata (obs.GetInfo), and of the messages of the archive and blob stores (an object's
//     chunks, one direct get each: internal/objfetch);
//   - subscribe below its own inbox prefix, wire.NodeInboxPrefix(node).
//
// It creates no consumer at all: a consumer's deliver subject is in its body, which permissions
// cannot see, and a push consumer delivering onto a heartbeat subject had the heartbeat stream
// store whatever the node could read (docs/security.md). Refused, among the rest: writing any
// bucket, reading another node's declaration or target by any means, creating, listing or
// deleting a consumer, and heartbeats as another node. The JetStream API calls are those of
// the mesh account, imported; the nodes account has no JetStream of its own, and the answer to
// any request comes back into the nodes account, whatever reply subject the request names.
func NodePermissions(names wire.Names, node string) jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(names.Heartbeat(node), names.RenewSubject(node))
	// The object stores a node reads the same way: host archives, and blobs, what declarations
	// name by digest (host/blobs).
	objs := []string{names.Archives(), names.Blobs()}
	for _, s := range []string{
		kvStream(names.Declarations()), kvStream(names.Targets()), kvStream(names.Releases()),
		kvStream(names.Withdrawals()), kvStream(names.Rollouts()),
	} {
		p.Pub.Allow.Add(jsStreamInfo + s)
	}
	for _, o := range objs {
		p.Pub.Allow.Add(jsStreamInfo + objStream(o))
	}
	for _, k := range nodeKeys(names, node) {
		p.Pub.Allow.Add(getKey(k.bucket, k.key))
		p.Sub.Allow.Add(kvSubject(k.bucket, k.key))
	}
	// A version may hold dots, so a manifest's key is one or more tokens.
	p.Pub.Allow.Add(jsDirectGet + kvStream(names.Releases()) + "." + kvSubject(names.Releases(), ">"))
	// The notices of the releases bucket's two keys every node follows besides its own: each
	// root (root.<n>, decision 0045) and the bus configuration (decision 0046). Not the
	// manifests' writes: a node fetches a manifest when a target names it.
	p.Sub.Allow.Add(kvSubject(names.Releases(), "root.>"), kvSubject(names.Releases(), wire.BusKey))
	for _, o := range objs {
		p.Pub.Allow.Add(
			// The next message on an object's chunk subject, $O.<bucket>.C.<nuid>, from a
			// sequence: a body ({"seq", "next_by_subj"}) the subject cannot name. It may read
			// any message of the store, which every node may (archives and blobs are for every
			// node; secrets go in a declaration).
			jsDirectGet+objStream(o),
			// Object names are base64url-encoded in the metadata subject: one token.
			jsDirectGet+objStream(o)+".$O."+o+".M.*",
		)
	}
	p.Sub.Allow.Add(wire.NodeInboxPrefix(node) + ".>")
	return p
}

// nodeKeys are the keys a node follows: its declaration, its target, the fleet target, the
// withdrawal list, the rollout plan, and its maintenance window and the fleet's (decision 0029: two keys of the
// targets bucket, so no new stream to read; a node enrolled before them lacks these two and
// keeps no window until its user is signed again: wire.NodeUserVersion 3, which such a host
// asks for).
func nodeKeys(names wire.Names, node string) []struct{ bucket, key string } {
	return []struct{ bucket, key string }{
		{names.Declarations(), node},
		{names.Targets(), wire.NodeTargetKey(node)},
		{names.Targets(), wire.FleetTargetKey},
		{names.Withdrawals(), wire.WithdrawalsKey},
		{names.Targets(), wire.NodeWindowKey(node)},
		{names.Targets(), wire.FleetWindowKey},
		{names.Rollouts(), wire.PlanKey},
	}
}

// TokenInboxPrefix is the inbox prefix an enrolment token's connection must use
// (nats.CustomInboxPrefix): its user may subscribe below it and nowhere else.
func TokenInboxPrefix(userPub string) string { return wire.TokenInboxPrefix(userPub) }

// TokenPermissions is everything an enrolment token's user may do: request the enrolment service
// (publish names.EnrolSubject()) and receive the answer below TokenInboxPrefix(userPub).
func TokenPermissions(names wire.Names, userPub string) jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(names.EnrolSubject())
	p.Sub.Allow.Add(TokenInboxPrefix(userPub) + ".>")
	return p
}

// Templates is what an operator who runs their own NATS (and `mesh-release init` on it) needs to
// set up by hand what `serve` makes itself: the mesh account with its exports, the nodes account
// with its imports, and the users' permissions, with <node>, <user public key>, <mesh account>
// and <nodes account> where each one's own value goes. Each list is also given in the form nsc
// takes.
func Templates(names wire.Names) string {
	node := NodePermissions(names, "<node>")
	token := TokenPermissions(names, "<user public key>")
	var exports, nscExports, imports, nscImports strings.Builder
	for _, sh := range shared {
		local, rename := sh.local, ""
		if local == "" {
			local = sh.subject
		} else {
			rename = " --local-subject '" + local + "'"
		}
		what, exportFlags, serviceFlag := "private (token required)", "", ""
		if sh.kind == jwt.Service {
			what, exportFlags, serviceFlag = what+", one response", " --service --response-type Singleton", " --service"
		}
		fmt.Fprintf(&exports, "#   %-7s %-26s %s\n", sh.kind, sh.subject, what)
		fmt.Fprintf(&nscExports, "#   nsc add export --account <mesh account> --private%s --subject '%s'\n", exportFlags, sh.subject)
		fmt.Fprintf(&imports, "#   %-7s %-26s from the mesh account, as %s\n", sh.kind, sh.subject, local)
		fmt.Fprintf(&nscImports, "#   nsc generate activation --account <mesh account> --target-account <nodes account>%s --subject '%s' -o act.jwt\n"+
			"#   nsc add import --account <nodes account> --token act.jwt%s\n", serviceFlag, sh.subject, rename)
	}
	return fmt.Sprintf(`# Two accounts per mesh, under one operator. NATS checks a message's subject against its
# publisher's permissions, never its reply subject, and JetStream answers to the reply subject in
# the requester's account: a node in the account that holds the streams could have the server
# write over another node's keys. So nodes live in their own account, which has no JetStream and
# imports from the mesh account only what they need; every answer comes back to the nodes account.
#
# The mesh account (%s): JetStream enabled without limits (in the account JWT,
# limits.mem_storage, disk_storage, streams and consumer all -1), a signing key that signs the
# release side's user, and these exports:
%s#
%s#
# The release side's user (mesh-release commands, the rollout controller, the enrolment
# service), in the mesh account: no permission limits.
#
# The nodes account (%s): no JetStream, a signing key of its own that signs node and
# token users (their revocations go in this account's JWT), default permissions denying publish
# and subscribe on '>', and these imports, each with an activation the mesh account signs:
%s#
%s#
# A node's user, one per node, in the nodes account, named <node>, tags %s and %s<node>,
# no expiry (mesh-host enrol makes the key on the node; sign its public key):
#   publish:   %s
#   subscribe: %s
#   and the node's host must use the inbox prefix %s and the JetStream API prefix %s
#
#   nsc add user --account <nodes account> --name <node> --public-key <user public key> \
#     --tag %s --tag %s<node> \
#     --allow-pub '%s' \
#     --allow-sub '%s'
#
# An enrolment token's user, one per token, in the nodes account, expiring with the token:
#   publish:   %s
#   subscribe: %s
#   and the enrolling host must use the inbox prefix %s
`,
		AccountName, exports.String(), nscExports.String(),
		NodesAccountName, imports.String(), nscImports.String(),
		NodeTag, NodeTagPrefix,
		list(node.Pub.Allow, "\n#              "), list(node.Sub.Allow, "\n#              "), wire.NodeInboxPrefix("<node>"), wire.NodeJSAPIPrefix,
		NodeTag, NodeTagPrefix, list(node.Pub.Allow, ","), list(node.Sub.Allow, ","),
		list(token.Pub.Allow, "\n#              "), list(token.Sub.Allow, "\n#              "), TokenInboxPrefix("<user public key>"))
}

func list(l jwt.StringList, sep string) string {
	s := ""
	for i, v := range l {
		if i > 0 {
			s += sep
		}
		s += v
	}
	return s
}
