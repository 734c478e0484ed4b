package lab

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

const (
	busUser      = "mesh"
	busPassword  = "S3cretPassw0rd"
	wrongPasswd  = "Wr0ngPassw0rdToo"
	busNodeGood  = "lab"
	busNodeWrong = "lab-wrong"
)

// authBus is the mesh's bus requiring a user and password. Every heartbeat published on it is
// kept raw, so a test can search the bytes that crossed the bus.
type authBus struct {
	*meshtest.Bus

	mu    sync.Mutex
	beats [][]byte
}

func startAuthBus(t *testing.T) *authBus {
	t.Helper()
	b := &authBus{Bus: meshtest.StartBus(t, meshtest.User(busUser, busPassword))}
	sub, err := b.Conn.NC.Subscribe(b.Names.HeartbeatWildcard(), func(m *nats.Msg) {
		b.mu.Lock()
		b.beats = append(b.beats, append([]byte(nil), m.Data...))
		b.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := b.Conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return b
}

// url is the bus's URL with the user and the given password in it, as an operator writes it in
// MESH_HOST_NATS_URL or --nats.
func (b *authBus) url(password string) string {
	return "nats://" + busUser + ":" + password + "@" + b.Addr()
}

// waitBeat waits until a heartbeat received so far satisfies ok.
func (b *authBus) waitBeat(ctx context.Context, t *testing.T, what string, ok func(wire.Heartbeat) bool) wire.Heartbeat {
	t.Helper()
	for {
		b.mu.Lock()
		beats := b.beats
		b.mu.Unlock()
		for _, raw := range beats {
			if hb, err := wire.ParseHeartbeat(raw); err == nil && ok(hb) {
				return hb
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no heartbeat with %s (%d heartbeats seen)", what, len(beats))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// An operator who writes the bus password into the NATS URL never finds it again in anything
// the node or the release side writes: not the launcher's and hosts' logs, not records.db or
// store.db (nor their WALs), not a heartbeat, not `mesh-launcher status` (text or JSON), not
// `mesh-release fleet`, also when the link is refused and when a version that logged its link
// crashes and is rolled back (its output is kept in the records and sent in heartbeats).
func TestNoOutputContainsTheBusPassword(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 120*time.Second)
	b := startAuthBus(t)

	// A node with the right password links, confirms, then gets a version that logs its link
	// and crashes: it is rolled back, and v1.0.0 heartbeats the crash's output.
	good := newNode(t, "MESH_HOST_NATS_URL="+b.url(busPassword), "MESH_HOST_NODE="+busNodeGood)
	place(t, good, "v1.0.0", PkgHost)
	start(t, good)
	b.waitBeat(ctx, t, "v1.0.0 linked and confirmed", func(hb wire.Heartbeat) bool {
		return hb.Node == busNodeGood && hb.Running == "v1.0.0" && hb.KnownGood == "v1.0.0"
	})
	place(t, good, "v1.1.0", PkgLinkCrash)
	b.waitBeat(ctx, t, "the rollback from the crashing version", func(hb wire.Heartbeat) bool {
		return hb.Node == busNodeGood && hb.Running == "v1.0.0" && len(hb.Rollbacks) > 0
	})
	rep, _, err := good.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rollbacks) == 0 || !strings.Contains(rep.Rollbacks[0].Output, "link") {
		t.Fatalf("the rollback did not keep the crashed version's link lines: %+v", rep.Rollbacks)
	}

	// A node with a wrong password is refused; it keeps running from its store and says why.
	wrong := newNode(t, "MESH_HOST_NATS_URL="+b.url(wrongPasswd), "MESH_HOST_NODE="+busNodeWrong)
	place(t, wrong, "v1.0.0", PkgHost)
	start(t, wrong)
	if _, err := wrong.WaitStatus(ctx, "v1.0.0 confirmed without the bus", func(rep launcher.Report) bool {
		v, ok := Version(rep, "v1.0.0")
		return ok && v.Confirmed
	}); err != nil {
		t.Fatal(err)
	}

	// What an operator reads on the control side, with the right and the wrong password.
	rel := build(t, PkgRelease, "v0.0.0-lab")
	outputs := map[string][]byte{}
	for _, pw := range []string{busPassword, wrongPasswd} {
		for _, args := range [][]string{{"fleet"}, {"fleet", "--json"}} {
			out, _ := exec.CommandContext(ctx, rel, append(args, "--nats", b.url(pw))...).CombinedOutput()
			outputs[fmt.Sprintf("mesh-release %s (password %s…)", strings.Join(args, " "), pw[:3])] = out
		}
	}
	if !bytes.Contains(outputs["mesh-release fleet (password S3c…)"], []byte(busNodeGood)) {
		t.Errorf("mesh-release fleet did not show the node:\n%s", outputs["mesh-release fleet (password S3c…)"])
	}

	// By the time it stops, the refused node has said why.
	if code, err := wrong.Stop(ctx); err != nil || code != 0 {
		t.Errorf("the refused node's launcher stopped with %d, %v; want 0", code, err)
	}
	if !strings.Contains(wrong.Log(), "the server refused this node's credentials") {
		t.Errorf("the refused link was not logged with its cause:\n%s", wrong.Log())
	}

	// Everything the nodes wrote or said.
	for label, n := range map[string]*Node{"linked node": good, "refused node": wrong} {
		outputs[label+": launcher and host log"] = []byte(n.Log())
		outputs[label+": mesh-launcher status"] = []byte(n.StatusText(ctx))
		js, _ := exec.CommandContext(ctx, n.Launcher, "status", "--root", n.Root, "--json").CombinedOutput()
		outputs[label+": mesh-launcher status --json"] = js
		err := filepath.WalkDir(n.Root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "versions" {
				return filepath.SkipDir // the binaries
			}
			if d.Type().IsRegular() {
				// The state files are the service's alone, as the root is.
				if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s: %s is %#o, readable by group or others", label, path, fi.Mode().Perm())
				}
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				outputs[label+": file "+strings.TrimPrefix(path, n.Root)] = data
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	b.mu.Lock()
	for i, raw := range b.beats {
		outputs[fmt.Sprintf("heartbeat %d", i)] = raw
	}
	b.mu.Unlock()
	for _, name := range []string{"/records.db", "/store.db"} {
		if _, ok := outputs["linked node: file "+name]; !ok {
			t.Errorf("%s was not searched: it does not exist", name)
		}
	}

	leakyBeats := 0
	for what, out := range outputs {
		for _, pw := range []string{busPassword, wrongPasswd} {
			i := bytes.Index(out, []byte(pw))
			switch {
			case i < 0:
			case strings.HasPrefix(what, "heartbeat "):
				if leakyBeats++; leakyBeats == 1 {
					t.Errorf("%s contains a bus password: …%s…", what, printableAround(out, i, len(pw)))
				}
			default:
				t.Errorf("%s contains a bus password: …%s…", what, printableAround(out, i, len(pw)))
			}
		}
	}
	if leakyBeats > 0 {
		t.Errorf("%d heartbeats contain a bus password", leakyBeats)
	}
	t.Logf("searched %d outputs", len(outputs))
}

func printableAround(b []byte, i, n int) string {
	lo, hi := max(0, i-60), min(len(b), i+n+20)
	return strconv.Quote(string(b[lo:hi]))
}
