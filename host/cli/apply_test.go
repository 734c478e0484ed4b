package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/rollback"
)

// These tests run the real mesh-host binary, built from this tree, on temp roots; every
// resource lies in a t.TempDir() (the tests may run as root).

var built struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

// meshHost builds the binary once per test run.
func meshHost(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "mesh-host-cli-")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "mesh-host")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version=v0.0.0-test", "-o", built.path, "../cmd/mesh-host")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

type node struct {
	t    *testing.T
	root string // the host's root, with host.json naming node n1
	dir  string // where the declared resources live
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{t: t, root: t.TempDir(), dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(n.root, "host.json"), []byte(`{"node": "n1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

// run runs mesh-host with args (and --root) and returns its exit status and output.
func (n *node) run(args ...string) (int, string, string) {
	n.t.Helper()
	cmd := exec.Command(meshHost(n.t), append(args, "--root", n.root)...)
	cmd.Env = append(os.Environ(), "MESH_HOST_ROOT=", "MESH_HOST_NODE=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// write writes a declaration file in its own directory and returns its path.
func (n *node) write(name, resources string) string {
	n.t.Helper()
	p := filepath.Join(n.t.TempDir(), name)
	body := fmt.Sprintf(`{"version": 1, "resources": [%s]}`, strings.ReplaceAll(resources, "DIR", n.dir))
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		n.t.Fatal(err)
	}
	return p
}

func (n *node) p(name string) string { return filepath.Join(n.dir, name) }

const appDecl = `{"type": "directory", "id": "DIR/app", "spec": {"mode": "0750"}},
	{"type": "file", "id": "DIR/app/app.conf", "spec": {"content": "port = 80\n", "mode": "0640"}}`

// Applied twice, the second apply changes nothing and says so; both exit 0.
func TestApplyTwiceSaysNothingChangedTheSecondTime(t *testing.T) {
	n := newNode(t)
	f := n.write("d.json", appDecl)
	code, out, errOut := n.run("apply", f)
	if code != 0 || !strings.Contains(out, "created   directory "+n.p("app")) || !strings.Contains(out, "applied: 2 created") {
		t.Fatalf("first apply: exit %d\n%s%s", code, out, errOut)
	}
	if fi, err := os.Stat(n.p("app/app.conf")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("app.conf: %v %v", fi, err)
	}
	code, out, errOut = n.run("apply", f)
	if code != 0 || !strings.Contains(out, "nothing changed (2 unchanged)") {
		t.Fatalf("second apply: exit %d, want 0 saying nothing changed\n%s%s", code, out, errOut)
	}
}

// A failed step: exit 1, the step named on stderr with why, the steps before it applied and
// owned, nothing after it, no claim of success.
func TestApplyStopsAtAFailedStepNamesItAndExits1(t *testing.T) {
	n := newNode(t)
	f := n.write("d.json", `{"type": "directory", "id": "DIR/a"},
		{"type": "file", "id": "DIR/nowhere/x", "spec": {"content": "x"}},
		{"type": "directory", "id": "DIR/b"}`)
	code, out, errOut := n.run("apply", f)
	want := fmt.Sprintf("mesh-host apply: resources[1] file %q: ", n.p("nowhere/x"))
	if code != 1 || !strings.HasPrefix(errOut, want) || !strings.Contains(out, "not applied completely") || strings.Contains(out, "applied:") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 naming %q", code, out, errOut, want)
	}
	if _, err := os.Stat(n.p("b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the step after the failure was applied")
	}
	code, out, _ = n.run("owned", "--json")
	var obs []apply.Observed
	if err := json.Unmarshal([]byte(out), &obs); code != 0 || err != nil || len(obs) != 1 || obs[0].ID != n.p("a") {
		t.Errorf("owned after the failure: exit %d %v %s; want directory a alone", code, err, out)
	}
}

// apply never runs beside a running host: with the host lock held it refuses, exit 2, saying
// what to do instead, and changes nothing.
func TestApplyRefusesWhileTheHostServiceHoldsTheRoot(t *testing.T) {
	n := newNode(t)
	lock, err := rollback.LockHost(context.Background(), n.root, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	code, _, errOut := n.run("apply", n.write("d.json", appDecl))
	if code != 2 || !strings.Contains(errOut, "the host service is running and holds "+n.root+"; declare this to it instead, or stop mesh-launcher") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(n.p("app")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("applied while the host held the root")
	}
}

// Refused input: exit 2, the error naming what was wrong, nothing applied.
func TestApplyRefusesBadInputWithExit2(t *testing.T) {
	n := newNode(t)
	for _, tc := range []struct{ name, body, want string }{
		{"another node's", `{"version": 1, "node": "n2", "resources": [{"type": "directory", "id": "DIR/x"}]}`, `addressed to node "n2", but this is node "n1"`},
		{"a path in the host's root", `{"version": 1, "resources": [{"type": "directory", "id": "ROOT/versions"}]}`, "which the installation owns"},
		{"an unknown field in a spec", `{"version": 1, "resources": [{"type": "directory", "id": "DIR/x", "spec": {"colour": "red"}}]}`, `colour`},
		{"not JSON", `{"version": 1, "resources": [`, "declaration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "d.json")
			body := strings.NewReplacer("DIR", n.dir, "ROOT", n.root).Replace(tc.body)
			os.WriteFile(p, []byte(body), 0o600)
			code, _, errOut := n.run("apply", p)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 saying %q", code, errOut, tc.want)
			}
			if ents, _ := os.ReadDir(n.dir); len(ents) != 0 {
				t.Errorf("something was applied: %v", ents)
			}
		})
	}
	if code, _, _ := n.run("apply"); code != 2 {
		t.Errorf("apply with no FILE: exit %d, want 2", code)
	}
}

// plan says what would change and changes nothing, the files nor the ledger.
func TestPlanSaysWhatWouldChangeAndChangesNothing(t *testing.T) {
	n := newNode(t)
	if code, out, errOut := n.run("apply", n.write("d.json", appDecl)); code != 0 {
		t.Fatalf("apply: %s%s", out, errOut)
	}
	os.WriteFile(n.p("app/app.conf"), []byte("port = 8080\n"), 0o640)
	before := tree(t, n.dir)
	ownedBefore := must(n.run("owned", "--json"))
	code, out, errOut := n.run("plan", n.write("d2.json", `{"type": "file", "id": "DIR/app/app.conf", "spec": {"content": "port = 80\n", "mode": "0640"}}`))
	if code != exitChanges {
		t.Fatalf("plan: exit %d %s%s", code, out, errOut)
	}
	for _, want := range []string{"changed   file      " + n.p("app/app.conf") + " (drifted)", "removed   directory " + n.p("app"), "plan: 2 would change"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan does not say %q:\n%s", want, out)
		}
	}
	if after := tree(t, n.dir); after != before {
		t.Errorf("plan changed the files:\n%s\n---\n%s", before, after)
	}
	if got := must(n.run("owned", "--json")); got != ownedBefore {
		t.Errorf("plan changed the ledger")
	}
	code, out, _ = n.run("plan", "--json", n.write("d.json", appDecl))
	var rep apply.Report
	if err := json.Unmarshal([]byte(out), &rep); code != exitChanges || err != nil || rep.Changed() != 1 {
		t.Errorf("plan --json: exit %d, %v, %s", code, err, out)
	}
}

// owned reads the machine: a file changed and a directory removed show as such.
func TestOwnedShowsTheMachineAsItIsNow(t *testing.T) {
	n := newNode(t)
	if code, _, _ := n.run("owned"); code != 0 {
		t.Fatalf("owned on a root that never applied anything: exit %d", code)
	}
	if code, out, errOut := n.run("apply", n.write("d.json", appDecl+`, {"type": "directory", "id": "DIR/data"}`)); code != 0 {
		t.Fatalf("apply: %s%s", out, errOut)
	}
	os.Chmod(n.p("app/app.conf"), 0o644)
	os.Remove(n.p("data"))
	code, out, _ := n.run("owned")
	for _, want := range []string{"in state  directory " + n.p("app"), "differs   file      " + n.p("app/app.conf"), "mode", "missing   directory " + n.p("data")} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("owned: exit %d, does not say %q:\n%s", code, want, out)
		}
	}
}

// A bundle: the lock is the declaration, its blobs beside it in blobs/sha256/<hex>; a file
// declared by digest is written from there, verified.
func TestApplyBundleTakesBlobsFromBesideTheLock(t *testing.T) {
	n := newNode(t)
	bundle := t.TempDir()
	blob := []byte("#!/bin/sh\necho hello\n")
	sum := fmt.Sprintf("%x", sha256.Sum256(blob))
	os.MkdirAll(filepath.Join(bundle, "blobs", "sha256"), 0o755)
	os.WriteFile(filepath.Join(bundle, "blobs", "sha256", sum), blob, 0o644)
	lock := filepath.Join(bundle, "substrate.lock")
	os.WriteFile(lock, []byte(fmt.Sprintf(`{"version": 1, "node": "", "resources": [
		{"type": "file", "id": %q, "spec": {"source": "sha256:%s", "mode": "0755"}}]}`, n.p("hello"), sum)), 0o600)
	code, out, errOut := n.run("apply", "--bundle", lock)
	if code != 0 {
		t.Fatalf("apply --bundle: exit %d\n%s%s", code, out, errOut)
	}
	if b, err := os.ReadFile(n.p("hello")); err != nil || !bytes.Equal(b, blob) {
		t.Errorf("the file from the blob: %q %v", b, err)
	}
	if code, out, _ := n.run("apply", "--bundle", lock); code != 0 || !strings.Contains(out, "nothing changed") {
		t.Errorf("the bundle again: exit %d\n%s", code, out)
	}
}

func must(code int, out, errOut string) string {
	if code != 0 {
		panic(fmt.Sprintf("exit %d: %s", code, errOut))
	}
	return out
}

// tree lists every path under dir with its mode and content.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		fmt.Fprintf(&b, "%s %v", strings.TrimPrefix(p, dir), fi.Mode())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteByte('\n')
		return nil
	})
	return b.String()
}
