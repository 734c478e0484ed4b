package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/wire"
)

var trustFiles = []string{
	OperatorSeedFile, OperatorJWTFile, SystemSeedFile, SystemJWTFile, SystemCredsFile,
	AccountSeedFile, AccountJWTFile, AccountSigningSeedFile, AdminCredsFile,
	NodesSeedFile, NodesJWTFile, NodesSigningSeedFile,
}

// The decision's table: the files, 0600 in a 0700 directory, made once; a second Ensure loads
// them byte for byte unchanged.
func TestEnsureMakesTheIdentitiesOnceInAPrivateDirectory(t *testing.T) {
	data := t.TempDir()
	s, err := Ensure(data)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(data, Dir)
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, %v; want a 0700 directory", dir, st.Mode(), err)
	}
	before := map[string]string{}
	for _, name := range trustFiles {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want 0600", name, st.Mode().Perm())
		}
		b, _ := os.ReadFile(filepath.Join(dir, name))
		before[name] = string(b)
	}
	entries, _ := os.ReadDir(data)
	for _, e := range entries {
		if e.Name() != Dir {
			t.Errorf("Ensure left %s in the data directory", e.Name())
		}
	}

	again, err := Ensure(data)
	if err != nil {
		t.Fatal(err)
	}
	if again.AccountPublicKey() != s.AccountPublicKey() || again.OperatorPublicKey() != s.OperatorPublicKey() ||
		again.SystemAccountPublicKey() != s.SystemAccountPublicKey() || again.SigningPublicKey() != s.SigningPublicKey() ||
		again.NodesAccountPublicKey() != s.NodesAccountPublicKey() || again.NodesSigningPublicKey() != s.NodesSigningPublicKey() {
		t.Error("a second Ensure has other identities")
	}
	for _, name := range trustFiles {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != before[name] {
			t.Errorf("a second Ensure rewrote %s", name)
		}
	}
}

// The accounts are what a server needs: the operator names the system account, the mesh account
// has JetStream without limits and the signing key, and admin.creds is signed by that key with
// no permission limits.
func TestIdentitiesAreWhatTheServerNeeds(t *testing.T) {
	s, err := Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if oc := s.OperatorClaims(); oc.SystemAccount != s.SystemAccountPublicKey() || oc.Name != OperatorName {
		t.Errorf("operator: %+v", oc)
	}
	jwts, err := s.AccountJWTs()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(jwts[s.AccountPublicKey()])
	if err != nil {
		t.Fatal(err)
	}
	if !ac.Limits.JetStreamLimits.IsUnlimited() {
		t.Errorf("the mesh account's JetStream limits are %+v, want enabled without limits", ac.Limits.JetStreamLimits)
	}
	if !ac.SigningKeys.Contains(s.SigningPublicKey()) || ac.Issuer != s.OperatorPublicKey() {
		t.Errorf("mesh account: issuer %s, signing keys %v", ac.Issuer, ac.SigningKeys)
	}
	creds, err := os.ReadFile(s.AdminCreds())
	if err != nil {
		t.Fatal(err)
	}
	text, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(text)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Issuer != s.SigningPublicKey() || uc.IssuerAccount != s.AccountPublicKey() || !uc.Pub.Empty() || !uc.Sub.Empty() || uc.Resp != nil || uc.Expires != 0 {
		t.Errorf("admin user: issuer %s for %s, permissions %+v, expires %d", uc.Issuer, uc.IssuerAccount, uc.Permissions, uc.Expires)
	}

	// The nodes account: no JetStream, its own signing key, nothing for a user signed without
	// permissions, and exactly the imports of shared, each from the mesh account with its
	// activation; the mesh account exports them privately and imports nothing.
	nc, err := jwt.DecodeAccountClaims(jwts[s.NodesAccountPublicKey()])
	if err != nil {
		t.Fatal(err)
	}
	if nc.Issuer != s.OperatorPublicKey() || nc.Name != NodesAccountName || !nc.SigningKeys.Contains(s.NodesSigningPublicKey()) || len(nc.SigningKeys) != 1 {
		t.Errorf("nodes account: issuer %s, name %s, signing keys %v", nc.Issuer, nc.Name, nc.SigningKeys)
	}
	if nc.Limits.IsJSEnabled() {
		t.Errorf("the nodes account has JetStream: %+v", nc.Limits.JetStreamLimits)
	}
	if !slices.Equal(nc.DefaultPermissions.Pub.Deny, jwt.StringList{">"}) || !slices.Equal(nc.DefaultPermissions.Sub.Deny, jwt.StringList{">"}) ||
		len(nc.DefaultPermissions.Pub.Allow)+len(nc.DefaultPermissions.Sub.Allow) != 0 {
		t.Errorf("the nodes account's default permissions are %+v, want nothing allowed", nc.DefaultPermissions)
	}
	if len(nc.Exports) != 0 || len(ac.Imports) != 0 {
		t.Errorf("the nodes account exports %d subjects, the mesh account imports %d; want none", len(nc.Exports), len(ac.Imports))
	}
	if err := checkShared(ac, nc); err != nil {
		t.Error(err)
	}
	var imported []string
	for _, im := range nc.Imports {
		local := string(im.LocalSubject)
		if local == "" {
			local = string(im.Subject)
		}
		imported = append(imported, fmt.Sprintf("%s %s as %s", im.Type, im.Subject, local))
	}
	slices.Sort(imported)
	want := []string{
		"service $JS.API.DIRECT.GET.> as $JS.mesh.API.DIRECT.GET.>",
		"service $JS.API.STREAM.INFO.* as $JS.mesh.API.STREAM.INFO.*",
		"service *.enrol.node as *.enrol.node",
		"service *.enrol.renew.* as *.enrol.renew.*",
		"service *.node.*.heartbeat as *.node.*.heartbeat",
		"stream $KV.> as $KV.>",
		"stream _INBOX.node.> as _INBOX.node.>",
	}
	if !slices.Equal(imported, want) {
		t.Errorf("the nodes account imports\n%s\nwant\n%s", strings.Join(imported, "\n"), strings.Join(want, "\n"))
	}
	for _, e := range ac.Exports {
		if !e.TokenReq || (e.IsService() && e.ResponseType != jwt.ResponseTypeSingleton) {
			t.Errorf("the mesh account exports %s %s publicly or with several responses (%s)", e.Type, e.Subject, e.ResponseType)
		}
	}
}

// A trust directory made with node users in the mesh account (an earlier development build) is
// refused, saying so and what to do: its users cannot be moved.
func TestEnsureRefusesTheOneAccountLayout(t *testing.T) {
	data := t.TempDir()
	if _, err := Ensure(data); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{NodesSeedFile, NodesJWTFile, NodesSigningSeedFile} {
		if err := os.Remove(filepath.Join(data, Dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Ensure(data)
	if err == nil || !strings.Contains(err.Error(), "earlier development build") || !strings.Contains(err.Error(), "Move the directory aside") {
		t.Fatalf("Ensure on a one-account directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, Dir, NodesSeedFile)); err == nil {
		t.Error("Ensure added the nodes account to it")
	}
}

// An import whose activation the mesh account did not sign is not taken for the real one.
func TestEnsureRefusesANodesAccountWithAForeignActivation(t *testing.T) {
	data, other := t.TempDir(), t.TempDir()
	s, err := Ensure(data)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Ensure(other)
	if err != nil {
		t.Fatal(err)
	}
	// The other set's imports, pointed at this mesh account, in this nodes account, signed by
	// this operator: only the activations' issuer is wrong.
	jwts, _ := s.AccountJWTs()
	nc, _ := jwt.DecodeAccountClaims(jwts[s.NodesAccountPublicKey()])
	ojwts, _ := o.AccountJWTs()
	onc, _ := jwt.DecodeAccountClaims(ojwts[o.NodesAccountPublicKey()])
	nc.Imports = onc.Imports
	for _, im := range nc.Imports {
		im.Account = s.AccountPublicKey()
	}
	text, err := nc.Encode(s.operator)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, Dir, NodesJWTFile), []byte(text+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(data); err == nil || !strings.Contains(err.Error(), "activation") {
		t.Fatalf("Ensure with foreign activations: %v", err)
	}
}

// A trust directory with a file missing is never patched up: that would make new identities
// that no node knows, or lose revocations. The error names the file and the way out.
func TestEnsureRefusesAnIncompleteDirectory(t *testing.T) {
	for _, name := range trustFiles {
		t.Run(name, func(t *testing.T) {
			data := t.TempDir()
			if _, err := Ensure(data); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(data, Dir, name)); err != nil {
				t.Fatal(err)
			}
			_, err := Ensure(data)
			if err == nil || !strings.Contains(err.Error(), name+" is missing") || !strings.Contains(err.Error(), "backup") {
				t.Fatalf("Ensure with %s missing: %v", name, err)
			}
			if _, err := os.Stat(filepath.Join(data, Dir, name)); err == nil {
				t.Errorf("Ensure made %s again", name)
			}
		})
	}
}

// Files from two different sets do not make one: the error names the file that does not belong.
func TestEnsureRefusesIdentitiesThatDoNotBelongTogether(t *testing.T) {
	for _, name := range []string{AccountJWTFile, OperatorJWTFile, AccountSigningSeedFile, SystemJWTFile, NodesJWTFile, NodesSigningSeedFile, NodesSeedFile, AccountSeedFile} {
		t.Run(name, func(t *testing.T) {
			data, other := t.TempDir(), t.TempDir()
			for _, d := range []string{data, other} {
				if _, err := Ensure(d); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := os.ReadFile(filepath.Join(other, Dir, name))
			if err := os.WriteFile(filepath.Join(data, Dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Ensure(data)
			if err == nil {
				t.Fatalf("Ensure took %s from another set", name)
			}
			if !strings.Contains(err.Error(), "does not belong") {
				t.Errorf("error: %v", err)
			}
		})
	}
}

// Two processes making the identities at once end up with one set.
func TestConcurrentEnsuresAgreeOnOneSetOfIdentities(t *testing.T) {
	data := t.TempDir()
	const n = 8
	keys := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := Ensure(data)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = s.AccountPublicKey()
		})
	}
	wg.Wait()
	for i := range keys {
		if keys[i] != keys[0] {
			t.Fatalf("Ensure %d has account %s, Ensure 0 %s", i, keys[i], keys[0])
		}
	}
	entries, _ := os.ReadDir(data)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

// A node's user is what the decision says: named after the node, tagged, no expiry, signed by
// the account signing key for the mesh account, NodePermissions exactly.
func TestNodeUserIsSignedForTheNodeWithNoExpiry(t *testing.T) {
	s, err := Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	n := wire.NamesFor("")
	text, err := s.NodeUser(n, "Web-01", pub)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(text)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Subject != pub || uc.Name != "Web-01" || uc.Expires != 0 || uc.Issuer != s.NodesSigningPublicKey() || uc.IssuerAccount != s.NodesAccountPublicKey() {
		t.Errorf("claims: subject %s name %s expires %d issuer %s account %s", uc.Subject, uc.Name, uc.Expires, uc.Issuer, uc.IssuerAccount)
	}
	if tags := []string(uc.Tags); !slices.Contains(tags, NodeTag) || !slices.Contains(tags, "node:web-01") {
		t.Errorf("tags %v", tags)
	}
	want := NodePermissions(n, "Web-01")
	if !slices.Equal(uc.Pub.Allow, want.Pub.Allow) || !slices.Equal(uc.Sub.Allow, want.Sub.Allow) || len(uc.Pub.Deny)+len(uc.Sub.Deny) != 0 || uc.Resp != nil {
		t.Errorf("permissions %+v, want %+v", uc.Permissions, want)
	}

	for _, bad := range []struct{ node, pub string }{{"web.01", pub}, {"", pub}, {"web-01", s.AccountPublicKey()}, {"web-01", "nonsense"}} {
		if _, err := s.NodeUser(n, bad.node, bad.pub); err == nil {
			t.Errorf("NodeUser(%q, %q) signed", bad.node, bad.pub)
		}
	}
}

// A token user is fresh each time, expires with the token, and may only ask for enrolment.
func TestTokenUserExpiresWithTheTokenAndMayOnlyRequestEnrolment(t *testing.T) {
	s, err := Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := wire.NamesFor("")
	expires := time.Now().Add(time.Hour).Truncate(time.Second)
	creds, pub, err := s.TokenUser(n, expires, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	text, err := jwt.ParseDecoratedJWT([]byte(creds))
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(text)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Subject != pub || uc.Expires != expires.Unix() || !slices.Contains([]string(uc.Tags), TokenTag) || !slices.Contains([]string(uc.Tags), wire.TokenTTLTag+"1h0m0s") {
		t.Errorf("claims: subject %s (want %s) expires %d (want %d) tags %v", uc.Subject, pub, uc.Expires, expires.Unix(), uc.Tags)
	}
	if uc.Issuer != s.NodesSigningPublicKey() || uc.IssuerAccount != s.NodesAccountPublicKey() {
		t.Errorf("a token user is issued by %s for %s, want the nodes account's signing key %s for %s", uc.Issuer, uc.IssuerAccount, s.NodesSigningPublicKey(), s.NodesAccountPublicKey())
	}
	if !slices.Equal(uc.Pub.Allow, jwt.StringList{n.EnrolSubject()}) || !slices.Equal(uc.Sub.Allow, jwt.StringList{"_INBOX.enrol." + pub + ".>"}) {
		t.Errorf("permissions %+v", uc.Permissions)
	}
	if kp, err := jwt.ParseDecoratedUserNKey([]byte(creds)); err != nil {
		t.Error(err)
	} else if p, _ := kp.PublicKey(); p != pub {
		t.Errorf("the seed in the creds is %s's, not %s's", p, pub)
	}
	_, pub2, err := s.TokenUser(n, expires, time.Hour)
	if err != nil || pub2 == pub {
		t.Errorf("a second token user: %s, %v; want a new key", pub2, err)
	}
	if _, _, err := s.TokenUser(n, time.Now().Add(-time.Second), time.Minute); err == nil {
		t.Error("signed a token user that has already expired")
	}
}

// The node's permissions, written out: every subject the decision allows, for prefix "mesh" and
// node web-01. A change here is a change to the contract (docs/decisions/0011).
func TestNodePermissionsAreTheDecisionsList(t *testing.T) {
	p := NodePermissions(wire.NamesFor(""), "web-01")
	wantPub := []string{
		"mesh.node.web-01.heartbeat",
		"mesh.enrol.renew.web-01",
		"$JS.mesh.API.STREAM.INFO.KV_mesh_declarations",
		"$JS.mesh.API.STREAM.INFO.KV_mesh_host_targets",
		"$JS.mesh.API.STREAM.INFO.KV_mesh_host_releases",
		"$JS.mesh.API.STREAM.INFO.KV_mesh_host_withdrawals",
		"$JS.mesh.API.STREAM.INFO.KV_mesh_rollouts",
		"$JS.mesh.API.STREAM.INFO.OBJ_mesh_host_archives",
		"$JS.mesh.API.STREAM.INFO.OBJ_mesh_blobs",
		"$JS.mesh.API.DIRECT.GET.KV_mesh_declarations.$KV.mesh_declarations.web-01",
		"$JS.mesh.API.DIRECT.GET.KV_mesh_host_targets.$KV.mesh_host_targets.node.web-01",
		"$JS.mesh.API.DIRECT.GET.KV_mesh_host_targets.$KV.mesh_host_targets.fleet",
		"$JS.mesh.API.DIRECT.GET.KV_mesh_host_withdrawals.$KV.mesh_host_withdrawals.list",
		// The maintenance window's two keys (decision 0029).
		"$JS.mesh.API.DIRECT.GET.KV_mesh_host_targets.$KV.mesh_host_targets.window.node.web-01",
		"$JS.mesh.API.DIRECT.GET.KV_mesh_host_targets.$KV.mesh_host_targets.window.fleet",
		// The rollout plan (decision 0047).
		"$JS.mesh.API.DIRECT.GET.KV_mesh_rollouts.$KV.mesh_rollouts.plan",
		"$JS.mesh.API.DIRECT.GET.KV_mesh_host_releases.$KV.mesh_host_releases.>",
		"$JS.mesh.API.DIRECT.GET.OBJ_mesh_host_archives",
		"$JS.mesh.API.DIRECT.GET.OBJ_mesh_host_archives.$O.mesh_host_archives.M.*",
		"$JS.mesh.API.DIRECT.GET.OBJ_mesh_blobs",
		"$JS.mesh.API.DIRECT.GET.OBJ_mesh_blobs.$O.mesh_blobs.M.*",
	}
	if !slices.Equal([]string(p.Pub.Allow), wantPub) {
		t.Errorf("publish:\n got %q\nwant %q", p.Pub.Allow, wantPub)
	}
	if want := []string{
		"$KV.mesh_declarations.web-01", "$KV.mesh_host_targets.node.web-01", "$KV.mesh_host_targets.fleet",
		"$KV.mesh_host_withdrawals.list", "$KV.mesh_host_targets.window.node.web-01", "$KV.mesh_host_targets.window.fleet",
		"$KV.mesh_rollouts.plan", // the rollout plan (decision 0047)
		// The roots and the bus configuration (decisions 0045, 0046).
		"$KV.mesh_host_releases.root.>", "$KV.mesh_host_releases.bus",
		"_INBOX.node.web-01.>",
	}; !slices.Equal([]string(p.Sub.Allow), want) {
		t.Errorf("subscribe: got %q, want %q", p.Sub.Allow, want)
	}
	if len(p.Pub.Deny)+len(p.Sub.Deny) != 0 || p.Resp != nil {
		t.Errorf("denies or responses: %+v", p)
	}
}

// The templates an operator with their own NATS copies: every subject, with placeholders.
func TestTemplatesGiveEverySubjectWithPlaceholders(t *testing.T) {
	n := wire.NamesFor("")
	out := Templates(n)
	for _, s := range NodePermissions(n, "<node>").Pub.Allow {
		if !strings.Contains(out, s) {
			t.Errorf("the templates lack %s", s)
		}
	}
	for _, s := range []string{"_INBOX.node.<node>.>", n.EnrolSubject(), "_INBOX.enrol.<user public key>.>", "--allow-pub", NodeTag,
		NodesAccountName, wire.NodeJSAPIPrefix, "$JS.API.DIRECT.GET.>", "*.node.*.heartbeat", "--private", "generate activation"} {
		if !strings.Contains(out, s) {
			t.Errorf("the templates lack %s", s)
		}
	}
}

// Every revocation makes a JWT a server takes for newer than the one it holds: another id and a
// later issue time, even when revocations follow each other within a second (a JWT's id hashes
// its standard claims only, and a resolver ignores a JWT with the id it already has).
func TestEachRevocationIsANewerJWT(t *testing.T) {
	s, err := Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	prev, err := s.readNodes()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		if err := s.Revoke(t.Context(), nil, pub, time.Now()); !errors.Is(err, ErrNotPushed) {
			t.Fatalf("revocation %d: %v", i, err)
		}
		next, err := s.readNodes()
		if err != nil {
			t.Fatal(err)
		}
		if next.ID == prev.ID || next.IssuedAt <= prev.IssuedAt || len(next.Revocations) != i+1 {
			t.Fatalf("revocation %d: id %s issued %d with %d revocations, after id %s issued %d", i, next.ID, next.IssuedAt, len(next.Revocations), prev.ID, prev.IssuedAt)
		}
		prev = next
	}
}

// A store signed before decision 0022 (nodes imported consumer create and flow control) is
// signed again with today's sharing when loaded, its revocations kept; one whose sharing is
// neither is still refused (TestEnsureRefusesANodesAccountWithAForeignActivation).
// legacyStore makes a store in data signed as before decision 0022 (nodes created consumers),
// with one revocation, and returns its first signing key.
func legacyStore(t *testing.T, data string) (firstSigningPub string) {
	t.Helper()
	s, err := Ensure(data)
	if err != nil {
		t.Fatal(err)
	}
	jwts, _ := s.AccountJWTs()
	ac, _ := jwt.DecodeAccountClaims(jwts[s.AccountPublicKey()])
	nc, _ := jwt.DecodeAccountClaims(jwts[s.NodesAccountPublicKey()])
	ac.Exports = exportsOf(legacyShared)
	if nc.Imports, err = importsOf(legacyShared, s.account, s.NodesAccountPublicKey()); err != nil {
		t.Fatal(err)
	}
	nc.RevokeAt("UAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", time.Unix(1_700_000_000, 0))
	for name, c := range map[string]*jwt.AccountClaims{AccountJWTFile: ac, NodesJWTFile: nc} {
		text, err := c.Encode(s.operator)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, Dir, name), []byte(text+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if checkShared(ac, nc) == nil {
		t.Fatal("the legacy sharing passes today's check")
	}
	return s.NodesSigningPublicKey()
}

// checkTransition checks that s is in the transition of decision 0024 from first.
func checkTransition(t *testing.T, s *Store, first string) {
	t.Helper()
	jwts, _ := s.AccountJWTs()
	ac, _ := jwt.DecodeAccountClaims(jwts[s.AccountPublicKey()])
	nc, _ := jwt.DecodeAccountClaims(jwts[s.NodesAccountPublicKey()])
	if err := checkSharing(transitionShared, ac, nc); err != nil {
		t.Errorf("in transition: %v", err)
	}
	if !s.InTransition() || s.LegacySigningPublicKey() != first {
		t.Errorf("InTransition %v, first signing key %s, want true, %s", s.InTransition(), s.LegacySigningPublicKey(), first)
	}
	if s.NodesSigningPublicKey() == first || !nc.SigningKeys.Contains(first) || !nc.SigningKeys.Contains(s.NodesSigningPublicKey()) {
		t.Errorf("signing keys %v: want the first (%s) and a second one users are signed with (%s)", nc.SigningKeys.Keys(), first, s.NodesSigningPublicKey())
	}
	if !nc.Revocations.IsRevoked("UAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", time.Unix(1_699_999_999, 0)) {
		t.Error("the revocation was lost")
	}
	userPub := newUserPub(t)
	text, err := s.NodeUser(wire.NamesFor(""), "node-a", userPub)
	if err != nil {
		t.Fatal(err)
	}
	uc, _ := jwt.DecodeUserClaims(text)
	if uc.Issuer != s.NodesSigningPublicKey() {
		t.Errorf("a node user is signed by %s, want the second signing key %s", uc.Issuer, s.NodesSigningPublicKey())
	}
}

func newUserPub(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

func TestEnsureStartsATransitionForAStoreFromBeforeNodesLostConsumers(t *testing.T) {
	data := t.TempDir()
	first := legacyStore(t, data)
	copyDir := t.TempDir()
	if err := os.CopyFS(filepath.Join(copyDir, Dir), os.DirFS(filepath.Join(data, Dir))); err != nil {
		t.Fatal(err)
	}
	oldNodes, _ := jwt.DecodeAccountClaims(string(readFile(t, filepath.Join(data, Dir, NodesJWTFile))))
	s, err := Ensure(data)
	if err != nil {
		t.Fatalf("Ensure of a store from before: %v", err)
	}
	checkTransition(t, s, first)
	// A server keeps the JWT it holds when the new one has its id (a hash with the issue time in
	// seconds): signed within the second of the old one, the transition never reached a server.
	newNodes, _ := jwt.DecodeAccountClaims(string(readFile(t, filepath.Join(data, Dir, NodesJWTFile))))
	if newNodes.ID == oldNodes.ID || newNodes.IssuedAt <= oldNodes.IssuedAt {
		t.Errorf("the nodes account signed for the transition has id %s issued at %d, the one before %s at %d: a server would keep the old one",
			newNodes.ID, newNodes.IssuedAt, oldNodes.ID, oldNodes.IssuedAt)
	}
	again, err := Ensure(data)
	if err != nil {
		t.Fatalf("Ensure of a store in transition: %v", err)
	}
	checkTransition(t, again, first)
	// Another copy of the same trust directory signs with the same second key.
	other, err := Ensure(copyDir)
	if err != nil {
		t.Fatal(err)
	}
	if other.NodesSigningPublicKey() != s.NodesSigningPublicKey() {
		t.Errorf("two copies took second signing keys %s and %s, want the same", other.NodesSigningPublicKey(), s.NodesSigningPublicKey())
	}
}

// TestEnsureFinishesATransitionACrashInterrupted stops beginTransition after each of its writes.
func TestEnsureFinishesATransitionACrashInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash func(t *testing.T, dir string, next []byte, transitionJWTs map[string][]byte)
	}{
		{"after the second key is written", func(t *testing.T, dir string, next []byte, _ map[string][]byte) {
			writeFile(t, filepath.Join(dir, nodesNextSigningSeedFile), next)
		}},
		{"after the mesh account is written", func(t *testing.T, dir string, next []byte, j map[string][]byte) {
			writeFile(t, filepath.Join(dir, nodesNextSigningSeedFile), next)
			writeFile(t, filepath.Join(dir, AccountJWTFile), j[AccountJWTFile])
		}},
		{"after both accounts are written", func(t *testing.T, dir string, next []byte, j map[string][]byte) {
			writeFile(t, filepath.Join(dir, nodesNextSigningSeedFile), next)
			writeFile(t, filepath.Join(dir, AccountJWTFile), j[AccountJWTFile])
			writeFile(t, filepath.Join(dir, NodesJWTFile), j[NodesJWTFile])
		}},
		{"after the first key is moved aside", func(t *testing.T, dir string, next []byte, j map[string][]byte) {
			writeFile(t, filepath.Join(dir, nodesNextSigningSeedFile), next)
			writeFile(t, filepath.Join(dir, AccountJWTFile), j[AccountJWTFile])
			writeFile(t, filepath.Join(dir, NodesJWTFile), j[NodesJWTFile])
			if err := os.Rename(filepath.Join(dir, NodesSigningSeedFile), filepath.Join(dir, NodesLegacySigningSeedFile)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What a whole transition writes, from a copy.
			model := t.TempDir()
			first := legacyStore(t, model)
			crashed := t.TempDir()
			if err := os.CopyFS(filepath.Join(crashed, Dir), os.DirFS(filepath.Join(model, Dir))); err != nil {
				t.Fatal(err)
			}
			if _, err := Ensure(model); err != nil {
				t.Fatal(err)
			}
			j := map[string][]byte{}
			for _, name := range []string{AccountJWTFile, NodesJWTFile} {
				j[name] = readFile(t, filepath.Join(model, Dir, name))
			}
			tc.crash(t, filepath.Join(crashed, Dir), readFile(t, filepath.Join(model, Dir, NodesSigningSeedFile)), j)
			s, err := Ensure(crashed)
			if err != nil {
				t.Fatalf("Ensure after the crash: %v", err)
			}
			checkTransition(t, s, first)
			if _, err := os.Stat(filepath.Join(crashed, Dir, nodesNextSigningSeedFile)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s is left: %v", nodesNextSigningSeedFile, err)
			}
		})
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
