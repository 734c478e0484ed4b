package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// beforeRoots is the last commit of main before issue 29 (a root of trust): its host trusts
// host.json's keys only and reads single-signed manifests, as every deployed host does.
const beforeRoots = "e873cb7cb3af35d7ffc1bf264432f360298f7e7b"

// Issue 29, with real processes (one fleet of three, each step waiting for heartbeats): the
// root of trust rotates over the mesh, with the real `mesh-release trust` commands, and nothing
// is done on a node.
//
//   - upgrade: node-3 runs a host from before roots; it takes this tree's host as any release
//     (a manifest signed by one key, byte for byte today's).
//   - migrate: root v1 (`trust init`, two of three root keys; `trust sign` by the release key
//     every node's host.json trusts; `trust publish`) is taken by every node: trust_root 1.
//   - stolen: the release key is stolen; root v2 (`trust rotate --role releases,targets`,
//     signed by two of the three root keys) replaces it; every node says trust_root 2; the
//     attacker's target and release, signed with the old key and put on the bus, are refused on
//     every node by name (`signed by key … which root v2 removed from …`), nothing marked bad,
//     nothing read; the operator's next release, signed with the new key, is taken.
//   - offline: node-3, stopped across two rotations of the root keys themselves, walks the chain
//     when started again.
//   - expired: a root whose expiry passes leaves every host running (same pid) and reconciling
//     its declaration; it takes no new target and says `trust expired since T` in its heartbeat
//     and `mesh-launcher status`; a fresh root ends it and the target is taken.
//   - forged: a root signed by one of three root keys, and an older root put under a newer key,
//     are refused on every node, which keeps the root it holds.
//
// long: one story on one fleet, step after step, as an operator lives it.
func TestARootOfTrustRotatesOverTheMeshAndNothingIsDoneOnANode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mesh-host from the commit before issue 29")
	}
	t.Parallel()
	oldHost := buildAt(t, beforeRoots, PkgHost, "v1.0.0")
	s := newScenario(t, 10*time.Minute, FleetOptions{Nodes: 3, BaseBinaries: map[string]string{"node-3": oldHost}})
	dir := t.TempDir()
	nats := []string{"--nats", s.f.Bus.URL()}
	stolen := s.loadKeyFile(s.f.Release.KeyPath())

	t.Log("upgrade: node-3, on a host from before roots, takes this tree's host")
	s.everyNode("no root (host.json's keys only)", onRoot(0))
	if err := s.f.Ship(s.ctx, "v1.1.0", PkgHost); err != nil {
		t.Fatal(err)
	}
	if err := s.f.Release.Target(s.ctx, "v1.1.0"); err != nil {
		t.Fatal(err)
	}
	s.allOn(s.f.Names(), "v1.1.0")
	s.everyNode("still no root", onRoot(0))

	t.Log("migrate: root v1, by two of three root keys and by the release key the nodes trust")
	ceremony := filepath.Join(dir, "ceremony")
	s.trust("init", "--root-keys", "3", "--threshold", "2", "--releases-key", stolen.PubPath, "--out", ceremony)
	// In life each root key now goes to its own person; here they stay in one directory.
	rootKey := func(n int) keyFile { return s.loadKeyFile(filepath.Join(ceremony, fmt.Sprintf("root-%d.key", n))) }
	rootFile := func(v int) string { return filepath.Join(ceremony, fmt.Sprintf("root.%d.json", v)) }
	s.trust("sign", rootFile(1), "--key", stolen.Path) // the key every node's host.json trusts: the migration
	publish := func(v int) {
		t.Helper()
		if out := s.trust(append([]string{"publish", rootFile(v)}, nats...)...); !strings.Contains(out, fmt.Sprintf("published root v%d", v)) {
			t.Fatalf("trust publish did not say it published root v%d:\n%s", v, out)
		}
	}
	publish(1)
	s.everyNode("root v1", onRoot(1))

	t.Log("stolen: root v2 replaces the release key, signed by two of three root keys")
	operator := *s.f.Release
	operator.KeyDir, operator.Out = filepath.Join(dir, "new-release-key"), filepath.Join(dir, "operator")
	if _, err := operator.Keygen(s.ctx); err != nil {
		t.Fatal(err)
	}
	fresh := s.loadKeyFile(operator.KeyPath())
	s.trust("rotate", "--from", rootFile(1), "--role", "releases,targets", "--add", fresh.PubPath, "--remove", stolen.ID)
	s.trust("sign", rootFile(2), "--key", rootKey(1).Path)
	s.trust("sign", rootFile(2), "--key", rootKey(3).Path)
	if out := s.trust("show", rootFile(2)); !strings.Contains(out, "root v2") {
		t.Errorf("trust show does not name root v2:\n%s", out)
	}
	publish(2)
	s.everyNode("root v2", onRoot(2))

	// The attacker holds the old key and the bus: a release and a target signed with it.
	removedFrom := func(role wire.Role) string {
		return fmt.Sprintf("signed by key %s which root v2 removed from %s", wire.ShortKeyID(stolen.ID), role)
	}
	from := s.f.Beats.Len()
	if err := s.f.Ship(s.ctx, "v6.6.6", PkgHost); err != nil {
		t.Fatal(err)
	}
	if err := s.f.Release.Target(s.ctx, "v6.6.6"); err != nil {
		t.Fatal(err)
	}
	s.eachHeard(s.f.Names(), from, "the attacker's target refused by name", says("v6.6.6", removedFrom(wire.RoleTargets)))
	// The attacker's release under a version the operator then targets, with the new key.
	if err := operator.Target(s.ctx, "v6.6.6"); err != nil {
		t.Fatal(err)
	}
	s.eachHeard(s.f.Names(), from, "the attacker's release refused by name", says(removedFrom(wire.RoleReleases)))
	for _, n := range s.f.Nodes {
		rep, _, err := n.Status(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := Version(rep, "v6.6.6"); ok && v.Bad {
			t.Errorf("%s marked the attacker's release bad (%s); a refused signature never does", n.Name, v.BadReason)
		}
		if n.Has("v6.6.6") || Running(rep) != "v1.1.0" {
			t.Errorf("%s runs %s, v6.6.6 on its disk: %v; want v1.1.0 and nothing of the attacker's", n.Name, Running(rep), n.Has("v6.6.6"))
		}
	}
	if reads, err := s.f.Reads.Count(s.ctx, "v6.6.6"); err != nil || reads != 0 {
		t.Errorf("the attacker's archive was read %d times (%v); want never", reads, err)
	}
	if err := operator.Ship(s.ctx, "v1.2.0", build(t, PkgHost, "v1.2.0")); err != nil {
		t.Fatal(err)
	}
	if err := operator.Target(s.ctx, "v1.2.0"); err != nil {
		t.Fatal(err)
	}
	s.allOn(s.f.Names(), "v1.2.0")

	t.Log("offline: node-3 stopped across two rotations of the root keys")
	n3 := s.f.Node("node-3")
	if _, err := n3.Stop(s.ctx); err != nil {
		t.Fatal(err)
	}
	online := []string{"node-1", "node-2"}
	root4 := s.newKeyFile(filepath.Join(dir, "holder-4"), "root-4")
	s.trust("rotate", "--from", rootFile(2), "--role", "root", "--add", root4.PubPath, "--remove", rootKey(3).ID)
	s.trust("sign", rootFile(3), "--key", rootKey(1).Path)
	s.trust("sign", rootFile(3), "--key", rootKey(2).Path)
	publish(3)
	if err := s.f.Beats.WaitAll(s.ctx, online, "root v3", onRoot(3)); err != nil {
		t.Fatal(err)
	}
	root5 := s.newKeyFile(filepath.Join(dir, "holder-5"), "root-5")
	s.trust("rotate", "--from", rootFile(3), "--role", "root", "--add", root5.PubPath, "--remove", rootKey(1).ID)
	s.trust("sign", rootFile(4), "--key", rootKey(2).Path)
	s.trust("sign", rootFile(4), "--key", root4.Path)
	publish(4)
	if err := s.f.Beats.WaitAll(s.ctx, online, "root v4", onRoot(4)); err != nil {
		t.Fatal(err)
	}
	// The fleet table says who is behind, from node-3's last heartbeat before it stopped.
	if table, err := s.f.FleetTable(s.ctx); err != nil || !strings.Contains(table, "1 behind (v2)") {
		t.Errorf("mesh-release fleet (%v) does not say node-3 is behind on root v2:\n%s", err, table)
	}
	s.startAgain(n3, "root v4, the chain walked", onRoot(4))

	t.Log("expired: every host keeps running and reconciling, and takes no new target")
	pids := map[string]int{}
	for _, n := range s.f.Nodes {
		rep, _, err := n.Status(s.ctx)
		if err != nil || rep.Running == nil {
			t.Fatalf("%s: %v, running %+v", n.Name, err, rep.Running)
		}
		pids[n.Name] = rep.Running.PID
	}
	// Root v5 lasts 10 seconds: a node that takes it after that holds an expired root all the
	// same, and says since when.
	s.trust("rotate", "--from", rootFile(4), "--expires", "10s")
	s.trust("sign", rootFile(5), "--key", rootKey(2).Path)
	s.trust("sign", rootFile(5), "--key", root4.Path)
	publish(5)
	b, err := os.ReadFile(rootFile(5))
	if err != nil {
		t.Fatal(err)
	}
	short, err := wire.ParseRoot(b)
	if err != nil {
		t.Fatal(err)
	}
	expiredAt := short.ExpiresAt()
	s.everyNode("root v5, expired", func(b Beat) bool {
		return onRoot(5)(b) && b.TrustExpiredSince != nil && b.TrustExpiredSince.Equal(expiredAt)
	})
	rev := s.declareMotd("node-1", filepath.Join(dir, "srv"), "applied while trust is expired\n")
	if _, err := s.f.Beats.Wait(s.ctx, "node-1 applied the new declaration", func(b Beat) bool {
		return b.Node == "node-1" && b.DeclarationRevision == rev && b.LastReconcile != nil && b.LastReconcile.OK
	}); err != nil {
		t.Fatal(err)
	}
	if err := operator.Ship(s.ctx, "v1.3.0", build(t, PkgHost, "v1.3.0")); err != nil {
		t.Fatal(err)
	}
	from = s.f.Beats.Len()
	if err := operator.Target(s.ctx, "v1.3.0"); err != nil {
		t.Fatal(err)
	}
	heard := s.eachHeard(s.f.Names(), from, "the v1.3.0 target heard and not taken", func(b Beat) bool {
		return b.Target == "v1.3.0" || says("v1.3.0")(b)
	})
	for i, n := range s.f.Nodes {
		s.beatsLater(n.Name, s.f.Beats.Len(), 3)
		last, _ := s.f.Beats.Last(n.Name)
		if !RunningConfirmed("v1.2.0")(last) || last.TrustExpiredSince == nil || s.touchedBy(n.Name, "v1.3.0") {
			t.Errorf("%s with expired trust: %s (when it heard the target: %s); want v1.2.0 running, trust expired and v1.3.0 untouched",
				n.Name, Describe(last.Heartbeat), Describe(heard[i].Heartbeat))
		}
		rep, _, err := n.Status(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Running == nil || rep.Running.PID != pids[n.Name] {
			t.Errorf("%s's host is %+v, was pid %d: expired trust must not restart it", n.Name, rep.Running, pids[n.Name])
		}
		if text := n.StatusText(s.ctx); !strings.Contains(text, wire.TrustExpiredLine(expiredAt)) {
			t.Errorf("mesh-launcher status of %s does not say %q:\n%s", n.Name, wire.TrustExpiredLine(expiredAt), text)
		}
	}
	if table, err := s.f.FleetTable(s.ctx); err != nil || !strings.Contains(table, wire.TrustExpiredLine(expiredAt)) {
		t.Errorf("mesh-release fleet (%v) does not say %q:\n%s", err, wire.TrustExpiredLine(expiredAt), table)
	}
	if reads, err := s.f.Reads.Count(s.ctx, "v1.3.0"); err != nil || reads != 0 {
		t.Errorf("v1.3.0 was read %d times (%v) while trust was expired; want never", reads, err)
	}
	s.trust("rotate", "--from", rootFile(5))
	s.trust("sign", rootFile(6), "--key", rootKey(2).Path)
	s.trust("sign", rootFile(6), "--key", root4.Path)
	publish(6)
	s.everyNode("root v6, fresh", func(b Beat) bool { return onRoot(6)(b) && b.TrustExpiredSince == nil })
	s.allOn(s.f.Names(), "v1.3.0")

	t.Log("forged: a root signed by one of three, and an older root under a newer key, refused")
	forged := nextRoot(s.busRoot(6), time.Now().Add(365*24*time.Hour))
	s.signRoot(&forged, root5)
	from = s.f.Beats.Len()
	s.putRoot(forged, 7)
	s.eachHeard(s.f.Names(), from, "root v7 signed by one of three refused", says("root v7 refused", "2 of root v6's root keys must sign it; 1 did"))
	from = s.f.Beats.Len()
	s.putRoot(s.busRoot(2), 7)
	s.eachHeard(s.f.Names(), from, "root v2 under root.7 refused", says("root v2", "back"))
	s.everyNode("root v6 still", onRoot(6))
}

// declareMotd declares, with `mesh-release declare`, that node holds dir/<node>/motd with
// content, and returns the declaration's revision.
func (s *scenario) declareMotd(node, dir, content string) uint64 {
	s.t.Helper()
	d := filepath.Join(dir, node)
	// The declared directory's parent must exist: the host makes what is declared, no more.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	doc := wire.Declaration{Version: wire.DeclarationVersion, Node: node, Resources: []wire.Resource{
		{Type: wire.KindDirectory, ID: d, Spec: json.RawMessage(`{"mode": "0755"}`)},
		{Type: wire.KindFile, ID: filepath.Join(d, "motd"), Spec: json.RawMessage(fmt.Sprintf(`{"content": %q, "mode": "0644"}`, content))},
	}}
	file := filepath.Join(s.t.TempDir(), "decl.json")
	if err := os.WriteFile(file, doc.Marshal(), 0o600); err != nil {
		s.t.Fatal(err)
	}
	out, err := s.f.Release.Run(s.ctx, "declare", node, file, "--nats", s.f.Bus.URL())
	if err != nil {
		s.t.Fatal(err)
	}
	var rev uint64
	if i := strings.Index(out, "revision "); i < 0 {
		s.t.Fatalf("declare says %q, no revision", out)
	} else if _, err := fmt.Sscanf(out[i:], "revision %d", &rev); err != nil {
		s.t.Fatalf("declare says %q: %v", out, err)
	}
	return rev
}
