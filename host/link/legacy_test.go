package link

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// legacyNode is node n1 on an operator-mode bus with a .creds file (by default with the
// permissions from before decision 0022), its link open.
type legacyNode struct {
	bus   *meshtest.OperatorBus
	creds string // the .creds file
	user  string // the user's public key
	link  *Link
	logs  *meshtest.Buffer
}

// openNode starts the bus, puts n1's declaration and the fleet target, and opens n1's link
// with credentials holding perms.
func openNode(t *testing.T, perms func(wire.Names, string) jwt.Permissions) *legacyNode {
	t.Helper()
	b := meshtest.StartOperatorBus(t)
	withdrawalsBucket(t, b.Admin.JS)
	n := &legacyNode{bus: b}
	n.creds, n.user = b.NodeCreds(t, t.TempDir(), "n1", perms(b.Names, "n1"))
	n.link, n.logs = openLogged(t, Options{URLs: []string{b.URL()}, Creds: n.creds, JSAPIPrefix: wire.NodeJSAPIPrefix})
	return n
}

// put writes key in bucket as the admin.
func (n *legacyNode) put(t *testing.T, bucket, key string, value []byte) uint64 {
	t.Helper()
	kv, err := n.bus.Admin.JS.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(t.Context(), key, value)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// consumers are the names of the consumers on the streams of the buckets a node follows.
func (n *legacyNode) consumers(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, bucket := range []string{names.Declarations(), names.Targets(), names.Withdrawals()} {
		st, err := n.bus.Admin.JS.Stream(t.Context(), kvStream(bucket))
		if err != nil {
			t.Fatal(err)
		}
		l := st.ConsumerNames(t.Context())
		for name := range l.Name() {
			out = append(out, bucket+"/"+name)
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return out
}

// lastHeartbeatHeader is the renewal header on n1's last stored heartbeat.
func (n *legacyNode) lastHeartbeatHeader(t *testing.T) string {
	t.Helper()
	st, err := n.bus.Admin.JS.Stream(t.Context(), names.HeartbeatStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(t.Context(), names.Heartbeat("n1"))
	if err != nil {
		t.Fatal(err)
	}
	return m.Header.Get(wire.RenewCredentialsHeader)
}

// sendCredentials publishes data on n1's credentials subject as the enrolment service would.
func (n *legacyNode) sendCredentials(t *testing.T, data []byte) {
	t.Helper()
	if err := n.bus.Admin.NC.Publish(wire.NodeCredentialsSubject("n1"), data); err != nil {
		t.Fatal(err)
	}
	if err := n.bus.Admin.NC.Flush(); err != nil {
		t.Fatal(err)
	}
}

// followsDeclaration waits until the link has reported the declaration's revision rev.
func (n *legacyNode) followsDeclaration(t *testing.T, rev uint64) {
	t.Helper()
	waitFor[DeclarationArrived](t, n.link, "declaration revision", func(e DeclarationArrived) bool { return e.Revision == rev })
}

// A host whose credentials are from before decision 0022 keeps following its declaration and
// its target with a consumer per key (it may neither subscribe to its keys nor get them
// directly), and every heartbeat asks for renewed credentials; a host with today's credentials
// holds no consumer and asks for nothing.
func TestAHostWithCredentialsFromBefore0022FollowsItsKeysByConsumerAndAsksForRenewal(t *testing.T) {
	for _, tc := range []struct {
		name          string
		perms         func(wire.Names, string) jwt.Permissions
		legacy        bool
		consumers     int
		header        string
		listensOnSubj bool
	}{
		{"legacy credentials", meshtest.LegacyNodePermissions, true, 4, wire.RenewCredentialsLegacy, true},
		{"today's credentials", trust.NodePermissions, false, 0, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := openNode(t, tc.perms)
			rev := n.put(t, names.Declarations(), "n1", decl("n1"))
			n.put(t, names.Targets(), wire.FleetTargetKey, target(t, wire.FleetTargetKey, "v1.1.0"))
			if got := n.link.LegacyCredentials(); got != tc.legacy {
				t.Fatalf("LegacyCredentials() = %v, want %v", got, tc.legacy)
			}
			// The declaration and the target come from separate watches, in either order.
			var gotDecl, tgt bool
			waitFor[Event](t, n.link, "the declaration and the fleet target", func(ev Event) bool {
				switch e := ev.(type) {
				case DeclarationArrived:
					gotDecl = gotDecl || e.Revision == rev
				case TargetChanged:
					tgt = tgt || (e.Target != nil && e.Target.Version == "v1.1.0")
				}
				return gotDecl && tgt
			})
			// Pushed, not polled: a write after the watches are up arrives.
			n.followsDeclaration(t, n.put(t, names.Declarations(), "n1", decl("n1")))
			// Each key's watch makes its consumer in its own time.
			meshtest.Eventually(t, "one consumer per key with legacy credentials, none with today's", func() bool {
				return len(n.consumers(t)) == tc.consumers
			})
			if err := n.link.PublishHeartbeat(t.Context(), wire.Heartbeat{State: wire.StateRunning}); err != nil {
				t.Fatalf("heartbeat: %v", err)
			}
			if got := n.lastHeartbeatHeader(t); got != tc.header {
				t.Errorf("heartbeat header %s: %q, want %q", wire.RenewCredentialsHeader, got, tc.header)
			}
			if got := n.link.renewSub != nil; got != tc.listensOnSubj {
				t.Errorf("subscribed to %s: %v, want %v", wire.NodeCredentialsSubject("n1"), got, tc.listensOnSubj)
			}
			if strings.Contains(strings.ToLower(n.logs.String()), "permissions violation") {
				t.Errorf("the link used a subject its user may not:\n%s", n.logs.String())
			}
		})
	}
}

// Renewed credentials sent on the node's credentials subject are stored in the creds file with
// the node's own seed, and the link reconnects with them and follows its keys by direct get: it
// creates no consumer, follows its maintenance window (which the legacy user may not read), and
// follows on once the old session's consumers are gone.
func TestRenewedCredentialsAreStoredAndTheLinkFollowsItsKeysWithNoConsumer(t *testing.T) {
	n := openNode(t, meshtest.LegacyNodePermissions)
	n.followsDeclaration(t, n.put(t, names.Declarations(), "n1", decl("n1")))
	meshtest.Eventually(t, "one consumer per key before the renewal", func() bool { return len(n.consumers(t)) == 4 })
	old := n.consumers(t)
	before, err := os.ReadFile(n.creds)
	if err != nil {
		t.Fatal(err)
	}
	renewed := n.bus.NodeJWT(t, n.user, trust.NodePermissions(n.bus.Names, "n1"), time.Time{})
	n.sendCredentials(t, []byte(renewed))
	waitFor[Reconnected](t, n.link, "the reconnect with the renewed credentials", nil)

	if n.link.LegacyCredentials() {
		t.Error("the link still says its credentials are legacy")
	}
	after, err := os.ReadFile(n.creds)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := jwt.ParseDecoratedJWT(after); err != nil || got != renewed {
		t.Errorf("the creds file holds JWT %.40q… (%v), want the renewed one", got, err)
	}
	seedOf := func(b []byte) string {
		kp, err := jwt.ParseDecoratedUserNKey(b)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := kp.Seed()
		return string(s)
	}
	if seedOf(after) != seedOf(before) {
		t.Error("the creds file's seed changed")
	}
	if fi, err := os.Stat(n.creds); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the creds file's mode: %v %v, want 0600", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(n.creds), ".tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left beside the creds file: %v", left)
	}
	if !strings.Contains(n.logs.String(), "credentials renewed") {
		t.Errorf("the log does not say the credentials were renewed:\n%s", n.logs.String())
	}

	// The new session follows by direct get: a write arrives, and no consumer was made for it.
	n.followsDeclaration(t, n.put(t, names.Declarations(), "n1", decl("n1")))
	n.put(t, names.Targets(), wire.NodeTargetKey("n1"), target(t, wire.NodeTargetKey("n1"), "v1.2.0"))
	waitFor[TargetChanged](t, n.link, "the node target", func(e TargetChanged) bool {
		return e.Key == wire.NodeTargetKey("n1")
	})
	// Renewed, it follows its maintenance window too, which the legacy user could not read.
	n.put(t, names.Targets(), wire.NodeWindowKey("n1"), window(t, wire.NodeWindowKey("n1"), []string{"n1"}, "mon 03:00-04:00 UTC"))
	waitFor[WindowChanged](t, n.link, "the node's window", func(e WindowChanged) bool {
		return e.Key == wire.NodeWindowKey("n1") && e.Window != nil
	})
	now := n.consumers(t)
	for _, c := range now {
		if !slices.Contains(old, c) {
			t.Errorf("consumer %s made after the renewal; want only the old session's %v, which the server removes", c, old)
		}
	}
	// The old session's consumers gone (the server removes them 30 s after), it follows on.
	for _, c := range now {
		bucket, name, _ := strings.Cut(c, "/")
		if err := n.bus.Admin.JS.DeleteConsumer(t.Context(), kvStream(bucket), name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatal(err)
		}
	}
	n.followsDeclaration(t, n.put(t, names.Declarations(), "n1", decl("n1")))
	if now := n.consumers(t); len(now) != 0 {
		t.Errorf("consumers while the renewed link follows its keys: %v, want none", now)
	}
	if err := n.link.PublishHeartbeat(t.Context(), wire.Heartbeat{State: wire.StateRunning}); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if got := n.lastHeartbeatHeader(t); got != "" {
		t.Errorf("a renewed node's heartbeat still asks for credentials: %q", got)
	}
}

// A JWT on the credentials subject that is not this node's, not from its issuer, expired, still
// allowed consumers, too large or not a JWT at all is refused with a log line saying why: the
// creds file is unchanged and the link stays as it was, asking again with its next heartbeat.
func TestRenewedCredentialsAreRefusedUnlessTheyAreThisNodesFromItsIssuerUnexpiredAndWithoutConsumers(t *testing.T) {
	n := openNode(t, meshtest.LegacyNodePermissions)
	n.followsDeclaration(t, n.put(t, names.Declarations(), "n1", decl("n1")))
	before, err := os.ReadFile(n.creds)
	if err != nil {
		t.Fatal(err)
	}
	today := trust.NodePermissions(n.bus.Names, "n1")
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	// Another account's signing key, naming the nodes account as the issuer account.
	stranger, _ := nkeys.CreateAccount()
	foreign := jwt.NewUserClaims(n.user)
	foreign.IssuerAccount = n.bus.NodesAccount
	foreign.Permissions = today
	foreignJWT, err := foreign.Encode(stranger)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name, data, why string
	}{
		{"another node's key", n.bus.NodeJWT(t, otherPub, today, time.Time{}), "not this node's key"},
		{"a key the account does not name", foreignJWT, "the bus refused"},
		{"expired", n.bus.NodeJWT(t, n.user, today, time.Now().Add(-time.Hour)), "expired"},
		{"the permissions from before 0022", n.bus.NodeJWT(t, n.user, meshtest.LegacyNodePermissions(n.bus.Names, "n1"), time.Time{}), "create consumers"},
		{"larger than a JWT may be", strings.Repeat("e", wire.MaxCredentialsBytes+1), "more than the"},
		{"not a JWT", "hello\x1b[2J", "not a user JWT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.sendCredentials(t, []byte(tc.data))
			meshtest.Eventually(t, "the refusal logged", func() bool {
				return strings.Count(n.logs.String(), "refused the credentials") == i+1 ||
					strings.Contains(n.logs.String(), "credentials renewed")
			})
			if strings.Contains(n.logs.String(), "credentials renewed") {
				t.Fatalf("accepted:\n%s", n.logs.String())
			}
			lines := strings.Split(n.logs.String(), "\n")
			var line string
			for _, l := range lines {
				if strings.Contains(l, "refused the credentials") {
					line = l
				}
			}
			t.Log(line)
			if !strings.Contains(line, tc.why) {
				t.Errorf("the refusal says %s, want it to say %q", line, tc.why)
			}
			if len(line) > 600 {
				t.Errorf("the refusal's log line is %d bytes: what came from the bus is not bounded", len(line))
			}
			if strings.Contains(line, "\x1b") {
				t.Errorf("the refusal logs a control character from the bus: %q", line)
			}
			after, err := os.ReadFile(n.creds)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, before) {
				t.Error("the creds file changed")
			}
			if !n.link.LegacyCredentials() {
				t.Error("the link no longer says its credentials are legacy")
			}
		})
	}
	// Still asking.
	if err := n.link.PublishHeartbeat(t.Context(), wire.Heartbeat{State: wire.StateRunning}); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if got := n.lastHeartbeatHeader(t); got != wire.RenewCredentialsLegacy {
		t.Errorf("heartbeat header after the refusals: %q, want %q", got, wire.RenewCredentialsLegacy)
	}
}

// Only a creds file whose JWT may create consumers is legacy: not one with today's permissions,
// and not an nkey seed file, which holds no JWT.
func TestCredentialsAreLegacyOnlyWhenTheirJWTMayCreateConsumers(t *testing.T) {
	account, _ := nkeys.CreateAccount()
	dir := t.TempDir()
	creds := func(name string, perms jwt.Permissions) string {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		uc := jwt.NewUserClaims(pub)
		uc.Permissions = perms
		text, err := uc.Encode(account)
		if err != nil {
			t.Fatal(err)
		}
		b, err := jwt.FormatUserConfig(text, seed)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, "n1.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file string
		legacy     bool
	}{
		{"permissions from before 0022", creds("old.creds", meshtest.LegacyNodePermissions(names, "n1")), true},
		{"today's permissions", creds("new.creds", trust.NodePermissions(names, "n1")), false},
		{"an nkey seed file", seedFile, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Nothing listens there: the link keeps trying in the background.
			l, err := Open(context.Background(), Options{URLs: []string{"nats://127.0.0.1:1"}, Node: "n1", Names: names, Creds: tc.file,
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if got := l.LegacyCredentials(); got != tc.legacy {
				t.Errorf("LegacyCredentials() = %v, want %v", got, tc.legacy)
			}
		})
	}
}

// A host whose user's permissions are of an older version than it needs (a user signed with
// today's, then a host needing a later set) asks on its renew subject once connected, takes a
// newer one, and refuses one of the same version (a release side older than the host).
func TestALinkWhoseUserIsOlderThanItNeedsAsksForItRenewed(t *testing.T) {
	tag := func(v int) string { return wire.NodeUserTagPrefix + strconv.Itoa(v) }
	for _, tc := range []struct {
		name    string
		answer  int // the version the release side signs
		renewed bool
	}{
		{"a release side that signs a newer version", 3, true},
		{"a release side older than the host", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartOperatorBus(t)
			withdrawalsBucket(t, b.Admin.JS)
			creds, pub := b.NodeCreds(t, t.TempDir(), "n1", trust.NodePermissions(b.Names, "n1"), tag(2))
			asked := make(chan struct{}, 8)
			sub, err := b.Admin.NC.Subscribe(b.Names.RenewSubject("n1"), func(m *nats.Msg) {
				asked <- struct{}{}
				m.Respond([]byte(b.NodeJWT(t, pub, trust.NodePermissions(b.Names, "n1"), time.Time{}, tag(tc.answer))))
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := b.Admin.NC.Flush(); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(creds)
			l, logs := openLogged(t, Options{URLs: []string{b.URL()}, Creds: creds, JSAPIPrefix: wire.NodeJSAPIPrefix, UserVersion: 3})
			select {
			case <-asked:
			case <-time.After(15 * time.Second):
				t.Fatalf("the link did not ask for its user renewed:\n%s", logs.String())
			}
			want := "credentials renewed"
			if !tc.renewed {
				want = "release side is older than this host"
			}
			meshtest.Eventually(t, want, func() bool { return strings.Contains(logs.String(), want) })
			after, _ := os.ReadFile(creds)
			if changed := !bytes.Equal(before, after); changed != tc.renewed {
				t.Errorf("creds file changed: %v, want %v", changed, tc.renewed)
			}
			if l.stale.Load() == tc.renewed {
				t.Errorf("stale after the answer: %v", l.stale.Load())
			}
		})
	}
}
