package lab

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	relbuild "github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/wire"
)

// keyFile is one ed25519 key as an operator holds it: NAME.key in keygen's form (the base64 of
// the seed), which every `--key` of mesh-release reads, and NAME.pub beside it.
type keyFile struct {
	Path    string
	PubPath string
	Priv    ed25519.PrivateKey
	Pub     string // standard base64, as trusted_keys and a root's keys hold it
	ID      string // wire.KeyID
}

// newKeyFile makes a key and writes dir/name.key (mode 0600) and dir/name.pub.
func (s *scenario) newKeyFile(dir, name string) keyFile {
	s.t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.t.Fatal(err)
	}
	p := filepath.Join(dir, name+".key")
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(priv.Seed())+"\n"), 0o600); err != nil {
		s.t.Fatal(err)
	}
	k := s.loadKeyFile(p)
	if err := os.WriteFile(k.PubPath, []byte(k.Pub+"\n"), 0o644); err != nil {
		s.t.Fatal(err)
	}
	return k
}

// loadKeyFile reads a key file mesh-release wrote (keygen, trust init); its .pub is beside it.
func (s *scenario) loadKeyFile(path string) keyFile {
	s.t.Helper()
	priv, err := relbuild.LoadKey(path)
	if err != nil {
		s.t.Fatal(err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	return keyFile{Path: path, PubPath: strings.TrimSuffix(path, ".key") + ".pub", Priv: priv,
		Pub: base64.StdEncoding.EncodeToString(pub), ID: wire.KeyID(pub)}
}

// putRoot puts r's JSON on the bus under root.<at> of the releases bucket, as anyone holding
// the bus's release-side credentials can: no check of its own, so the nodes alone judge it.
func (s *scenario) putRoot(r wire.Root, at uint64) {
	s.t.Helper()
	kv, err := s.f.Bus.Conn.JS.KeyValue(s.ctx, s.f.Bus.Names.Releases())
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := kv.Put(s.ctx, wire.RootKey(at), r.Marshal()); err != nil {
		s.t.Fatalf("put %s: %v", wire.RootKey(at), err)
	}
}

// busRoot reads root.<n> from the bus.
func (s *scenario) busRoot(n uint64) wire.Root {
	s.t.Helper()
	kv, err := s.f.Bus.Conn.JS.KeyValue(s.ctx, s.f.Bus.Names.Releases())
	if err != nil {
		s.t.Fatal(err)
	}
	e, err := kv.Get(s.ctx, wire.RootKey(n))
	if err != nil {
		s.t.Fatalf("get %s: %v", wire.RootKey(n), err)
	}
	r, err := wire.ParseRoot(e.Value())
	if err != nil {
		s.t.Fatalf("%s on the bus: %v", wire.RootKey(n), err)
	}
	return r
}

// nextRoot is prev's successor, unsigned: the same keys and roles, one version on, expiring at
// expires.
func nextRoot(prev wire.Root, expires time.Time) wire.Root {
	r := prev
	r.Version++
	r.Expires = expires.UTC().Format(time.RFC3339)
	r.Keys = map[string]string{}
	for id, k := range prev.Keys {
		r.Keys[id] = k
	}
	r.Roles = map[wire.Role]wire.RoleKeys{}
	for role, rk := range prev.Roles {
		rk.Keys = append([]string(nil), rk.Keys...)
		r.Roles[role] = rk
	}
	r.Signatures = nil
	return r
}

// signRoot adds each key's signature to r.
func (s *scenario) signRoot(r *wire.Root, keys ...keyFile) {
	s.t.Helper()
	for _, k := range keys {
		if err := r.Sign(k.Priv); err != nil {
			s.t.Fatal(err)
		}
	}
}

// onRoot is true of a heartbeat that says the node holds root version v (0: host.json's keys
// only, or a host from before roots).
func onRoot(v uint64) func(Beat) bool {
	return func(b Beat) bool { return b.TrustRoot == v }
}

// says is true of a heartbeat whose refusal or failed fetch says each of parts.
func says(parts ...string) func(Beat) bool {
	return func(b Beat) bool {
		var texts []string
		if b.Refused != nil {
			texts = append(texts, b.Refused.Error)
		}
		if b.Fetch != nil {
			texts = append(texts, b.Fetch.Error)
		}
		for _, text := range texts {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(text, p)
			}
			if all {
				return true
			}
		}
		return false
	}
}

// everyNode waits until every node's newest heartbeat satisfies ok.
func (s *scenario) everyNode(what string, ok func(Beat) bool) {
	s.t.Helper()
	if err := s.f.Beats.WaitAll(s.ctx, s.f.Names(), what, ok); err != nil {
		s.t.Fatal(err)
	}
}

// eachHeard waits, for each of nodes, for a heartbeat recorded after from that satisfies ok,
// and returns them in the order of nodes.
func (s *scenario) eachHeard(nodes []string, from int, what string, ok func(Beat) bool) []Beat {
	s.t.Helper()
	var out []Beat
	for _, n := range nodes {
		b, err := s.f.Beats.WaitAfter(s.ctx, from, n+": "+what, func(b Beat) bool { return b.Node == n && ok(b) })
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// beatsLater waits for count more heartbeats of node after from: what a test waits for before
// it says something did not happen.
func (s *scenario) beatsLater(node string, from, count int) {
	s.t.Helper()
	seen := 0
	if _, err := s.f.Beats.WaitAfter(s.ctx, from, fmt.Sprintf("%d more heartbeats of %s", count, node), func(b Beat) bool {
		if b.Node == node {
			seen++
		}
		return seen >= count
	}); err != nil {
		s.t.Fatal(err)
	}
}

// trust runs `mesh-release trust args…` and returns what it printed.
func (s *scenario) trust(args ...string) string {
	s.t.Helper()
	out, err := s.f.Release.Run(s.ctx, append([]string{"trust"}, args...)...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("mesh-release trust %s:\n%s", strings.Join(args, " "), out)
	return out
}
