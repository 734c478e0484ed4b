package systemd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/lab"
	"github.com/novox/mesh-host/wire"
)

// The service and package appliers against a real systemd and a real dpkg, in one node (one boot
// for all of them: the suite's time is CI's). TestAppliersInNode drives them one resource at a
// time with applyone, apart from the host's engine; TestAppliersThroughTheHost (below) through
// the packaged host: `mesh-host apply`, `mesh-host owned` and a declaration over the bus.

// pkgApplyOne is the driver the node runs.
const pkgApplyOne = "./lab/systemd/applyone"

// sleeper is a unit file the tests declare: a service that runs until stopped.
func sleeper(arg string) string {
	return "[Unit]\nDescription=mesh lab sleeper\n\n[Service]\nExecStart=/bin/sleep " + arg + "\n\n[Install]\nWantedBy=multi-user.target\n"
}

// specJSON is v as JSON, for a spec on a command line or in a declaration.
func specJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// unitShow is `systemctl show` of unit in n, the properties named, as a map.
func unitShow(t *testing.T, ctx context.Context, n *Node, unit string, props ...string) map[string]string {
	t.Helper()
	out, err := n.Systemctl(ctx, "show", "-p", strings.Join(props, ","), unit)
	if err != nil {
		t.Fatal(err)
	}
	p := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			p[k] = v
		}
	}
	return p
}

// waitUnit polls unit's properties until ok accepts them, for up to a minute.
func waitUnit(t *testing.T, ctx context.Context, n *Node, unit, what string, ok func(map[string]string) bool, props ...string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p := unitShow(t, ctx, n, unit, props...)
		if ok(p) {
			return p
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("node %s: waiting for %s %s; last %v", n.Name, unit, what, p)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tinyDeb builds, on this machine and in dir (building a .deb installs nothing), a package name
// at version holding one file, /usr/share/<name>/hello.txt, whose content names the version. It
// returns the .deb's path and digest.
func tinyDeb(t *testing.T, ctx context.Context, dir, name, version string) (string, string) {
	t.Helper()
	tree := filepath.Join(dir, name+"-"+version)
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: mesh lab <lab@mesh.invalid>\nDescription: a package the lab installs\n", name, version)
	files := map[string]string{
		"DEBIAN/control":                   control,
		"usr/share/" + name + "/hello.txt": "hello from " + version + "\n",
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, fmt.Sprintf("%s_%s_all.deb", name, version))
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "--root-owner-group", "--build", tree, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return deb, "sha256:" + hex.EncodeToString(sum[:])
}

// putBlob copies file into n under dir (a path in the node) as dir/sha256/<hex>, where a blob
// cache keeps it.
func putBlob(t *testing.T, n *Node, dir, file, digest string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(n.Root(), dir, "sha256", strings.TrimPrefix(digest, "sha256:"))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// dpkgStatus is `dpkg-query -W -f '${db:Status-Status} ${Version}' name` in n; "" when dpkg
// knows no such package.
func dpkgStatus(ctx context.Context, n *Node, name string) string {
	out, err := n.Exec(ctx, "dpkg-query", "-W", "-f", "${db:Status-Status} ${Version}", name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// localRepo makes n's apt read only a flat repository in /root/repo holding debs (the lab's
// nodes reach no mirror), and runs apt-get update there: "the machine's own repositories", as
// an operator's mirror would be.
func localRepo(t *testing.T, ctx context.Context, n *Node, debs ...string) {
	t.Helper()
	repo := filepath.Join(n.Root(), "root/repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	var index strings.Builder
	for _, deb := range debs {
		b, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, filepath.Base(deb)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		fields, err := exec.CommandContext(ctx, "dpkg-deb", "-f", deb).Output()
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(&index, "%sFilename: ./%s\nSize: %d\nSHA256: %s\n\n", fields, filepath.Base(deb), len(b), hex.EncodeToString(sum[:]))
	}
	packages := []byte(index.String())
	sum := sha256.Sum256(packages)
	release := fmt.Sprintf("Origin: mesh-lab\nLabel: mesh-lab\nSuite: lab\nCodename: lab\nArchitectures: all amd64 arm64\nSHA256:\n %s %d Packages\n", hex.EncodeToString(sum[:]), len(packages))
	for name, body := range map[string][]byte{
		"root/repo/Packages":   packages,
		"root/repo/Release":    []byte(release),
		"etc/apt/sources.list": []byte("deb [trusted=yes] file:/root/repo ./\n"),
	} {
		p := filepath.Join(n.Root(), name)
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := n.Exec(ctx, "apt-get", "update"); err != nil {
		t.Fatalf("apt-get update on the lab's repository: %v\n%s", err, out)
	}
}

func TestAppliersInNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := Start(t, ctx)
	dir := t.TempDir()
	b, err := lab.NewBuilder(ctx, ".", filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	driver, err := b.Build(ctx, pkgApplyOne, "lab")
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := l.Boot(ctx, "appliers")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(driver)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.Root(), "usr/local/bin/applyone"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// one runs applyone in the node: op, type, id, spec (and "created" for remove).
	one := func(args ...string) (string, error) {
		out, err := n.Exec(ctx, append([]string{"env", "APPLYONE_BLOBS=/root/blobs", "applyone"}, args...)...)
		return strings.TrimSpace(string(out)), err
	}
	mustOne := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := one(args...)
		if err != nil {
			t.Fatalf("applyone %s: %v", strings.Join(args, " "), err)
		}
		return out
	}

	const unit = "mesh-lab-sleep.service"
	file := "/etc/systemd/system/" + unit
	enabled := true
	spec := func(body string) string {
		return specJSON(t, map[string]any{"unit_file": body, "enabled": enabled, "state": "running"})
	}
	props := []string{"ActiveState", "UnitFileState", "MainPID", "InvocationID", "FragmentPath", "LoadState"}

	ok := t.Run("declared unit file is written, enabled and started", func(t *testing.T) {
		diffs := mustOne(t, "inspect", "service", unit, spec(sleeper("infinity")))
		for _, want := range []string{"unit file " + file + " is absent", "declared enabled", "is inactive, declared running"} {
			if !strings.Contains(diffs, want) {
				t.Errorf("inspect before apply:\n%s\nwant it to say %q", diffs, want)
			}
		}
		if got := mustOne(t, "apply", "service", unit, spec(sleeper("infinity"))); got != "created=true" {
			t.Errorf("apply said %q, want created=true (the host wrote the unit file)", got)
		}
		p := unitShow(t, ctx, n, unit, props...)
		if p["ActiveState"] != "active" || p["UnitFileState"] != "enabled" || p["FragmentPath"] != file {
			t.Errorf("after apply: %v, want active, enabled, loaded from %s", p, file)
		}
		if diffs := mustOne(t, "inspect", "service", unit, spec(sleeper("infinity"))); diffs != "" {
			t.Errorf("read-back after apply:\n%s\nwant no difference", diffs)
		}
	})
	if !ok {
		return
	}

	t.Run("second apply changes nothing", func(t *testing.T) {
		before := unitShow(t, ctx, n, unit, props...)
		fi, err := os.Stat(filepath.Join(n.Root(), file))
		if err != nil {
			t.Fatal(err)
		}
		if got := mustOne(t, "apply", "service", unit, spec(sleeper("infinity"))); got != "created=false" {
			t.Errorf("apply said %q, want created=false", got)
		}
		after := unitShow(t, ctx, n, unit, props...)
		if after["MainPID"] != before["MainPID"] || after["InvocationID"] != before["InvocationID"] {
			t.Errorf("after a second apply: %v, before: %v; want the same process and invocation (not restarted)", after, before)
		}
		if fi2, err := os.Stat(filepath.Join(n.Root(), file)); err != nil || !fi2.ModTime().Equal(fi.ModTime()) {
			t.Errorf("the unit file was written again (%v)", err)
		}
	})

	t.Run("changed unit file restarts the running unit", func(t *testing.T) {
		before := unitShow(t, ctx, n, unit, props...)
		mustOne(t, "apply", "service", unit, spec(sleeper("1d")))
		after := unitShow(t, ctx, n, unit, props...)
		if after["ActiveState"] != "active" || after["MainPID"] == before["MainPID"] || after["InvocationID"] == before["InvocationID"] {
			t.Errorf("after changing the unit file: %v, before %v; want active with a new MainPID", after, before)
		}
		args, _ := n.Exec(ctx, "ps", "-o", "args=", "-p", after["MainPID"])
		if strings.TrimSpace(string(args)) != "/bin/sleep 1d" {
			t.Errorf("the unit runs %q, want the changed unit file's /bin/sleep 1d", args)
		}
	})

	t.Run("stopped and disabled by hand, inspect says so and apply puts it back", func(t *testing.T) {
		if _, err := n.Systemctl(ctx, "disable", "--now", unit); err != nil {
			t.Fatal(err)
		}
		diffs := mustOne(t, "inspect", "service", unit, spec(sleeper("1d")))
		want := "unit " + unit + " is disabled, declared enabled\nunit " + unit + " is inactive, declared running"
		if diffs != want {
			t.Errorf("inspect:\n%s\nwant:\n%s", diffs, want)
		}
		mustOne(t, "apply", "service", unit, spec(sleeper("1d")))
		if p := unitShow(t, ctx, n, unit, props...); p["ActiveState"] != "active" || p["UnitFileState"] != "enabled" {
			t.Errorf("after apply: %v, want active and enabled again", p)
		}
	})

	t.Run("the launcher's unit is refused", func(t *testing.T) {
		for _, s := range []string{
			specJSON(t, map[string]any{"state": "stopped"}),
			specJSON(t, map[string]any{"unit_file": sleeper("0"), "enabled": true}),
		} {
			for _, id := range []string{"mesh-launcher.service", "mesh-launcher"} {
				out, err := one("apply", "service", id, s)
				if err == nil || !strings.Contains(out, "the launcher's own unit") {
					t.Errorf("apply service %s %s: %v\n%s\nwant it refused as the launcher's own unit", id, s, err, out)
				}
			}
		}
		if _, err := os.Lstat(filepath.Join(n.Root(), "etc/systemd/system/mesh-launcher.service")); err == nil {
			t.Errorf("a unit file for mesh-launcher.service was written")
		}
	})

	t.Run("a unit the host did not create is forgotten, left running", func(t *testing.T) {
		other := "mesh-lab-other.service"
		if err := os.WriteFile(filepath.Join(n.Root(), "etc/systemd/system", other), []byte(sleeper("2d")), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Systemctl(ctx, "daemon-reload"); err != nil {
			t.Fatal(err)
		}
		s := specJSON(t, map[string]any{"unit_file": sleeper("2d"), "enabled": true, "state": "running"})
		if got := mustOne(t, "apply", "service", other, s); got != "created=false" {
			t.Errorf("apply of a unit file that was there said %q, want created=false", got)
		}
		if got := mustOne(t, "remove", "service", other, s); got != "forgotten: the unit was not created by the host" {
			t.Errorf("remove said %q", got)
		}
		if p := unitShow(t, ctx, n, other, props...); p["ActiveState"] != "active" || p["UnitFileState"] != "enabled" {
			t.Errorf("after it was forgotten: %v, want it still active and enabled", p)
		}
		// An instance of a template has no unit file of its own: systemd says whether it is
		// enabled.
		inst := "mesh-lab-inst@a.service"
		if err := os.WriteFile(filepath.Join(n.Root(), "etc/systemd/system/mesh-lab-inst@.service"), []byte(sleeper("3d")), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Systemctl(ctx, "daemon-reload"); err != nil {
			t.Fatal(err)
		}
		is := specJSON(t, map[string]any{"enabled": true, "state": "running"})
		if diffs := mustOne(t, "inspect", "service", inst, is); diffs != "unit "+inst+" is disabled, declared enabled\nunit "+inst+" is inactive, declared running" {
			t.Errorf("inspect of a template's instance:\n%s", diffs)
		}
		mustOne(t, "apply", "service", inst, is)
		if diffs := mustOne(t, "inspect", "service", inst, is); diffs != "" {
			t.Errorf("read-back of a template's instance:\n%s", diffs)
		}
		if p := unitShow(t, ctx, n, inst, props...); p["ActiveState"] != "active" || p["UnitFileState"] != "enabled" {
			t.Errorf("a template's instance after apply: %v, want active and enabled", p)
		}

		// Declared stopped and disabled, it is stopped and disabled.
		s = specJSON(t, map[string]any{"enabled": false, "state": "stopped"})
		mustOne(t, "apply", "service", other, s)
		if p := unitShow(t, ctx, n, other, props...); p["ActiveState"] != "inactive" || p["UnitFileState"] != "disabled" {
			t.Errorf("declared stopped and disabled: %v", p)
		}
	})

	t.Run("no longer declared, a unit the host created is stopped, disabled and its file removed", func(t *testing.T) {
		if got := mustOne(t, "remove", "service", unit, spec(sleeper("1d")), "created"); got != "removed" {
			t.Errorf("remove said %q, want removed", got)
		}
		p := unitShow(t, ctx, n, unit, props...)
		if p["ActiveState"] != "inactive" || p["LoadState"] != "not-found" || p["UnitFileState"] != "" {
			t.Errorf("after removal: %v, want inactive, not-found, no unit file state", p)
		}
		if _, err := os.Lstat(filepath.Join(n.Root(), file)); err == nil {
			t.Errorf("%s is still there", file)
		}
		if _, err := os.Lstat(filepath.Join(n.Root(), "etc/systemd/system/multi-user.target.wants", unit)); err == nil {
			t.Errorf("its enablement link is still there")
		}
	})

	debs := t.TempDir()
	deb1, sum1 := tinyDeb(t, ctx, debs, "mesh-lab-hello", "1.0")
	deb2, sum2 := tinyDeb(t, ctx, debs, "mesh-lab-hello", "2.0")
	deb3, _ := tinyDeb(t, ctx, debs, "mesh-lab-hello", "3.0")
	putBlob(t, n, "root/blobs", deb1, sum1)
	putBlob(t, n, "root/blobs", deb2, sum2)
	hello := func(version, source string) string {
		return specJSON(t, map[string]any{"version": version, "source": source})
	}
	readHello := func() string {
		b, _ := os.ReadFile(filepath.Join(n.Root(), "usr/share/mesh-lab-hello/hello.txt"))
		return string(b)
	}

	ok = t.Run("a .deb blob is installed with dpkg", func(t *testing.T) {
		if diffs := mustOne(t, "inspect", "package", "mesh-lab-hello", hello("1.0", sum1)); diffs != "package mesh-lab-hello is absent" {
			t.Errorf("inspect before: %q", diffs)
		}
		if got := mustOne(t, "apply", "package", "mesh-lab-hello", hello("1.0", sum1)); got != "created=true" {
			t.Errorf("apply said %q, want created=true", got)
		}
		if st := dpkgStatus(ctx, n, "mesh-lab-hello"); st != "installed 1.0" {
			t.Errorf("dpkg-query: %q, want installed 1.0", st)
		}
		if got := readHello(); got != "hello from 1.0\n" {
			t.Errorf("the package's file holds %q", got)
		}
		if diffs := mustOne(t, "inspect", "package", "mesh-lab-hello", hello("1.0", sum1)); diffs != "" {
			t.Errorf("read-back: %q, want no difference", diffs)
		}
	})
	if !ok {
		return
	}

	t.Run("second apply of the package runs nothing", func(t *testing.T) {
		before, _ := os.ReadFile(filepath.Join(n.Root(), "var/log/dpkg.log"))
		if got := mustOne(t, "apply", "package", "mesh-lab-hello", hello("1.0", sum1)); got != "created=false" {
			t.Errorf("apply said %q", got)
		}
		if after, _ := os.ReadFile(filepath.Join(n.Root(), "var/log/dpkg.log")); len(after) != len(before) {
			t.Errorf("dpkg ran again:\n%s", after[len(before):])
		}
	})

	t.Run("a .deb of another package is refused", func(t *testing.T) {
		out, err := one("apply", "package", "mesh-lab-other", specJSON(t, map[string]any{"source": sum1}))
		if err == nil || !strings.Contains(out, `is the package "mesh-lab-hello", not mesh-lab-other: refused`) {
			t.Errorf("apply: %v\n%s\nwant refused as another package", err, out)
		}
		if st := dpkgStatus(ctx, n, "mesh-lab-other"); st != "" {
			t.Errorf("dpkg knows mesh-lab-other: %q", st)
		}
		out, err = one("apply", "package", "mesh-lab-hello", hello("2.0", sum1))
		if err == nil || !strings.Contains(out, `is version "1.0", declared 2.0: refused`) {
			t.Errorf("apply of 1.0's .deb declared 2.0: %v\n%s\nwant refused", err, out)
		}
	})

	t.Run("another declared version is installed from its .deb", func(t *testing.T) {
		if diffs := mustOne(t, "inspect", "package", "mesh-lab-hello", hello("2.0", sum2)); diffs != "package mesh-lab-hello is installed at 1.0, declared 2.0" {
			t.Errorf("inspect: %q", diffs)
		}
		if got := mustOne(t, "apply", "package", "mesh-lab-hello", hello("2.0", sum2)); got != "created=false" {
			t.Errorf("apply said %q, want created=false (it was installed)", got)
		}
		if st := dpkgStatus(ctx, n, "mesh-lab-hello"); st != "installed 2.0" || readHello() != "hello from 2.0\n" {
			t.Errorf("dpkg-query %q, file %q: want 2.0", st, readHello())
		}
	})

	t.Run("without a source, apt-get installs it from the machine's repositories", func(t *testing.T) {
		localRepo(t, ctx, n, deb2, deb3)
		if got := mustOne(t, "apply", "package", "mesh-lab-hello", specJSON(t, map[string]any{"version": "3.0"})); got != "created=false" {
			t.Errorf("apply said %q", got)
		}
		if st := dpkgStatus(ctx, n, "mesh-lab-hello"); st != "installed 3.0" || readHello() != "hello from 3.0\n" {
			t.Errorf("dpkg-query %q, file %q: want 3.0", st, readHello())
		}
		// Declared older than what is installed: the declared version is the one wanted.
		mustOne(t, "apply", "package", "mesh-lab-hello", specJSON(t, map[string]any{"version": "2.0"}))
		if st := dpkgStatus(ctx, n, "mesh-lab-hello"); st != "installed 2.0" {
			t.Errorf("dpkg-query %q after declaring 2.0 over 3.0, want installed 2.0", st)
		}
		out, err := one("apply", "package", "mesh-lab-nowhere", "{}")
		if err == nil || !strings.Contains(out, "apt-get install") || !strings.Contains(out, "E: Unable to locate package mesh-lab-nowhere") {
			t.Errorf("apply of a package no repository has: %v\n%s\nwant apt-get's error", err, out)
		}
	})

	t.Run("no longer declared, a package is forgotten and stays installed", func(t *testing.T) {
		if got := mustOne(t, "remove", "package", "mesh-lab-hello", "{}", "created"); got != "forgotten: packages are never uninstalled; the host cannot know what else needs it" {
			t.Errorf("remove said %q", got)
		}
		if st := dpkgStatus(ctx, n, "mesh-lab-hello"); st != "installed 2.0" {
			t.Errorf("dpkg-query %q after remove, want still installed 2.0", st)
		}
	})
}

// rawBeats records every heartbeat as JSON, whatever fields it carries: the drift report is
// looked for by what it says (a resource's type and id, restored), not by where it sits.
type rawBeats struct {
	mu    sync.Mutex
	beats []rawBeat
}

type rawBeat struct {
	at   time.Time
	node string
	v    map[string]any
}

func recordRaw(nc *nats.Conn, names wire.Names) (*rawBeats, error) {
	r := &rawBeats{}
	if _, err := nc.Subscribe(names.HeartbeatWildcard(), func(m *nats.Msg) {
		var v map[string]any
		if json.Unmarshal(m.Data, &v) != nil {
			return
		}
		node, _ := v["node"].(string)
		r.mu.Lock()
		r.beats = append(r.beats, rawBeat{time.Now(), node, v})
		r.mu.Unlock()
	}); err != nil {
		return nil, err
	}
	return r, nc.Flush()
}

// drifted finds, anywhere in v, an object naming resource typ/id as drifted and restored.
func drifted(v any, typ, id string) map[string]any {
	switch x := v.(type) {
	case map[string]any:
		if x["type"] == typ && x["id"] == id && x["restored"] == true {
			return x
		}
		for _, e := range x {
			if d := drifted(e, typ, id); d != nil {
				return d
			}
		}
	case []any:
		for _, e := range x {
			if d := drifted(e, typ, id); d != nil {
				return d
			}
		}
	}
	return nil
}

// waitDrift waits up to a minute for a heartbeat of node, seen after since, that reports
// typ/id drifted and restored; it returns that report.
func (r *rawBeats) waitDrift(t *testing.T, ctx context.Context, node string, since time.Time, typ, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r.mu.Lock()
		beats := append([]rawBeat(nil), r.beats...)
		r.mu.Unlock()
		for _, b := range beats {
			if b.node == node && b.at.After(since) {
				if d := drifted(b.v, typ, id); d != nil {
					return d
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var last string
			for _, b := range beats {
				if b.node == node {
					j, _ := json.Marshal(b.v)
					last = string(j)
				}
			}
			t.Fatalf("no heartbeat of %s reports %s %s drifted and restored; the last:\n%s", node, typ, id, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ownedIDs walks `mesh-host owned --json` for the resources it lists, as "type id".
func ownedIDs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		typ, ok1 := x["type"].(string)
		id, ok2 := x["id"].(string)
		if ok1 && ok2 {
			return []string{typ + " " + id}
		}
		for _, e := range x {
			out = append(out, ownedIDs(e)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, ownedIDs(e)...)
		}
	}
	slices.Sort(out)
	return out
}

// declaration is a declaration for node of the resources given (type, id, spec as JSON).
func declaration(node string, resources ...[3]string) string {
	var rs []string
	for _, r := range resources {
		rs = append(rs, fmt.Sprintf(`{"type":%q,"id":%q,"spec":%s}`, r[0], r[1], r[2]))
	}
	return fmt.Sprintf(`{"version":1,"node":%q,"resources":[%s]}`, node, strings.Join(rs, ","))
}

// declareAndWait declares decl for n over the bus and waits for a heartbeat saying a reconcile
// of its revision completed after it was declared (the heartbeat naming the new revision may
// still carry the reconcile before it).
func (w *world) declareAndWait(t *testing.T, ctx context.Context, n *Node, decl string) uint64 {
	t.Helper()
	since := time.Now()
	rev := w.declare(t, ctx, n, decl)
	w.waitBeat(t, ctx, n, fmt.Sprintf("declaration revision %d reconciled", rev), func(b lab.Beat) bool {
		return b.DeclarationRevision == rev && b.LastReconcile != nil &&
			b.LastReconcile.Trigger == wire.TriggerDeclaration && b.LastReconcile.At.After(since)
	})
	return rev
}

// appliersThroughTheHost runs the service and package appliers through the packaged host in
// one node: `mesh-host apply FILE` once (a root of its own, so the running host's ledger and
// this one's stay apart), `mesh-host owned --json`, and a declaration over the bus that the
// running host applies, keeps against drift on its timer and removes.
func appliersThroughTheHost(t *testing.T, ctx context.Context, w *world) {
	n := w.install(t, ctx, "served", nil)
	const host = "/usr/share/mesh-host/mesh-host"
	const root = "/root/oneshot"
	// apply writes decl into the node and runs `mesh-host apply --root R FILE` there.
	apply := func(decl string) (string, error) {
		if err := os.WriteFile(filepath.Join(n.Root(), "root/declaration.json"), []byte(decl), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := n.Exec(ctx, host, "apply", "--root", root, "/root/declaration.json")
		return string(out), err
	}
	owned := func(t *testing.T) []string {
		t.Helper()
		out, err := n.Exec(ctx, host, "owned", "--json", "--root", root)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("mesh-host owned --json is not JSON: %v\n%s", err, out)
		}
		return ownedIDs(v)
	}
	props := []string{"ActiveState", "UnitFileState", "MainPID", "InvocationID", "LoadState"}
	const unit = "mesh-lab-web.service"
	debs := t.TempDir()
	deb, sum := tinyDeb(t, ctx, debs, "mesh-lab-hello", "1.0")
	// The one-shot host's blob cache holds the .deb, as `apply --bundle` or a fetch would leave it.
	putBlob(t, n, root[1:]+"/blobs", deb, sum)
	web := func(arg string) [3]string {
		return [3]string{"service", unit, specJSON(t, map[string]any{"unit_file": sleeper(arg), "enabled": true, "state": "running"})}
	}
	hello := [3]string{"package", "mesh-lab-hello", specJSON(t, map[string]any{"version": "1.0", "source": sum})}

	// Over the bus, to the running host: a unit and a package whose .deb is a blob on the bus.
	const drift = "mesh-lab-drift.service"
	deb2, sum2 := tinyDeb(t, ctx, debs, "mesh-lab-bus", "1.0")
	if out, err := w.rel.Run(ctx, "blob", "put", deb2, "--nats", w.rel.NATS); err != nil || !strings.Contains(out, sum2) {
		t.Fatalf("mesh-release blob put: %v\n%s", err, out)
	}
	declared := declaration(n.Name,
		[3]string{"service", drift, specJSON(t, map[string]any{"unit_file": sleeper("infinity"), "enabled": true, "state": "running"})},
		[3]string{"package", "mesh-lab-bus", specJSON(t, map[string]any{"source": sum2})})

	if t.Run("declared over the bus: the host applies it", func(t *testing.T) {
		w.declareAndWait(t, ctx, n, declared)
		if p := unitShow(t, ctx, n, drift, props...); p["ActiveState"] != "active" || p["UnitFileState"] != "enabled" {
			t.Errorf("%s: %v, want active and enabled", drift, p)
		}
		if st := dpkgStatus(ctx, n, "mesh-lab-bus"); st != "installed 1.0" {
			t.Errorf("dpkg-query mesh-lab-bus: %q, want installed 1.0 (from the blob on the bus)", st)
		}
		if t.Failed() {
			t.Logf("%s", diagnose(n))
		}
	}) {
		t.Run("stopped by hand, the timer's reconcile starts it and the heartbeat says it drifted", func(t *testing.T) {
			before := unitShow(t, ctx, n, drift, props...)
			stopped := time.Now()
			if _, err := n.Systemctl(ctx, "stop", drift); err != nil {
				t.Fatal(err)
			}
			p := waitUnit(t, ctx, n, drift, "started again by the host", func(p map[string]string) bool {
				return p["ActiveState"] == "active" && p["InvocationID"] != before["InvocationID"]
			}, props...)
			t.Logf("figure: stopped by hand to running again by the timer's reconcile: %s", time.Since(stopped).Round(time.Millisecond))
			d := w.raw.waitDrift(t, ctx, n.Name, stopped, "service", drift)
			t.Logf("the heartbeat's drift report: %v (unit now %v)", d, p)
		})

		t.Run("no longer declared over the bus: the unit is removed, the package forgotten", func(t *testing.T) {
			w.declareAndWait(t, ctx, n, declaration(n.Name))
			if p := unitShow(t, ctx, n, drift, props...); p["ActiveState"] != "inactive" || p["LoadState"] != "not-found" {
				t.Errorf("%s: %v, want inactive and gone", drift, p)
			}
			if st := dpkgStatus(ctx, n, "mesh-lab-bus"); st != "installed 1.0" {
				t.Errorf("dpkg-query mesh-lab-bus: %q, want still installed", st)
			}
		})
	}

	ok := t.Run("mesh-host apply: unit enabled and running, package installed", func(t *testing.T) {
		if out, err := apply(declaration(n.Name, web("infinity"), hello)); err != nil {
			t.Fatalf("mesh-host apply: %v\n%s", err, out)
		}
		if p := unitShow(t, ctx, n, unit, props...); p["ActiveState"] != "active" || p["UnitFileState"] != "enabled" {
			t.Errorf("%s after apply: %v, want active and enabled", unit, p)
		}
		if st := dpkgStatus(ctx, n, "mesh-lab-hello"); st != "installed 1.0" {
			t.Errorf("dpkg-query: %q, want installed 1.0", st)
		}
		if got := owned(t); !slices.Equal(got, []string{"package mesh-lab-hello", "service " + unit}) {
			t.Errorf("mesh-host owned --json lists %q, want the package and the service", got)
		}
	})
	if !ok {
		return
	}

	t.Run("mesh-host apply again changes nothing", func(t *testing.T) {
		before := unitShow(t, ctx, n, unit, props...)
		log, _ := os.ReadFile(filepath.Join(n.Root(), "var/log/dpkg.log"))
		out, err := apply(declaration(n.Name, web("infinity"), hello))
		if err != nil {
			t.Fatalf("mesh-host apply: %v\n%s", err, out)
		}
		// The issue: applied twice, it changes nothing the second time and says so.
		if !strings.Contains(out, "nothing changed") {
			t.Errorf("the second mesh-host apply said:\n%s\nwant it to say nothing changed", out)
		}
		if after := unitShow(t, ctx, n, unit, props...); after["MainPID"] != before["MainPID"] || after["InvocationID"] != before["InvocationID"] {
			t.Errorf("after the second apply %v, before %v: want the unit untouched", after, before)
		}
		if again, _ := os.ReadFile(filepath.Join(n.Root(), "var/log/dpkg.log")); len(again) != len(log) {
			t.Errorf("dpkg ran again:\n%s", again[len(log):])
		}
	})

	t.Run("mesh-host apply of a changed unit file restarts it", func(t *testing.T) {
		before := unitShow(t, ctx, n, unit, props...)
		if out, err := apply(declaration(n.Name, web("1d"), hello)); err != nil {
			t.Fatalf("mesh-host apply: %v\n%s", err, out)
		}
		if after := unitShow(t, ctx, n, unit, props...); after["ActiveState"] != "active" || after["MainPID"] == before["MainPID"] {
			t.Errorf("after the change %v, before %v: want it running with a new MainPID", after, before)
		}
	})

	t.Run("mesh-host apply refuses the launcher's unit", func(t *testing.T) {
		before := show(t, ctx, n)
		out, err := apply(declaration(n.Name, [3]string{"service", "mesh-launcher.service", `{"state":"stopped"}`}))
		if err == nil || !strings.Contains(out, "mesh-launcher.service") {
			t.Errorf("mesh-host apply of service mesh-launcher.service: %v\n%s\nwant it refused, naming the unit", err, out)
		}
		if p := show(t, ctx, n); p["ActiveState"] != "active" || p["MainPID"] != before["MainPID"] {
			t.Errorf("the launcher after the refused declaration: %v, want active, MainPID %s", p, before["MainPID"])
		}
	})

	t.Run("mesh-host apply without them: unit stopped, disabled, removed; package forgotten", func(t *testing.T) {
		out, err := apply(declaration(n.Name))
		if err != nil {
			t.Fatalf("mesh-host apply: %v\n%s", err, out)
		}
		if p := unitShow(t, ctx, n, unit, props...); p["ActiveState"] != "inactive" || p["LoadState"] != "not-found" {
			t.Errorf("%s after it was no longer declared: %v, want inactive and gone", unit, p)
		}
		if _, err := os.Lstat(filepath.Join(n.Root(), "etc/systemd/system", unit)); err == nil {
			t.Errorf("its unit file is still there")
		}
		if st := dpkgStatus(ctx, n, "mesh-lab-hello"); st != "installed 1.0" {
			t.Errorf("dpkg-query: %q, want still installed 1.0 (packages are forgotten, never uninstalled)", st)
		}
		if got := owned(t); len(got) != 0 {
			t.Errorf("mesh-host owned --json still lists %q", got)
		}
	})
}
