package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Bad arguments to withdraw are usage errors said before the bus is dialled.
func TestWithdrawUsageErrorsExit2BeforeTheBus(t *testing.T) {
	key := keyFile(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no version", []string{"--key", key}, "mesh-release withdraw: want VERSION, got 0 arguments"},
		{"two versions", []string{"v1.2.0", "v1.3.0", "--key", key}, "mesh-release withdraw: want VERSION, got 2 arguments"},
		{"not a version", []string{"1.2", "--key", key}, `mesh-release withdraw: "1.2" is not a version; want vX.Y.Z`},
		{"a reason too long", []string{"v1.2.0", "--key", key, "--reason", strings.Repeat("x", 300)}, "mesh-release withdraw: --reason: 300 bytes, more than the 256 allowed"},
		{"a reason of two lines", []string{"v1.2.0", "--key", key, "--reason", "one\ntwo"}, "mesh-release withdraw: --reason: holds the unprintable character U+000A"},
		{"--json without --list", []string{"v1.2.0", "--key", key, "--json"}, "mesh-release withdraw: --json goes with --list"},
		{"--list with a version", []string{"--list", "v1.2.0"}, "mesh-release withdraw: --list takes no VERSION"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, append([]string{"withdraw"}, tc.args...)...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want) || !strings.HasSuffix(errOut, "run `mesh-release withdraw --help` for usage\n") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, tc.want)
			}
		})
	}
}

// withdraw adds the version to the signed list and says what it set in motion; withdrawing it
// again says so and changes nothing (exit 0); a version not published is refused unless
// --force; --list shows the list as text and JSON.
func TestWithdrawAddsToTheSignedListAndSaysWhatFollows(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	names := wire.NamesFor("")
	announce(t, c, "v1.2.0")
	// web-01 runs v1.2.0.
	hb := wire.Heartbeat{Schema: wire.HeartbeatSchema, Node: "web-01", State: wire.StateRunning, Running: "v1.2.0", KnownGood: "v1.2.0", SentAt: time.Now().UTC()}
	if _, err := c.JS.Publish(ctx, names.Heartbeat("web-01"), hb.Marshal()); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{envNATSURL: url}
	key := keyFile(t)

	code, out, errOut := runMain(t, env, "withdraw", "v1.2.0", "--key", key, "--reason", "crashes on arm64 under load")
	want := regexp.MustCompile(`^withdrew v1\.2\.0 \(at \S+Z: "crashes on arm64 under load"\): hosts never fetch it again, and a node running it steps down to the version it ran before \(list seq \d+, 1 version withdrawn, signed by key ` + wire.KeyID(meshtest.ReleaseKey.Public) + `\)\n` +
		`1 node runs it now: web-01; each steps down at its next reconcile`)
	if code != 0 || !want.MatchString(out) {
		t.Fatalf("withdraw: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	list, rev, err := targets.ReadWithdrawals(ctx, c.JS, names)
	if err != nil {
		t.Fatal(err)
	}
	if err := list.Verify(wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public}), time.Now()); err != nil || len(list.Withdrawn) != 1 {
		t.Fatalf("the list on the bus: %+v, %v", list, err)
	}

	code, out, errOut = runMain(t, env, "withdraw", "v1.2.0", "--key", key, "--reason", "again")
	if code != 0 || !regexp.MustCompile(`^v1\.2\.0 was withdrawn already \(at \S+Z: "crashes on arm64 under load"\); nothing changed\n$`).MatchString(out) {
		t.Errorf("again: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, again, _ := targets.ReadWithdrawals(ctx, c.JS, names); again != rev {
		t.Errorf("withdrawing again wrote the list (revision %d, was %d)", again, rev)
	}

	code, out, errOut = runMain(t, env, "withdraw", "v1.9.0", "--key", key)
	if code != 1 || out != "" || !strings.Contains(errOut, "v1.9.0 is not published on this bus (mesh_host_releases); a withdrawal is never undone, so check the version — or give --force") {
		t.Errorf("unpublished: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := runMain(t, env, "withdraw", "v1.9.0", "--key", key, "--force"); code != 0 || !strings.HasPrefix(out, "withdrew v1.9.0 (at ") {
		t.Errorf("unpublished with --force: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	code, out, _ = runMain(t, env, "withdraw", "--list")
	if code != 0 || !regexp.MustCompile(`^2 versions withdrawn \(list seq \d+, signed by key [0-9a-f]{16}\):\n  v1\.2\.0  \S+Z  "crashes on arm64 under load"\n  v1\.9\.0  \S+Z  -\n$`).MatchString(out) {
		t.Errorf("--list: exit %d:\n%s", code, out)
	}
	code, out, _ = runMain(t, env, "withdraw", "--list", "--json")
	var got wire.Withdrawals
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got.Withdrawn) != 2 || got.Signature == "" {
		t.Errorf("--list --json: exit %d, %v:\n%s", code, err, out)
	}
}

// Two withdraws at the same moment both land: the one that loses the compare-and-set adds its
// entry to the list that won.
func TestConcurrentWithdrawsBothLand(t *testing.T) {
	url, c := startServeConnected(t)
	env := map[string]string{envNATSURL: url}
	key := keyFile(t)
	versions := []string{"v1.1.0", "v1.2.0", "v1.3.0", "v1.4.0"}
	for _, v := range versions {
		announce(t, c, v)
	}
	var wg sync.WaitGroup
	for _, v := range versions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, out, errOut := runMain(t, env, "withdraw", v, "--key", key, "--reason", "bad "+v); code != 0 {
				t.Errorf("withdraw %s: exit %d, %q, %q", v, code, out, errOut)
			}
		}()
	}
	wg.Wait()
	list, _, err := targets.ReadWithdrawals(context.Background(), c.JS, wire.NamesFor(""))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list.Withdrawn {
		got = append(got, e.Version)
	}
	slices.Sort(got)
	if !slices.Equal(got, versions) {
		t.Errorf("withdrawn %v; want %v", got, versions)
	}
}

// A list on the bus signed by another key is added to only when that key is given with --trust.
func TestWithdrawAddsToAListOfAnotherKeyOnlyWhenTrusted(t *testing.T) {
	url, c := startServeConnected(t)
	announce(t, c, "v1.2.0")
	if _, err := targets.Withdraw(context.Background(), c.JS, wire.NamesFor(""), "v1.1.0", "", meshtest.SecondKey.Private, nil); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{envNATSURL: url}
	code, _, errOut := runMain(t, env, "withdraw", "v1.2.0", "--key", keyFile(t))
	if code != 1 || !strings.Contains(errOut, "is not signed by this key nor by a key given to trust") || !strings.Contains(errOut, "--trust") {
		t.Errorf("untrusted list: exit %d, %q", code, errOut)
	}
	pub := filepath.Join(t.TempDir(), "second.pub")
	if err := os.WriteFile(pub, []byte(base64.StdEncoding.EncodeToString(meshtest.SecondKey.Public)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runMain(t, env, "withdraw", "v1.2.0", "--key", keyFile(t), "--trust", pub); code != 0 || !strings.Contains(out, "2 versions withdrawn") {
		t.Errorf("trusted: exit %d, %q, %q", code, out, errOut)
	}
}
