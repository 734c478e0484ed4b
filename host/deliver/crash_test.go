package deliver

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
)

// crashChildEnv makes the test binary a child that stages one version and exits (see
// crashChild): the parent kills it with SIGKILL at random points.
const crashChildEnv = "DELIVER_TEST_CRASH_CHILD"

// crashChild stages MESH_TEST_VERSION from the bus at MESH_TEST_URL into MESH_HOST_ROOT,
// trusting MESH_TEST_KEY, as a host process would.
func crashChild() {
	ctx := context.Background()
	fail := func(err error) { fmt.Fprintln(os.Stderr, err); os.Exit(1) }
	nc, err := nats.Connect(os.Getenv("MESH_TEST_URL"))
	if err != nil {
		fail(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		fail(err)
	}
	root := os.Getenv("MESH_HOST_ROOT")
	rec, err := rollback.OpenForHost(ctx, root)
	if err != nil {
		fail(err)
	}
	key, err := wire.ParseTrustedKey(os.Getenv("MESH_TEST_KEY"))
	if err != nil {
		fail(err)
	}
	d, err := New(Config{Root: root, JS: js, Records: rec, TrustedKeys: []ed25519.PublicKey{key}})
	if err != nil {
		fail(err)
	}
	fmt.Println("staging") // the parent's kill timer starts here
	if err := d.Deliver(ctx, os.Getenv("MESH_TEST_VERSION"), nil); err != nil {
		fail(err)
	}
	os.Exit(0)
}

// padded returns bin followed by n bytes that compress about as well as a program does, so
// staging takes long enough to be interrupted in every phase. An ELF program runs with data
// appended to it.
func padded(bin []byte, n int) []byte {
	out := make([]byte, 0, len(bin)+n)
	out = append(out, bin...)
	r := rand.New(rand.NewPCG(1, 2))
	for len(out) < len(bin)+n {
		x := byte(r.IntN(256))
		for _, b := range bin[:min(len(bin), 64<<10)] {
			out = append(out, b^x)
			if len(out) == len(bin)+n {
				break
			}
		}
	}
	return out
}

func TestSIGKILLWhileStagingNeverLeavesAHalfVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("kills 50 staging processes")
	}
	h := newHarness(t, nil)
	pad := 4 << 20
	if raceEnabled {
		pad = 512 << 10
	}
	bin := padded(fakehost(t, v1, "ok", runtime.GOARCH), pad)
	h.release(v1, bin)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// run stages in a child process and kills it killAfter after it starts staging (never when
	// killAfter < 0). It returns whether the child finished and how long staging took.
	run := func(root string, killAfter time.Duration) (finished bool, took time.Duration) {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"=1", "MESH_TEST_URL="+h.url, "MESH_HOST_ROOT="+root,
			"MESH_TEST_VERSION="+v1, "MESH_TEST_KEY="+base64.StdEncoding.EncodeToString(h.priv.Public().(ed25519.PublicKey)))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line := make([]byte, len("staging\n"))
		if _, err := io.ReadFull(out, line); err != nil {
			cmd.Wait()
			t.Fatalf("the child did not start staging: %v\n%s", err, stderr.String())
		}
		start := time.Now()
		if killAfter < 0 {
			if err := cmd.Wait(); err != nil {
				t.Fatalf("uninterrupted staging failed: %v\n%s", err, stderr.String())
			}
			return true, time.Since(start)
		}
		time.Sleep(killAfter)
		cmd.Process.Kill()
		err = cmd.Wait()
		if err == nil {
			return true, 0
		}
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
			t.Fatalf("the child failed on its own: %v\n%s", err, stderr.String())
		}
		return false, 0
	}
	newRoot := func() string {
		root := t.TempDir()
		rec, _, err := rollback.OpenForLauncher(context.Background(), root)
		if err != nil {
			t.Fatal(err)
		}
		rec.Close()
		return root
	}
	// One uninterrupted run shows how long staging takes here; kills land anywhere in it.
	_, span := run(newRoot(), -1)

	killed, staged := 0, 0
	for i := range 50 {
		root := newRoot()
		if finished, _ := run(root, time.Duration(rand.Int64N(int64(span)+1))); finished {
			staged++
		} else {
			killed++
		}
		vd := rollback.VersionsDir(root)
		ents, _ := os.ReadDir(vd)
		for _, e := range ents {
			switch {
			case strings.HasPrefix(e.Name(), rollback.StagingPrefix):
			case e.Name() == v1:
				got, err := os.ReadFile(filepath.Join(vd, v1, archive.BinaryName))
				if err != nil || !bytes.Equal(got, bin) {
					t.Fatalf("run %d: versions/%s is incomplete (%d of %d bytes, %v)", i, v1, len(got), len(bin), err)
				}
			default:
				t.Fatalf("run %d: versions/ holds %q", i, e.Name())
			}
		}
		// What start-up does: clean the leftovers, then choose.
		if _, err := rollback.CleanStaging(root); err != nil {
			t.Fatal(err)
		}
		rec, err := rollback.OpenForHost(context.Background(), root)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := rec.Choose(context.Background(), root)
		rec.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, statErr := os.Stat(filepath.Join(vd, v1)); (statErr == nil) != (ch.Version == v1) {
			t.Fatalf("run %d: Choose says %q with versions/%s present=%v", i, ch.Version, v1, statErr == nil)
		}
		left, _ := os.ReadDir(vd)
		for _, e := range left {
			if strings.HasPrefix(e.Name(), rollback.StagingPrefix) {
				t.Fatalf("run %d: CleanStaging left %s", i, e.Name())
			}
		}
		// A new attempt after a crash completes (checked on some runs; each costs a full staging).
		if ch.Version == "" && i%10 == 0 {
			run(root, -1)
			if !bytes.Equal(mustRead(t, filepath.Join(vd, v1, archive.BinaryName)), bin) {
				t.Fatalf("run %d: staging after the crash did not complete", i)
			}
		}
	}
	t.Logf("50 SIGKILLs at random points: %d killed mid-staging, %d finished first", killed, staged)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
