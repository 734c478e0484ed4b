package trust

import (
	"fmt"
	"slices"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/wire"
)

// Why two accounts. NATS checks a message's subject against its publisher's permissions, never
// its reply subject, and JetStream answers an API request by publishing to its reply subject in
// the account the request came from. In one account with the streams, a node could make a
// request it is allowed (a stream info, a direct get) with another node's target key or
// heartbeat subject as its reply, and the server's answer would be stored there: junk over the
// key, or a copied delete marker deleting it. So nodes and enrolment tokens are users of their
// own account, the nodes account, which has no JetStream and imports from the mesh account only
// what nodes need (shared below). A request that crosses a service import gets a reply subject
// of the server's making (_R_.…) in the mesh account, and the answer is carried back to the
// requester's own account, where no stream is.

// A sharing is one subject the mesh account exports and the nodes account imports.
type sharing struct {
	name string
	// subject is the subject in the mesh account; local, when set, what nodes publish instead
	// (the JetStream API is imported under wire.NodeJSAPIPrefix).
	subject, local string
	kind           jwt.ExportType
}

// shared is everything the nodes account imports from the mesh account, each export private
// (an import needs an activation token the mesh account signed for the nodes account), each
// service answering once. It names no names prefix: a node user's permissions name its own
// subjects under its mesh's prefix.
var shared = func() []sharing {
	every := wire.Names{Prefix: "*"}
	api := func(name, call string) sharing {
		return sharing{name: name, subject: "$JS.API." + call, local: wire.NodeJSAPIPrefix + "." + call, kind: jwt.Service}
	}
	return []sharing{
		// js.KeyValue, js.ObjectStore.
		api("JetStream stream info", "STREAM.INFO.*"),
		// A key's last value, kv.Get of a manifest, obs.GetInfo, an object's chunks. No
		// consumer create: a node creates no consumer (docs/security.md).
		api("JetStream direct get", "DIRECT.GET.>"),
		// The writes of the KV buckets, which tell a node that a key it follows changed; each
		// node's user may subscribe to its own keys' subjects alone (NodePermissions).
		{name: "key writes", subject: "$KV.>", kind: jwt.Stream},
		// A node's heartbeat, stored by the heartbeat stream, its PubAck carried back.
		{name: "heartbeats", subject: every.HeartbeatWildcard(), kind: jwt.Service},
		// The enrolment service (not its revoke subject: admin only), and its renewal of a
		// node's user (decision 0024).
		{name: "enrolment", subject: every.EnrolSubject(), kind: jwt.Service},
		{name: "renewal", subject: every.RenewWildcard(), kind: jwt.Service},
		// What the mesh account sends to a node's inbox (wire.NodeInboxPrefix).
		{name: "node inboxes", subject: wire.NodeInboxPrefix(">"), kind: jwt.Stream},
	}
}()

// legacyShared is what shared was until decision 0022: nodes created consumers (a watch on one
// key, an object's chunks) and answered their flow control. A store signed with it is signed
// again for the transition of decision 0024 when it is loaded (transition.go); nothing else is.
var legacyShared = func() []sharing {
	out := []sharing{}
	for _, s := range shared {
		if s.subject == "$KV.>" || s.name == "renewal" {
			continue
		}
		out = append(out, s)
		if s.subject == "$JS.API.STREAM.INFO.*" {
			out = append(out, sharing{name: "JetStream consumer create", subject: "$JS.API.CONSUMER.CREATE.>",
				local: wire.NodeJSAPIPrefix + ".CONSUMER.CREATE.>", kind: jwt.Service})
		}
	}
	return append(out, sharing{name: "JetStream flow control", subject: "$JS.FC.>", kind: jwt.Service})
}()

// meshExports are the mesh account's exports: shared, private.
func meshExports() jwt.Exports { return exportsOf(shared) }

func exportsOf(shared []sharing) jwt.Exports {
	var out jwt.Exports
	for _, s := range shared {
		e := &jwt.Export{Name: s.name, Subject: jwt.Subject(s.subject), Type: s.kind, TokenReq: true}
		if s.kind == jwt.Service {
			e.ResponseType = jwt.ResponseTypeSingleton
		}
		out.Add(e)
	}
	return out
}

// nodesImports are the nodes account's imports of shared, each with its activation token signed
// by the mesh account's key.
func nodesImports(mesh nkeys.KeyPair, nodesPub string) (jwt.Imports, error) {
	return importsOf(shared, mesh, nodesPub)
}

func importsOf(shared []sharing, mesh nkeys.KeyPair, nodesPub string) (jwt.Imports, error) {
	meshPub, err := mesh.PublicKey()
	if err != nil {
		return nil, err
	}
	var out jwt.Imports
	for _, s := range shared {
		act := jwt.NewActivationClaims(nodesPub)
		act.Name = s.name
		act.ImportSubject = jwt.Subject(s.subject)
		act.ImportType = s.kind
		token, err := act.Encode(mesh)
		if err != nil {
			return nil, fmt.Errorf("activation of %s: %w", s.subject, err)
		}
		out.Add(&jwt.Import{
			Name: s.name, Subject: jwt.Subject(s.subject), LocalSubject: jwt.RenamingSubject(s.local),
			Account: meshPub, Token: token, Type: s.kind,
		})
	}
	return out, nil
}

// checkShared checks that the mesh account exports, and the nodes account imports from it,
// exactly shared: what decides which of a node's calls reach the mesh account.
func checkShared(mesh, nodes *jwt.AccountClaims) error { return checkSharing(shared, mesh, nodes) }

func checkSharing(shared []sharing, mesh, nodes *jwt.AccountClaims) error {
	if len(mesh.Exports) != len(shared) || len(nodes.Imports) != len(shared) {
		return fmt.Errorf("the mesh account has %d exports and the nodes account %d imports, want %d each", len(mesh.Exports), len(nodes.Imports), len(shared))
	}
	for _, s := range shared {
		if !slices.ContainsFunc(mesh.Exports, func(e *jwt.Export) bool {
			return string(e.Subject) == s.subject && e.Type == s.kind && e.TokenReq
		}) {
			return fmt.Errorf("the mesh account does not export %s %s privately", s.kind, s.subject)
		}
		if !slices.ContainsFunc(nodes.Imports, func(im *jwt.Import) bool {
			if string(im.Subject) != s.subject || string(im.LocalSubject) != s.local || im.Type != s.kind || im.Account != mesh.Subject {
				return false
			}
			act, err := jwt.DecodeActivationClaims(im.Token) // checks its signature
			return err == nil && act.Issuer == mesh.Subject && act.Subject == nodes.Subject &&
				string(act.ImportSubject) == s.subject && act.ImportType == s.kind && act.Expires == 0
		}) {
			return fmt.Errorf("the nodes account does not import %s %s as %q from the mesh account %s with the mesh account's activation", s.kind, s.subject, s.local, mesh.Subject)
		}
	}
	return nil
}
