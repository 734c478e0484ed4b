package lab

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// TestRescueDerivesTheNodeAgainFromTheMesh is issue 31 with real processes: `mesh-release
// serve`, a node enrolled with a token and run by mesh-launcher, and `mesh-host rescue` run on its
// root while the unit is stopped. Four losses, one after the other on one node: its store.db
// deleted; its store restored from an old copy (with a version's binary corrupted meanwhile); its
// root wiped but for versions/ and its identity; its credentials revoked. Each rescue ends with
// the node holding its declaration, everything that was already right adopted as it was (the
// same inode, the same mtime), only what was missing made, nothing removed, and the rescue in its
// heartbeat.
func TestRescueDerivesTheNodeAgainFromTheMesh(t *testing.T) {
	t.Parallel()
	release := build(t, PkgRelease, "v0.10.0-lab")
	host := build(t, PkgHost, "v1.0.0")
	older := build(t, PkgHost, "v0.9.0")
	launcher := build(t, PkgLauncher, "v0.0.0-lab")
	ctx := meshtest.Context(t, 8*time.Minute)

	data := t.TempDir()
	port := freePorts(t, 1)[0]
	url := fmt.Sprintf("tls://127.0.0.1:%d", port)
	startReleased(t, release, data, port)
	admin := []string{"--nats", url, "--creds", filepath.Join(data, trust.Dir, trust.AdminCredsFile), "--ca", filepath.Join(data, trust.TLSDir, "ca.pem")}
	hbs := heartbeatsOn(t, ctx, url, data, "r1")

	n := &Node{Name: "r1", Root: t.TempDir(), Launcher: launcher,
		Env: []string{"MESH_HOST_HEARTBEAT_INTERVAL=500ms", "MESH_HOST_RECONCILE_INTERVAL=2s"}}
	runOK(t, host, "enrol", "--root", n.Root, enrolToken(t, release, data, url, "r1"))
	// v0.9.0 runs first, so the records hold its digest; then v1.0.0 is placed and runs.
	if err := n.PlaceVersion("v0.9.0", older); err != nil {
		t.Fatal(err)
	}
	startNode := func(what string, ok func(wire.Heartbeat) bool) wire.Heartbeat {
		t.Helper()
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		return waitBeatOf(t, ctx, hbs, n, what, ok)
	}
	stopNode := func() {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := n.Stop(c); err != nil {
			t.Fatalf("stopping r1: %v\n%s", err, n.Log())
		}
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		n.Stop(c)
		if t.Failed() {
			t.Logf("r1:\n%s", n.Log())
		}
	})
	startNode("v0.9.0 confirmed", func(hb wire.Heartbeat) bool { return hb.KnownGood == "v0.9.0" })
	stopNode()
	if err := n.PlaceVersion("v1.0.0", host); err != nil {
		t.Fatal(err)
	}
	startNode("v1.0.0 confirmed", func(hb wire.Heartbeat) bool { return hb.KnownGood == "v1.0.0" })

	// The declaration: a directory, two files in it, an archive extracted beside them.
	srv := t.TempDir()
	etc, www := filepath.Join(srv, "etc"), filepath.Join(srv, "www")
	tree := filepath.Join(t.TempDir(), "site.tar.zst")
	writeTreeArchive(t, tree, map[string]string{"index.html": "<p>hello</p>\n", "css/site.css": "p{}\n"})
	out := runOK(t, release, append([]string{"blob", "put", tree}, admin...)...)
	source := regexpDigest(t, out)
	resources := []wire.Resource{
		resource(wire.KindDirectory, etc, `{"mode": "0755"}`),
		resource(wire.KindFile, filepath.Join(etc, "a.conf"), `{"content": "a = 1\n", "mode": "0644"}`),
		resource(wire.KindFile, filepath.Join(etc, "b.conf"), `{"content": "b = 2\n", "mode": "0600"}`),
		resource(wire.KindArchive, www, fmt.Sprintf(`{"source": %q}`, source)),
	}
	declare := func(rs []wire.Resource) uint64 {
		t.Helper()
		file := filepath.Join(t.TempDir(), "r1.json")
		if err := os.WriteFile(file, wire.Declaration{Version: 1, Node: "r1", Resources: rs}.Marshal(), 0o600); err != nil {
			t.Fatal(err)
		}
		since := time.Now()
		runOK(t, release, append([]string{"declare", "r1", file}, admin...)...)
		hb := waitBeatOf(t, ctx, hbs, n, "the declaration reconciled", func(hb wire.Heartbeat) bool {
			return hb.LastReconcile != nil && hb.LastReconcile.Trigger == wire.TriggerDeclaration && hb.LastReconcile.At.After(since)
		})
		if !hb.LastReconcile.OK {
			t.Fatalf("the declaration failed: %s", hb.LastReconcile.Error)
		}
		return hb.DeclarationRevision
	}
	declare(resources)
	onDisk := takeStock(t, srv)

	// rescue runs `mesh-host rescue` on the stopped node's root and starts it again; it returns
	// what --json printed and the heartbeat that reports the rescue ended.
	rescue := func(args ...string) (rescueOut, wire.Heartbeat) {
		t.Helper()
		code, stdout, stderr := runCmd(t, host, append([]string{"rescue", "--root", n.Root, "--json"}, args...)...)
		var r rescueOut
		if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != 0 {
			t.Fatalf("mesh-host rescue %s: exit %d (%v)\n%s%s", strings.Join(args, " "), code, err, stdout, stderr)
		}
		hb := startNode("the rescue reported ended", func(hb wire.Heartbeat) bool {
			return hb.Rescue != nil && hb.Rescue.MovedTo == r.MovedTo && !hb.Rescue.Pending && hb.LastReconcile != nil
		})
		if !hb.Rescue.OK || hb.Rescue.Reason != "mesh-host rescue" || hb.Rescue.Adopted != r.Adopted || hb.Rescue.Changed != r.Changed || hb.Rescue.MovedTo != r.MovedTo {
			t.Errorf("heartbeat rescue %+v, the command said adopted %d, changed %d, moved to %s", *hb.Rescue, r.Adopted, r.Changed, r.MovedTo)
		}
		return r, hb
	}
	owned := func(wantCreated map[string]bool) {
		t.Helper()
		var obs []struct {
			Type, ID, State string
			Created         bool
		}
		if err := json.Unmarshal([]byte(runOK(t, host, "owned", "--json", "--root", n.Root)), &obs); err != nil {
			t.Fatal(err)
		}
		if len(obs) != len(resources) {
			t.Errorf("the host owns %d resources after the rescue, want the %d declared: %+v", len(obs), len(resources), obs)
		}
		for _, o := range obs {
			if o.State != "in state" || o.Created != wantCreated[o.ID] {
				t.Errorf("owned %s %s: %s, created %v; want in state, created %v", o.Type, o.ID, o.State, o.Created, wantCreated[o.ID])
			}
		}
	}

	t.Run("store.db deleted", func(t *testing.T) {
		stopNode()
		for _, f := range []string{"store.db", "store.db-wal", "store.db-shm"} {
			os.Remove(filepath.Join(n.Root, f))
		}
		// The dry run says it all and changes nothing.
		code, stdout, stderr := runCmd(t, host, "rescue", "--root", n.Root, "--json", "--dry-run")
		var dry rescueOut
		if err := json.Unmarshal([]byte(stdout), &dry); err != nil || code != 0 || !dry.DryRun || dry.Adopted != len(resources) || dry.Changed != 0 {
			t.Fatalf("rescue --dry-run: exit %d (%v), adopted %d, changed %d; want exit 0, all %d adopted\n%s%s",
				code, err, dry.Adopted, dry.Changed, len(resources), stdout, stderr)
		}
		if _, err := os.Stat(filepath.Join(n.Root, "store.db")); err == nil {
			t.Error("the dry run made a store.db")
		}
		if _, err := os.Stat(filepath.Join(n.Root, "rescued")); err == nil {
			t.Error("the dry run set something aside")
		}
		r, _ := rescue()
		if r.Adopted != len(resources) || r.Changed != 0 || r.Failed != 0 {
			t.Errorf("rescue adopted %d, changed %d, failed %d; want all %d adopted", r.Adopted, r.Changed, r.Failed, len(resources))
		}
		if !slicesHas(r.MovedAside, "applied") || !slicesHas(r.MovedAside, "blobs") || slicesHas(r.MovedAside, "store.db") {
			t.Errorf("moved aside %v, want the applied records and the blob cache (store.db was gone)", r.MovedAside)
		}
		onDisk.unchanged(t, nil)
		owned(nil)
	})

	t.Run("store restored from an old copy", func(t *testing.T) {
		stopNode()
		old := t.TempDir()
		copyStore(t, n.Root, old)
		startNode("running again", func(hb wire.Heartbeat) bool { return hb.State == wire.StateRunning })
		// Applied after the copy was taken: the old store does not know it.
		since := filepath.Join(etc, "c.conf")
		resources = append(resources, resource(wire.KindFile, since, `{"content": "c = 3\n"}`))
		declare(resources)
		onDisk = takeStock(t, srv)
		stopNode()
		copyStore(t, old, n.Root)
		// And a version's binary no longer matches its digest.
		bin := filepath.Join(n.Root, "versions", "v0.9.0", "mesh-host")
		f, err := os.OpenFile(bin, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("corrupted"))
		f.Close()

		r, hb := rescue()
		if r.Adopted != len(resources) || r.Changed != 0 {
			t.Errorf("rescue adopted %d, changed %d (%v); want all %d adopted, %s kept as it is", r.Adopted, r.Changed, r.NotAdopted, len(resources), since)
		}
		if _, err := os.Stat(filepath.Join(r.MovedTo, "store.db")); err != nil {
			t.Errorf("the stale store is not kept aside: %v", err)
		}
		var aside []string
		for _, v := range r.Versions {
			if v.SetAside != "" {
				aside = append(aside, v.Version)
				if !strings.Contains(v.Problem, "no longer matches") {
					t.Errorf("version %s set aside for %q", v.Version, v.Problem)
				}
			}
		}
		if len(aside) != 1 || aside[0] != "v0.9.0" || len(hb.Rescue.SetAside) != 1 || hb.Rescue.SetAside[0] != "v0.9.0" {
			t.Errorf("versions set aside %v, heartbeat %v; want v0.9.0 named in both", aside, hb.Rescue.SetAside)
		}
		if _, err := os.Stat(filepath.Join(n.Root, "versions", "v0.9.0")); err == nil {
			t.Error("v0.9.0, corrupted, is still under versions/")
		}
		onDisk.unchanged(t, nil)
		owned(nil)
	})

	t.Run("root wiped but for versions and identity", func(t *testing.T) {
		stopNode()
		keep := map[string]bool{"versions": true, "host.json": true, "node.creds": true, "ca.pem": true, "trust": true}
		entries, err := os.ReadDir(n.Root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !keep[e.Name()] {
				if err := os.RemoveAll(filepath.Join(n.Root, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
		gone := filepath.Join(etc, "b.conf")
		if err := os.Remove(gone); err != nil {
			t.Fatal(err)
		}
		// The dry run says the file would be made: exit 3, like plan.
		code, stdout, stderr := runCmd(t, host, "rescue", "--root", n.Root, "--dry-run")
		if code != 3 || !strings.Contains(stdout, "no local state to set aside") || !strings.Contains(stdout, "created or changed to match: 1") ||
			!strings.Contains(stdout, gone) {
			t.Errorf("rescue --dry-run with %s missing: exit %d, want 3 naming it\n%s%s", gone, code, stdout, stderr)
		}
		r, _ := rescue()
		if r.Adopted != len(resources)-1 || r.Changed != 1 || len(r.NotAdopted) != 1 || r.NotAdopted[0] != "created file "+gone {
			t.Errorf("rescue adopted %d, changed %d (%v); want %d adopted and %s created", r.Adopted, r.Changed, r.NotAdopted, len(resources)-1, gone)
		}
		if !strings.Contains(r.Records, "versions not checked") {
			t.Errorf("with records.db gone the rescue should say the versions were not checked: %q", r.Records)
		}
		onDisk.unchanged(t, map[string]bool{gone: true})
		owned(map[string]bool{gone: true})
		onDisk = takeStock(t, srv)
	})

	t.Run("new token after revocation", func(t *testing.T) {
		stopNode()
		runOK(t, release, "node", "revoke", "r1", "--data", data, "--nats", url)
		waitFor(t, ctx, "the server to refuse r1's revoked credentials", func() bool {
			err := connectAs(ctx, url, filepath.Join(n.Root, "node.creds"), filepath.Join(n.Root, "ca.pem"))
			return err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")
		})
		code, _, stderr := runCmd(t, host, "rescue", "--root", n.Root, "--wait", "5s")
		if code != 1 || !strings.Contains(stderr, "--token") {
			t.Errorf("rescue with revoked credentials: exit %d, want 1 saying to rescue with --token\n%s", code, stderr)
		}
		r, _ := rescue("--token", enrolToken(t, release, data, url, "r1"))
		if r.Adopted != len(resources) || r.Changed != 0 {
			t.Errorf("rescue adopted %d, changed %d (%v); want all %d adopted", r.Adopted, r.Changed, r.NotAdopted, len(resources))
		}
		onDisk.unchanged(t, nil)
		owned(nil)
	})
}

// rescueOut is what `mesh-host rescue --json` prints, as far as these tests read it.
type rescueOut struct {
	DryRun     bool     `json:"dry_run"`
	MovedTo    string   `json:"moved_to"`
	MovedAside []string `json:"moved_aside"`
	Records    string   `json:"records"`
	Adopted    int      `json:"adopted"`
	Changed    int      `json:"changed"`
	Failed     int      `json:"failed"`
	NotAdopted []string `json:"not_adopted"`
	Versions   []struct {
		Version  string `json:"version"`
		Problem  string `json:"problem"`
		SetAside string `json:"set_aside"`
	} `json:"versions"`
}

func resource(kind, id, spec string) wire.Resource {
	return wire.Resource{Type: kind, ID: id, Spec: json.RawMessage(spec)}
}

func slicesHas(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// stock is every path under a tree with its inode and mtime: what a rescue must leave as it was.
type stock map[string][2]int64

func takeStock(t *testing.T, dir string) stock {
	t.Helper()
	s := stock{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		s[p] = [2]int64{int64(fi.Sys().(*syscall.Stat_t).Ino), fi.ModTime().UnixNano()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unchanged fails for each path whose inode or mtime changed or that is gone, but those made
// again on purpose; a directory holding one of those changed its mtime, rightly.
func (s stock) unchanged(t *testing.T, made map[string]bool) {
	t.Helper()
	now := takeStock(t, filepath.Dir(firstKey(s)))
	for p, was := range s {
		if made[p] {
			continue
		}
		parentOfMade := false
		for m := range made {
			parentOfMade = parentOfMade || filepath.Dir(m) == p
		}
		got, ok := now[p]
		switch {
		case !ok:
			t.Errorf("%s is gone after the rescue", p)
		case got[0] != was[0]:
			t.Errorf("%s was made again by the rescue (inode %d, was %d)", p, got[0], was[0])
		case got[1] != was[1] && !parentOfMade:
			t.Errorf("%s was touched by the rescue (mtime %d, was %d)", p, got[1], was[1])
		}
	}
}

func firstKey(s stock) string {
	short := ""
	for p := range s {
		if short == "" || len(p) < len(short) {
			short = p
		}
	}
	return short
}

// copyStore copies store.db and its -wal and -shm from one root to another (the host stopped).
func copyStore(t *testing.T, from, to string) {
	t.Helper()
	for _, f := range []string{"store.db", "store.db-wal", "store.db-shm"} {
		os.Remove(filepath.Join(to, f))
		b, err := os.ReadFile(filepath.Join(from, f))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// writeTreeArchive writes a tar+zstd tree archive of files (name → content) at path.
func writeTreeArchive(t *testing.T, path string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	dirs := map[string]bool{}
	for name, content := range files {
		if d := filepath.Dir(name); d != "." && !dirs[d] {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(content))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// regexpDigest is the sha256 digest `mesh-release blob put` printed.
func regexpDigest(t *testing.T, out string) string {
	t.Helper()
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "sha256:") && len(f) == len("sha256:")+64 {
			return f
		}
	}
	t.Fatalf("blob put printed no digest:\n%s", out)
	return ""
}

// heartbeatsOn delivers node's heartbeats on the bus `mesh-release serve` runs, read as its
// admin.
func heartbeatsOn(t *testing.T, ctx context.Context, url, data, node string) <-chan wire.Heartbeat {
	t.Helper()
	admin, err := bus.Connect(ctx, url, filepath.Join(data, trust.Dir, trust.AdminCredsFile), bus.WithCA(filepath.Join(data, trust.TLSDir, "ca.pem")),
		bus.Lasting(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	ch := make(chan wire.Heartbeat, 1024)
	if _, err := admin.NC.Subscribe(wire.NamesFor("").Heartbeat(node), func(m *nats.Msg) {
		if hb, err := wire.ParseHeartbeat(m.Data); err == nil {
			select {
			case ch <- hb:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return ch
}

// waitBeatOf waits for a heartbeat of n that satisfies ok, failing with n's log.
func waitBeatOf(t *testing.T, ctx context.Context, hbs <-chan wire.Heartbeat, n *Node, what string, ok func(wire.Heartbeat) bool) wire.Heartbeat {
	t.Helper()
	for {
		select {
		case hb := <-hbs:
			if ok(hb) {
				return hb
			}
		case <-ctx.Done():
			t.Fatalf("r1: %s: not within the test's time\n%s", what, n.Log())
		}
	}
}

// beforeRescue is the last commit of main before issue 31 (rescue): its store has no rescues
// table, and its heartbeat no rescue.
const beforeRescue = "b721c57b8af1aa81a9aa28a60c47693e1ddd3da5"

// Issue 31, section 2, and the upgrade path both ways: a node on a host from before rescue
// receives this tree's host over the bus; a store.db that is then no database makes that host
// rescue itself on start — the file adopted as it is, the rescue in the heartbeat — instead of
// failing; and stepping down to the host from before rescue, over the store the rescue made,
// still reconciles.
func TestHostRescuesItselfOverAnUnreadableStoreAndAnOlderHostReadsTheStoreAfter(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 5*time.Minute)
	old := buildAt(t, beforeRescue, PkgHost, "v1.0.0")
	b := meshtest.StartBus(t)
	rel := newRelease(t, b)
	pub, err := rel.Keygen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hbs := b.Heartbeats("lab")
	n := newNode(t, "MESH_HOST_NATS_URL="+b.URL(), "MESH_HOST_TRUSTED_KEYS="+pub, "MESH_HOST_HEARTBEAT_INTERVAL=500ms")
	if err := n.PlaceVersion("v1.0.0", old); err != nil {
		t.Fatal(err)
	}
	start(t, n)
	motd := filepath.Join(t.TempDir(), "motd")
	rev := b.Declare("lab", []byte(fmt.Sprintf(`{"version": 1, "node": "lab", "resources": [{"type": "file", "id": %q, "spec": {"content": "hi\n"}}]}`, motd)))
	meshtest.WaitHeartbeat(t, hbs, "the old host applied the declaration", func(hb wire.Heartbeat) bool {
		return hb.KnownGood == "v1.0.0" && hb.DeclarationRevision == rev && hb.LastReconcile != nil && hb.LastReconcile.OK
	})
	if err := rel.Ship(ctx, "v1.1.0", build(t, PkgHost, "v1.1.0")); err != nil {
		t.Fatal(err)
	}
	if err := rel.Target(ctx, "v1.1.0", "lab"); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitHeartbeat(t, hbs, "v1.1.0 delivered to the old host and confirmed", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.1.0" && hb.KnownGood == "v1.1.0"
	})
	stop := func() {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := n.Stop(c); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	stat, err := os.Stat(motd)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"store.db-wal", "store.db-shm"} {
		os.Remove(filepath.Join(n.Root, f))
	}
	if err := os.WriteFile(filepath.Join(n.Root, "store.db"), bytes.Repeat([]byte("not a database "), 100), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, n)
	hb := meshtest.WaitHeartbeat(t, hbs, "v1.1.0 rescued itself", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.1.0" && hb.Rescue != nil && !hb.Rescue.Pending
	})
	if r := hb.Rescue; !r.OK || r.Adopted != 1 || r.Changed != 0 || r.Reason != "store.db is not a readable database" {
		t.Errorf("rescue %+v, want the file adopted, nothing changed", *r)
	}
	if now, err := os.Stat(motd); err != nil || !now.ModTime().Equal(stat.ModTime()) || now.Sys().(*syscall.Stat_t).Ino != stat.Sys().(*syscall.Stat_t).Ino {
		t.Errorf("the rescue touched %s (%v)", motd, err)
	}
	if !strings.Contains(n.Log(), "moved it aside and rescuing") {
		t.Errorf("the journal does not say the host rescued itself:\n%s", n.Log())
	}

	// Step down: v1.1.0 gone from disk, the launcher runs the host from before rescue over the
	// store the rescue made.
	stop()
	if err := os.RemoveAll(filepath.Join(n.Root, "versions", "v1.1.0")); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	start(t, n)
	meshtest.WaitHeartbeat(t, hbs, "the host from before rescue reconciled over the rescued store", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.0.0" && hb.Rescue == nil && hb.LastReconcile != nil && hb.LastReconcile.OK && hb.LastReconcile.At.After(since)
	})
}
