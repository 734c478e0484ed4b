package host

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// substrate is the resources both nodes are raised with, under base.
func substrate(base string) string {
	return strings.ReplaceAll(`{"type": "directory", "id": "BASE/app", "spec": {"mode": "0750"}},
		{"type": "directory", "id": "BASE/app/conf.d"},
		{"type": "file", "id": "BASE/app/conf.d/app.conf", "spec": {"content": "port = 80\nworkers = 4\n", "mode": "0640"}},
		{"type": "file", "id": "BASE/app/run", "spec": {"content": "#!/bin/sh\nexec app\n", "mode": "0755"}},
		{"type": "directory", "id": "BASE/data", "spec": {"mode": "0700"}}`, "BASE", base)
}

// One behaviour, two sources (ADR 0038): node 1 is raised from a bundle by `mesh-host apply
// --bundle` with no mesh present, node 2 from the same resources declared over a real bus to
// a running host; both machines end identical (paths, kinds, modes, contents).
func TestOneBehaviourTwoSourcesRaiseIdenticalNodes(t *testing.T) {
	bin := goBuild(t, t.TempDir(), "./host/cmd/mesh-host", "v1.0.0")

	// Node 1: a bundle, applied once by the command line.
	root1, base1 := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(root1, "host.json"), []byte(`{"node": "n1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(t.TempDir(), "substrate.lock")
	if err := os.WriteFile(lock, []byte(`{"version": 1, "node": "", "resources": [`+substrate(base1)+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"applied: 5 created", "nothing changed (5 unchanged)"} {
		cmd := exec.Command(bin, "apply", "--root", root1, "--bundle", lock)
		cmd.Env = append(os.Environ(), "MESH_HOST_ROOT=", "MESH_HOST_NODE=")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("apply --bundle, run %d: %v\n%s\nwant it to say %q", i+1, err, out, want)
		}
	}

	// Node 2: a running host, declared to over the bus.
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n2")
	base2 := t.TempDir()
	th := startHost(t, newRoot(t, "v1.0.0"), "n2", b.URL())
	rev := b.Declare("n2", decl("n2", substrate(base2)))
	meshtest.WaitHeartbeat(t, hbs, "the declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == rev })
	meshtest.Eventually(t, "node 2's declaration reconciled", func() bool {
		rows := th.reconciles()
		last := rows[len(rows)-1]
		return last.Trigger == "declaration" && !last.Ended.IsZero()
	})
	if rows := th.reconciles(); !rows[len(rows)-1].OK {
		t.Fatalf("node 2's reconcile failed: %+v", rows[len(rows)-1])
	}

	one, two := machineTree(t, base1), machineTree(t, base2)
	if one != two {
		t.Errorf("the nodes differ:\nnode 1 (bundle):\n%s\nnode 2 (link):\n%s", one, two)
	}
	if strings.Count(one, "\n") != 6 { // base itself and the five resources
		t.Errorf("node 1 holds:\n%s", one)
	}
}

// machineTree lists every path under base, relative, with its mode and content.
func machineTree(t *testing.T, base string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		fmt.Fprintf(&b, "%s %v", rel, fi.Mode())
		if fi.Mode().IsRegular() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
