package host

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// 1. A declaration put reaches the host and is reconciled; the heartbeat shows its revision.
func TestDeclarationPutIsReconciledAndHeartbeatShowsItsRevision(t *testing.T) {
	b, hbs, th := linkedHost(t)
	meshtest.WaitHeartbeat(t, hbs, "the start reconcile", func(hb wire.Heartbeat) bool {
		return hb.LastReconcile != nil && hb.LastReconcile.Trigger == "start"
	})
	rev := b.Declare("n1", decl("n1", ""))
	hb := meshtest.WaitHeartbeat(t, hbs, "the declaration reconciled", func(hb wire.Heartbeat) bool {
		return hb.DeclarationRevision == rev && hb.LastReconcile != nil && hb.LastReconcile.Trigger == "declaration"
	})
	if !hb.LastReconcile.OK || hb.State != wire.StateRunning || hb.Running != "v1.0.0" {
		t.Errorf("heartbeat after the declaration: %+v", hb)
	}
	// A heartbeat is read from the records and the store one part after another, so the one
	// above may have been built as the version confirmed: the next must say it.
	meshtest.Eventually(t, "v1.0.0 known-good", func() bool { return th.heartbeatNow().KnownGood == "v1.0.0" })
	if n := th.reconciles().Count("declaration"); n != 1 {
		t.Errorf("%d reconciles for one declaration, want 1", n)
	}
}

// A resource that fails is reported, naming it; the reconcile still completes and confirms the
// version (a failing resource is the machine's problem, not the binary's).
func TestAFailingResourceIsReportedAndTheVersionStillConfirms(t *testing.T) {
	b, hbs, th := linkedHost(t)
	// A file in a directory that does not exist: the step fails on any machine.
	path := filepath.Join(t.TempDir(), "not-there", "motd")
	rev := b.Declare("n1", decl("n1", fmt.Sprintf(`{"type": "file", "id": %q, "spec": {"content": "hi"}}`, path)))
	hb := meshtest.WaitHeartbeat(t, hbs, "the declaration reconciled", func(hb wire.Heartbeat) bool {
		return hb.DeclarationRevision == rev && hb.LastReconcile != nil && hb.LastReconcile.Trigger == "declaration"
	})
	if want := fmt.Sprintf(`resources[0] file %q: `, path); hb.LastReconcile.OK || !strings.HasPrefix(hb.LastReconcile.Error, want) {
		t.Errorf("last reconcile %+v: want it failed, starting %q", hb.LastReconcile, want)
	}
	// A heartbeat is read from the records and the store one part after another, so the one
	// above may have been built as the version confirmed: the next must say it.
	meshtest.Eventually(t, "v1.0.0 known-good: a failing resource must not stop the version confirming", func() bool {
		return th.heartbeatNow().KnownGood == "v1.0.0"
	})
}

// 2. With the server stopped the host keeps reconciling from its store on its timer; when the
// server returns it reconnects, reconciles with trigger "reconnect", and heartbeats resume.
func TestHostReconcilesWithoutTheBusAndReconnects(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	th := startHost(t, newRoot(t, "v1.0.0"), "n1", b.URL(), func(c *config.Config) {
		c.ReconcileInterval = config.Duration(100 * time.Millisecond)
	})
	rev := b.Declare("n1", decl("n1", ""))
	meshtest.WaitHeartbeat(t, hbs, "the declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == rev })

	b.Stop()
	before := th.reconciles().Count("timer")
	meshtest.Eventually(t, "five timer reconciles while the bus is down", func() bool {
		return th.reconciles().Count("timer") >= before+5
	})
	b.Start()
	hbs = b.Heartbeats("n1")
	meshtest.Eventually(t, "a reconnect reconcile", func() bool { return th.reconciles().Count("reconnect") >= 1 })
	hb := meshtest.WaitHeartbeat(t, hbs, "heartbeats again", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == rev })
	if hb.Running != "v1.0.0" {
		t.Errorf("heartbeat after reconnect: %+v", hb)
	}
}

// Restarted with no bus at all, the host reconciles the declaration it held.
func TestRestartedHostWithoutBusReconcilesWhatItHeld(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	root := newRoot(t, "v1.0.0")
	th := startHost(t, root, "n1", b.URL())
	x := filepath.Join(t.TempDir(), "x")
	rev := b.Declare("n1", decl("n1", fmt.Sprintf(`{"type": "directory", "id": %q}`, x)))
	meshtest.WaitHeartbeat(t, hbs, "the declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == rev })
	meshtest.Eventually(t, "the declared directory", func() bool { _, err := os.Stat(x); return err == nil })
	th.stop()
	b.Stop()

	before := len(th.reconciles())

	th = startHost(t, root, "n1", "")
	// Removed while the host was down, the held declaration's directory is put back by the
	// start reconcile.
	if err := os.Remove(x); err != nil {
		t.Fatal(err)
	}
	meshtest.Eventually(t, "the start reconcile of the held declaration", func() bool {
		rows := th.reconciles()
		return len(rows) > before && !rows[before].Ended.IsZero()
	})
	if r := th.reconciles()[before]; r.Trigger != "start" || !r.OK {
		t.Errorf("the start reconcile without the bus: %+v, want it to apply the held declaration", r)
	}
	if fi, err := os.Stat(x); err != nil || !fi.IsDir() {
		t.Errorf("the held declaration's directory was not put back: %v", err)
	}
}

// 3. 100 declaration puts in a burst: the last revision wins, reconciles coalesce, none overlap.
func TestDeclarationBurstCoalescesAndLastRevisionWins(t *testing.T) {
	b, hbs, th := linkedHost(t)
	meshtest.WaitHeartbeat(t, hbs, "the start reconcile", func(hb wire.Heartbeat) bool { return hb.LastReconcile != nil })
	var last uint64
	dir := t.TempDir()
	for i := 0; i < 100; i++ {
		last = b.Declare("n1", decl("n1", fmt.Sprintf(`{"type": "directory", "id": "%s/%d"}`, dir, i)))
	}
	meshtest.WaitHeartbeat(t, hbs, "the last revision", func(hb wire.Heartbeat) bool {
		return hb.DeclarationRevision == last && hb.LastReconcile != nil && hb.LastReconcile.Trigger == "declaration"
	})
	// The heartbeat shows the revision held; the store shows when its reconcile, the last, ended,
	// and the machine holds what the last declaration says: directory 99 alone (the directories
	// of the coalesced declarations applied on the way were removed as no longer declared).
	meshtest.Eventually(t, "a reconcile of the last declaration (99) to end, leaving directory 99 alone", func() bool {
		rows := th.reconciles()
		last := rows[len(rows)-1]
		ents, err := os.ReadDir(dir)
		return !last.Ended.IsZero() && last.OK && err == nil && len(ents) == 1 && ents[0].Name() == "99"
	})
	rows := th.reconciles()
	if n := rows.Count("declaration"); n >= 50 || n < 1 {
		t.Errorf("%d reconciles for 100 puts: want them coalesced (far fewer than 100)", n)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].Started.Before(rows[i-1].Ended) {
			t.Errorf("reconciles %d and %d overlap: %+v %+v", i-1, i, rows[i-1], rows[i])
		}
	}
}

// 4. Malformed JSON, an unknown field, another node's declaration, an unknown version: each is
// refused, reported in the heartbeat, and the held declaration is unchanged.
func TestBadDeclarationsAreRefusedReportedAndHeldOneStays(t *testing.T) {
	b, hbs, th := linkedHost(t)
	good := b.Declare("n1", decl("n1", ""))
	meshtest.WaitHeartbeat(t, hbs, "the good declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == good })
	for _, tc := range []struct {
		name, value, want string
	}{
		{"malformed JSON", `{"version": 1, "node": "n1", "resources": [`, "declaration"},
		{"unknown field", `{"version": 1, "node": "n1", "resources": [], "colour": "blue"}`, `colour: unknown field`},
		{"another node's", `{"version": 1, "node": "n2", "resources": []}`, "n2"},
		{"unknown version", `{"version": 7, "node": "n1", "resources": []}`, "version"},
		{"an action over the link", `{"version": 1, "node": "n1", "resources": [{"type": "action", "id": "x"}]}`, "action"},
		{"the node key in another case", `{"version": 1, "node": "other", "Node": "n1", "resources": []}`, `"Node" is not a field (did you mean "node"?)`},
		{"a key twice", `{"version": 1, "node": "other", "node": "n1", "resources": []}`, `duplicate key "node"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := b.Declare("n1", []byte(tc.value))
			hb := meshtest.WaitHeartbeat(t, hbs, "the refusal", func(hb wire.Heartbeat) bool {
				return hb.Refused != nil && hb.Refused.Revision == rev
			})
			if !strings.Contains(hb.Refused.Error, tc.want) {
				t.Errorf("refusal %q does not name %s", hb.Refused.Error, tc.want)
			}
			if hb.DeclarationRevision != good {
				t.Errorf("held revision %d after a refusal, want %d kept", hb.DeclarationRevision, good)
			}
		})
	}
	if n := th.reconciles().Count("declaration"); n != 1 {
		t.Errorf("refused declarations triggered reconciles: %d declaration reconciles, want 1", n)
	}
}

// 6. The fleet view lists every host and shows a stopped one as silent; a restarted server
// still knows every node's last heartbeat.
func TestFleetShowsStoppedHostAsSilentAndSurvivesServerRestart(t *testing.T) {
	b := meshtest.StartBus(t)
	const n = 5
	hosts := make([]*testHost, n)
	for i := range hosts {
		node := fmt.Sprintf("node-%d", i)
		hosts[i] = startHost(t, newRoot(t, "v1.0.0"), node, b.URL(), func(c *config.Config) {
			c.HeartbeatInterval = config.Duration(100 * time.Millisecond)
		})
	}
	read := func() []fleet.Row {
		entries, err := fleet.Read(context.Background(), b.Conn.JS, b.Names)
		if err != nil {
			t.Fatal(err)
		}
		return fleet.Rows(entries, time.Now(), time.Second)
	}
	meshtest.Eventually(t, "every node in the fleet view", func() bool { return len(read()) == n })
	hosts[2].stop()
	meshtest.Eventually(t, "node-2 silent and only it", func() bool {
		silent := 0
		for _, r := range read() {
			if r.Silent {
				silent++
				if r.Node != "node-2" {
					return false
				}
			}
		}
		return silent == 1
	})
	b.Stop()
	b.Start()
	if rows := read(); len(rows) != n {
		t.Errorf("after a server restart the fleet view has %d nodes, want %d", len(rows), n)
	}
}

// 8. The host's run loop runs 200 times in one process, each with its own root and node id,
// against one server: every one reconciles its declaration and heartbeats it.
func TestTwoHundredHostsRunInOneProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("200 hosts")
	}
	b := meshtest.StartBus(t)
	// Every host watches the withdrawal list: without its bucket 200 hosts keep retrying.
	withdrawalsBucket(t, b)
	const n = 200
	revs := make([]uint64, n)
	for i := 0; i < n; i++ {
		revs[i] = b.Declare(fmt.Sprintf("h%03d", i), decl(fmt.Sprintf("h%03d", i), ""))
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			startHost(t, newRoot(t, "v1.0.0"), fmt.Sprintf("h%03d", i), b.URL())
		}(i)
	}
	wg.Wait()
	meshtest.EventuallyWithin(t, "every host heartbeating its declaration", 3*time.Minute, func() bool {
		entries, err := fleet.Read(context.Background(), b.Conn.JS, b.Names)
		if err != nil {
			t.Fatal(err)
		}
		ok := 0
		for _, e := range entries {
			var i int
			fmt.Sscanf(e.Node, "h%03d", &i)
			if e.Heartbeat.DeclarationRevision == revs[i] && e.Heartbeat.LastReconcile != nil && e.Heartbeat.LastReconcile.Trigger == "declaration" {
				ok++
			}
		}
		return ok == n
	})
}

// A store.db that is not a database, or of a schema this host cannot read, is moved aside and
// the host rescues itself instead of failing as if the binary were bad: it takes its declaration
// from the bus again, adopts the file already in its declared state (its mtime untouched),
// creates the one missing, and says so in the journal and the heartbeat.
func TestHostRescuesItselfWhenItsStoreCannotBeRead(t *testing.T) {
	newer := func(t *testing.T, path string) {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`PRAGMA user_version = 99`); err != nil {
			t.Fatal(err)
		}
	}
	garbage := func(t *testing.T, path string) {
		if err := os.WriteFile(path, []byte(strings.Repeat("garbage ", 1000)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		spoil  func(*testing.T, string)
		reason string
	}{
		{"not a database", garbage, "store.db is not a readable database"},
		{"a schema this host cannot read", newer, "store.db is of a schema this host cannot read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			hbs := b.Heartbeats("n1")
			dir := t.TempDir()
			kept, made := filepath.Join(dir, "kept"), filepath.Join(dir, "made")
			if err := os.WriteFile(kept, []byte("in state\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
			if err := os.Chtimes(kept, old, old); err != nil {
				t.Fatal(err)
			}
			rev := b.Declare("n1", decl("n1", fmt.Sprintf(`{"type": "file", "id": %q, "spec": {"content": "in state\n", "mode": "0644"}},
				{"type": "file", "id": %q, "spec": {"content": "new\n"}}`, kept, made)))
			root := newRoot(t, "v1.0.0")
			tc.spoil(t, filepath.Join(root, "store.db"))
			th := startHost(t, root, "n1", b.URL())
			hb := meshtest.WaitHeartbeat(t, hbs, "the rescue ended", func(hb wire.Heartbeat) bool {
				return hb.DeclarationRevision == rev && hb.Rescue != nil && !hb.Rescue.Pending
			})
			r := hb.Rescue
			if r.Reason != tc.reason || !r.OK || r.Adopted != 1 || r.Changed != 1 || r.Failed != 0 ||
				len(r.NotAdopted) != 1 || r.NotAdopted[0] != "created file "+made {
				t.Errorf("heartbeat rescue %+v, want %q, ok, 1 adopted, 1 created (%s)", r, tc.reason, made)
			}
			if matches, _ := filepath.Glob(filepath.Join(root, "store.db.corrupt-*")); len(matches) != 1 || r.MovedTo != matches[0] {
				t.Errorf("the store was not kept aside where the heartbeat says (%q): %v", r.MovedTo, matches)
			}
			if fi, err := os.Stat(kept); err != nil || !fi.ModTime().Equal(old) {
				t.Errorf("the file in state was touched by the rescue: %v %v", fi.ModTime(), err)
			}
			if _, err := os.Stat(made); err != nil {
				t.Errorf("the missing file was not made: %v", err)
			}
			if logs := th.logs.String(); !strings.Contains(logs, "moved it aside and rescuing") || !strings.Contains(logs, "rescued: the local state was derived again") {
				t.Errorf("the journal does not say the host rescued itself:\n%s", logs)
			}
		})
	}
}

// 7c. A host whose link never failed says nothing about it; once the bus was unreachable and
// returns, the first heartbeats say why the node was silent: the last failure, when, and how
// many attempts in a row failed.
func TestHeartbeatAfterTheBusReturnsSaysWhyTheLinkFailed(t *testing.T) {
	b, hbs, th := linkedHost(t)
	hb := meshtest.WaitHeartbeat(t, hbs, "the first heartbeat", func(wire.Heartbeat) bool { return true })
	if hb.Link != nil {
		t.Errorf("a link that never failed reports %+v", hb.Link)
	}

	b.Stop()
	meshtest.Eventually(t, "a failed attempt to reach the bus", func() bool {
		f := th.heartbeatNow().Link
		return f != nil && f.Attempts >= 1
	})
	b.Start()
	hbs = b.Heartbeats("n1")
	hb = meshtest.WaitHeartbeat(t, hbs, "a heartbeat with the link failure", func(hb wire.Heartbeat) bool { return hb.Link != nil })
	if hb.Link.Attempts < 1 || hb.Link.At.IsZero() || !strings.Contains(hb.Link.LastError, "refused the connection") {
		t.Errorf("link failure in the heartbeat: %+v, want the refused attempts", hb.Link)
	}
}
